/* kquant_gemv_avx512.h - the AVX-512 VNNI K-quant GEMV body (q4k/q4k_gemv_1x4_avx512_vnni.c,
 * q5k/q5k_gemv_1x4_avx512_vnni.c, q6k/q6k_gemv_1x4_avx512_vnni.c: each calls ifkz_gemv with
 * its type) and the helpers that cut the per-row work of a block: the 6-bit scales unpacked
 * with vector ops, the f16 block scales gathered as one word per lane, and the 16-lane
 * reduction folded in as the sums come so few vectors stay live.
 * Decode reads far more weight bytes than any cache holds, so the order of the reads can set
 * the speed. Cold on Zen 5 at 1 thread (1B model's shapes), loads alone in 16 row streams, one
 * block each a step, read Q6_K's 210-byte blocks at ~21 GB/s, the same loads over 4 rows 4
 * blocks a step at 26-33 GB/s (8 rows 2 blocks a step 5-14 % below 4 rows). So every type
 * takes 4-row tiles and a step takes each row's next 4 blocks (4 streams of 576 / 704 / 840
 * bytes): lane 4k + r holds (block k, row r), the integer sums and the float products are
 * formed for the 16 pairs at once, then each row's chain of additions runs block by block
 * (128-bit lane 0, 1, 2, 3 in turn), the scalar kernel's order. Against a 16-row body read one
 * block a step, paired rounds: Q5_K +3-9 % cold and ~+13 % hot, Q6_K +5-31 % cold. Q4_K's
 * 144-byte blocks read ~29 GB/s in either order from 4 KiB pages, where the 4-row body ran
 * 5-7 % slower at K = 2048 (the activation permutes and mins sums serve 4 rows instead of
 * 16); from the weight arena's 2 MiB pages it decodes the 1B Q4_K_M file ~4 % and the 3B one
 * ~8 % faster at 1 thread, so Q4_K takes it too. Every result equals the scalar kernel's bit
 * for bit.
 * Include only from translation units compiled with -mavx512f -mavx512bw -mavx512vl
 * -mavx512vnni. */
#ifndef IF_KQUANT_GEMV_AVX512_H
#define IF_KQUANT_GEMV_AVX512_H

#include "kquant_avx512.h"

/* The body prefetches into L1 the tile about IFKZ_GEMV_PF_BYTES ahead, rounded up to whole
 * tiles, a step's share of its bytes per step (into L1 rather than two tiles ahead into L2
 * lifted a 16-row body from ~20 to ~25 GB/s cold and costs nothing hot). At K = 2048 16 rows
 * ahead (~26 KiB) was best or within noise of 8, 32 and 64 rows and of L2 (T1), but at
 * K = 8192 16 rows are 105 KiB, more than L1 holds, and 16 KiB ahead read ~12 % faster;
 * prefetching each row's own blocks instead of the tile's bytes in order measured 10-20 %
 * slower at K = 2048 (a hint: a line past the weights is never read). */
#ifndef IFKZ_GEMV_PF_BYTES
#define IFKZ_GEMV_PF_BYTES 16384
#endif
#ifndef IFKZ_GEMV_PF_HINT
#define IFKZ_GEMV_PF_HINT _MM_HINT_T0
#endif
IFZ_INLINE void ifkz_gemv_prefetch(const uint8_t *p, size_t n) {
    for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char *)(p + o), IFKZ_GEMV_PF_HINT);
}

/* Q4_K / Q5_K's 12 scale bytes at s -> sc[0..7] in the low 8 bytes, m[0..7] in the high 8
 * (ifk_q4k_scales' packing), from one 16-byte load (s + 12..15 lie in the block's next field
 * and are dropped): dword k of the load is ggml's u[k]; six vector ops replace the scalar
 * unpack and its four inserts. */
IFZ_INLINE __m128i ifkz_q4k_scales_v(const uint8_t *s) {
    const __m128i u = _mm_loadu_si128((const __m128i *)(const void *)s);
    const __m128i lo6 = _mm_and_si128(u, _mm_set1_epi8(0x3F)); /* [sc_lo, m_lo, ., .] */
    /* [u2 & 0x0f.., (u2 >> 4) & 0x0f..] | [(u0 >> 6) << 4, (u1 >> 6) << 4] per byte */
    const __m128i nib = _mm_and_si128(
        _mm_srlv_epi32(_mm_shuffle_epi32(u, 0xAA), _mm_set_epi32(0, 0, 4, 0)), _mm_set1_epi8(15));
    const __m128i top = _mm_and_si128(_mm_srli_epi32(u, 2), _mm_set1_epi8(0x30));
    return _mm_unpacklo_epi32(lo6, _mm_or_si128(nib, top));
}

/* A VPERMW index: 128-bit block k's words 0-3 all select word i[k], words 4-7 word j[k] (the
 * layout of VPACKSSDW(p, q): per block, p's four dwords then q's, as words). */
IFZ_INLINE __m512i ifkz_spread2(int i0, int j0, int i1, int j1, int i2, int j2, int i3, int j3) {
    return _mm512_set_epi16(j3, j3, j3, j3, i3, i3, i3, i3, j2, j2, j2, j2, i2, i2, i2, i2, j1,
                            j1, j1, j1, i1, i1, i1, i1, j0, j0, j0, j0, i0, i0, i0, i0);
}

/* Two sub-block products scaled in integers: p = VPDPBUSD(u, x) and q = VPDPBUSD(v, y) (each
 * dword a sum of 4 products, |.| < 2^15 for unsigned values below 64 against int8, so
 * VPACKSSDW never saturates), packed to words and multiplied by their scales (spread by
 * VPERMW with an ifkz_spread2 index) in one VPDPWSSD into acc: 5 instructions per 128 values
 * where VPMADDUBSW + VPDPWSSD per operand take 6. */
IFZ_INLINE __m512i ifkz_dp2(__m512i acc, __m512i u, __m512i x, __m512i v, __m512i y,
                            __m512i idx, __m512i sc16) {
    const __m512i z = _mm512_setzero_si512();
    const __m512i pq =
        _mm512_packs_epi32(_mm512_dpbusd_epi32(z, u, x), _mm512_dpbusd_epi32(z, v, y));
    return _mm512_dpwssd_epi32(acc, pq, _mm512_permutexvar_epi16(idx, sc16));
}

/* The 16-vector reduction of ifkz_net16, taken as the vectors come: vector i is folded into
 * the pairwise tree so at most one partial per level stays live. Lane i of the final value =
 * the sum of vector i's lanes (exact int32, the same sums as ifkz_net16). */
typedef struct {
    __m512i a, b[4], c;
} ifkz_tree16;

IFZ_INLINE void ifkz_tree_add(ifkz_tree16 *t, int r, __m512i v, __m512i *prev) {
    if (!(r & 1)) {
        *prev = v;
        return;
    }
    const __m512i a = ifz_hA(*prev, v);
    if (!(r & 2)) {
        t->a = a;
        return;
    }
    t->b[r >> 2] = ifz_hB(t->a, a);
}

IFZ_INLINE __m512i ifkz_tree_sum(const ifkz_tree16 *t) {
    return ifz_hC(ifz_hC(t->b[0], t->b[1]), ifz_hC(t->b[2], t->b[3]));
}

enum { IFKZ_Q4K = 0, IFKZ_Q5K = 1, IFKZ_Q6K = 2 };

/* Lane 4k + r of the step's 16 lanes is (block k, row r): per lane xd of the step's block k
 * (nk blocks at b; lanes past them are zero and never folded). */
IFZ_INLINE __m512 ifkz_xd4(const float *xd, size_t b, int nk) {
    const __m128 v = _mm_maskz_loadu_ps((__mmask8)((1u << nk) - 1), xd + b);
    return _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                                 _mm512_castps128_ps512(v));
}

/* Fold the step's per-(block, row) float terms into the 4 rows' state in block order: block
 * k's terms are 128-bit lane k, so each row's chain of additions is the scalar kernel's. q45
 * takes off q (the mins term) after adding p, as acc = (acc + p) - q. */
IFZ_INLINE __m128 ifkz_fold(__m128 acc, __m512 p, __m512 q, int nk, const int q45) {
    acc = _mm_add_ps(acc, _mm512_castps512_ps128(p));
    if (q45) acc = _mm_sub_ps(acc, _mm512_castps512_ps128(q));
    if (nk > 1) {
        acc = _mm_add_ps(acc, _mm512_extractf32x4_ps(p, 1));
        if (q45) acc = _mm_sub_ps(acc, _mm512_extractf32x4_ps(q, 1));
    }
    if (nk > 2) {
        acc = _mm_add_ps(acc, _mm512_extractf32x4_ps(p, 2));
        if (q45) acc = _mm_sub_ps(acc, _mm512_extractf32x4_ps(q, 2));
    }
    if (nk > 3) {
        acc = _mm_add_ps(acc, _mm512_extractf32x4_ps(p, 3));
        if (q45) acc = _mm_sub_ps(acc, _mm512_extractf32x4_ps(q, 3));
    }
    return acc;
}

/* nk (1..4) Q4_K (q5 = 0) or Q5_K (q5 = 1) blocks at b of the 4 rows into acc (lane = row).
 * Per row and block: the 128 nibble bytes in two loads; in each, the low nibbles are
 * sub-blocks 4c and 4c + 2 (128-bit blocks 0-1 and 2-3) and the high ones 4c + 1 and 4c + 3,
 * against activations permuted once per block to match (VSHUFI64X2); 4 VPDPBUSD, packed by
 * pairs to words (VPACKSSDW), then 2 VPDPWSSD with the 6-bit scales spread by VPERMW. Q5_K
 * adds each value's bit 4 from qh: the 32 qh bytes loaded twice into one register (one copy
 * per 256-bit half, whose two sub-blocks differ), then per 64-byte nibble operand VPTESTMB
 * against the two sub-blocks' bits and a masked VPADDB of 16; values 0..31 against int8
 * activations keep VPDPBUSD's dwords within 4 * 31 * 128 < 2^15 (VPACKSSDW exact). The scales
 * and mins are unpacked from one 16-byte load with vector ops; the mins times the
 * activations' 32-value sums (VPMADDWD) go to 4 vectors, summed by two in-block reduction
 * steps. (Block k, row r) sums land in lane 4k + r; then per lane (d * xd) * sumi and
 * (dmin * xd) * summ, folded per row in block order: acc = (acc + p) - q, the scalar step. */
IFZ_INLINE __m128 ifkz_gemv4_q45(__m128 acc, const uint8_t *const rows[4], size_t b, int nk,
                                 const int8_t *xq, const float *xd, const int16_t *xsum,
                                 const int q5) {
    const size_t bb = q5 ? IF_Q5K_BLOCK_BYTES : IF_Q4K_BLOCK_BYTES, qs = q5 ? 48 : 16;
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i pa = ifkz_spread2(0, 1, 0, 1, 2, 3, 2, 3);
    const __m512i pb = ifkz_spread2(4, 5, 4, 5, 6, 7, 6, 7);
    ifkz_tree16 tr;
    __m512i prev = _mm512_setzero_si512();
    __m512i mz[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                     _mm512_setzero_si512()};
    _Alignas(64) uint32_t dm[16];
    IFZ_UNROLL
    for (int k = 0; k < 4; k++) {
        /* blocks past the nk real ones repeat the last: computed, never folded */
        const size_t bk = b + (size_t)(k < nk ? k : nk - 1);
        const int8_t *x = xq + bk * IF_QK;
        const __m512i x0 = _mm512_loadu_si512(x), x1 = _mm512_loadu_si512(x + 64);
        const __m512i x2 = _mm512_loadu_si512(x + 128), x3 = _mm512_loadu_si512(x + 192);
        const __m512i xa_lo = _mm512_shuffle_i64x2(x0, x1, 0x44);
        const __m512i xa_hi = _mm512_shuffle_i64x2(x0, x1, 0xEE);
        const __m512i xb_lo = _mm512_shuffle_i64x2(x2, x3, 0x44);
        const __m512i xb_hi = _mm512_shuffle_i64x2(x2, x3, 0xEE);
        /* the 8 sums of 32 activations (pairs of the 16-value sums) as int16 */
        const __m256i s16 = _mm256_loadu_si256((const __m256i *)(const void *)(xsum + bk * 16));
        const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
        const __m128i bs32 =
            _mm_packs_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
        IFZ_UNROLL
        for (int r = 0; r < 4; r++) {
            const int i = 4 * k + r;
            const uint8_t *blk = rows[r] + bk * bb;
            memcpy(&dm[i], blk, 4);
            const __m128i scm = ifkz_q4k_scales_v(blk + 4);
            const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(scm));
            const __m128i mins =
                _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(scm, 8)), bs32);
            mz[r] = _mm512_inserti32x4(mz[r], mins, k);
            const __m512i qa = _mm512_loadu_si512(blk + qs);
            const __m512i qb = _mm512_loadu_si512(blk + qs + 64);
            __m512i ua_lo = _mm512_and_si512(qa, m4);
            __m512i ua_hi = _mm512_and_si512(_mm512_srli_epi16(qa, 4), m4);
            __m512i ub_lo = _mm512_and_si512(qb, m4);
            __m512i ub_hi = _mm512_and_si512(_mm512_srli_epi16(qb, 4), m4);
            if (q5) {
                const __m512i qh2 = _mm512_broadcast_i64x4(
                    _mm256_loadu_si256((const __m256i *)(const void *)(blk + 16)));
                ua_lo = ifkz_q5bit(ua_lo, qh2, 0, 2);
                ua_hi = ifkz_q5bit(ua_hi, qh2, 1, 3);
                ub_lo = ifkz_q5bit(ub_lo, qh2, 4, 6);
                ub_hi = ifkz_q5bit(ub_hi, qh2, 5, 7);
            }
            const __m512i a0 =
                ifkz_dp2(_mm512_setzero_si512(), ua_lo, xa_lo, ua_hi, xa_hi, pa, sc16);
            ifkz_tree_add(&tr, i, ifkz_dp2(a0, ub_lo, xb_lo, ub_hi, xb_hi, pb, sc16), &prev);
        }
    }
    const __m512i sumi = ifkz_tree_sum(&tr);
    /* lane 4k + r = vector r's block k = (block k, row r) */
    const __m512i summ = ifz_hB(ifz_hA(mz[0], mz[1]), ifz_hA(mz[2], mz[3]));
    const __m512 xdv = ifkz_xd4(xd, b, nk);
    const __m512i dmv = _mm512_load_si512(dm);
    const __m512 t1 = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(dmv)), xdv);
    const __m256i mhv = _mm512_cvtepi32_epi16(_mm512_srli_epi32(dmv, 16));
    const __m512 t2 = _mm512_mul_ps(_mm512_cvtph_ps(mhv), xdv);
    return ifkz_fold(acc, _mm512_mul_ps(t1, _mm512_cvtepi32_ps(sumi)),
                     _mm512_mul_ps(t2, _mm512_cvtepi32_ps(summ)), nk, 1);
}

/* nk (1..4) Q6_K blocks at b of the 4 rows into acc (lane = row). Per row, block and
 * 128-value half: one load of the 64 low-nibble bytes and a broadcast of the 32 high-bit
 * bytes; the low nibbles are values 0..63 of the half, the high ones 64..127, in natural
 * order against the activations; their top two bits come from the high-bit bytes shifted per
 * 256-bit half (VPSLLVW / VPSRLVW) and masked to bits 4-5. Each 128-bit block is one
 * 16-value sub-block: VPMADDUBSW of the unsigned values u = q + 32, then VPDPWSSD with its
 * int8 scale spread by VPERMW. The 32 * sum(x) part of u is taken off per row with one
 * VPMADDWD of the 16 scales and the activations' 16-value sums. (Block k, row r) sums land
 * in lane 4k + r; per lane (d * xd) * sumi, folded per row in block order: acc = acc + p. */
IFZ_INLINE __m128 ifkz_gemv4_q6(__m128 acc, const uint8_t *const rows[4], size_t b, int nk,
                                const int8_t *xq, const float *xd, const int16_t *xsum) {
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    /* per 256-bit half of the broadcast high bits: quarter 0 / 1 (low nibbles), 2 / 3 (high) */
    const __m512i sh_lo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i sh_hi = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i p0 = ifkz_spread(0, 1, 2, 3), p1 = ifkz_spread(4, 5, 6, 7);
    const __m512i p2 = ifkz_spread(8, 9, 10, 11), p3 = ifkz_spread(12, 13, 14, 15);
    __m512i v[16];
    _Alignas(32) uint16_t dh[16];
    IFZ_UNROLL
    for (int k = 0; k < 4; k++) {
        /* blocks past the nk real ones repeat the last: computed, never folded */
        const size_t bk = b + (size_t)(k < nk ? k : nk - 1);
        const int8_t *x = xq + bk * IF_QK;
        const __m512i x0 = _mm512_loadu_si512(x), x1 = _mm512_loadu_si512(x + 64);
        const __m512i x2 = _mm512_loadu_si512(x + 128), x3 = _mm512_loadu_si512(x + 192);
        const __m256i s16 = _mm256_loadu_si256((const __m256i *)(const void *)(xsum + bk * 16));
        IFZ_UNROLL
        for (int r = 0; r < 4; r++) {
            const int i = 4 * k + r;
            const uint8_t *blk = rows[r] + bk * IF_Q6K_BLOCK_BYTES;
            memcpy(&dh[i], blk + 208, 2);
            const __m256i sc = _mm256_cvtepi8_epi16(
                _mm_loadu_si128((const __m128i *)(const void *)(blk + 192)));
            const __m512i sc16 = _mm512_castsi256_si512(sc);
            const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc, s16), 5);
            __m512i a = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), corr));
            IFZ_UNROLL
            for (int h = 0; h < 2; h++) {
                const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
                const __m512i qh = _mm512_broadcast_i64x4(
                    _mm256_loadu_si256((const __m256i *)(const void *)(blk + 128 + 32 * h)));
                const __m512i lo =
                    _mm512_or_si512(_mm512_and_si512(ql, m4),
                                    _mm512_and_si512(_mm512_sllv_epi16(qh, sh_lo), m30));
                const __m512i hi =
                    _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                    _mm512_and_si512(_mm512_srlv_epi16(qh, sh_hi), m30));
                a = _mm512_dpwssd_epi32(a, _mm512_maddubs_epi16(lo, h ? x2 : x0),
                                        _mm512_permutexvar_epi16(h ? p2 : p0, sc16));
                a = _mm512_dpwssd_epi32(a, _mm512_maddubs_epi16(hi, h ? x3 : x1),
                                        _mm512_permutexvar_epi16(h ? p3 : p1, sc16));
            }
            v[i] = a;
        }
    }
    const __m512i sumi = ifkz_net16(v);
    const __m512 t = _mm512_mul_ps(ifkz_f16x16(dh), ifkz_xd4(xd, b, nk));
    return ifkz_fold(acc, _mm512_mul_ps(t, _mm512_cvtepi32_ps(sumi)), _mm512_setzero_ps(), nk,
                     0);
}

/* The GEMV of type kind (a constant in each file): 4 weight rows per tile on the file's
 * blocks, read in place 4 blocks of each row per step (4 row streams), then the type's step
 * into the tile's float state (lane = row); the tile about IFKZ_GEMV_PF_BYTES ahead (whole
 * tiles) is prefetched, a step's share per step. */
IFZ_INLINE void ifkz_gemv(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                         const uint8_t *w, size_t n0, size_t n1, size_t K, const int kind) {
    const size_t bb = kind == IFKZ_Q6K   ? IF_Q6K_BLOCK_BYTES
                      : kind == IFKZ_Q5K ? IF_Q5K_BLOCK_BYTES
                                         : IF_Q4K_BLOCK_BYTES;
    const size_t nb = K / IF_QK, rowbytes = nb * bb;
    const size_t tile = rowbytes ? 4 * rowbytes : 1; /* K = 0: no division by 0 */
    const size_t pf_rows = (IFKZ_GEMV_PF_BYTES + tile - 1) / tile * 4;
    for (size_t n = n0; n < n1; n += 4) {
        const size_t nr = n1 - n < 4 ? n1 - n : 4;
        const uint8_t *rows[4];
        for (size_t r = 0; r < 4; r++) rows[r] = w + (n + (r < nr ? r : nr - 1)) * rowbytes;
        __m128 acc = _mm_setzero_ps();
        const uint8_t *next = w + (n + pf_rows) * rowbytes;
        for (size_t b = 0; b < nb; b += 4) {
            const int nk = nb - b < 4 ? (int)(nb - b) : 4;
            ifkz_gemv_prefetch(next + b * 4 * bb, (size_t)nk * 4 * bb);
            acc = kind == IFKZ_Q6K
                      ? ifkz_gemv4_q6(acc, rows, b, nk, xq, xd, xsum)
                      : ifkz_gemv4_q45(acc, rows, b, nk, xq, xd, xsum, kind == IFKZ_Q5K);
        }
        _mm_mask_storeu_ps(out + n, (__mmask8)((1u << nr) - 1), acc);
    }
}

#endif
