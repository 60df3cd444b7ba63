/* 4-bit codebook GEMV, AVX-512 VNNI (-mavx512f -mavx512bw -mavx512vl -mavx512vnni). Tile: 1
 * activation row x 16 weight rows (one zmm of 16 float accumulators, lane = output row).
 * Products as q4_avx512_common.h: VPSHUFB lookup of u = cb - min (no lookup for Q4_0's
 * cb[i] = cb[0] + i), VPDPBUSD(u, x), plus min * sum(x) per group (sum(x) once per call).
 *
 * Weights are read 64 bytes (128 values = 4 blocks of if_q4_gemv_fn's layout) per row and
 * load: the low nibbles are values 0..15 of each block (128-bit block b of the zmm = 32-value
 * block b), the high nibbles values 16..31; the 128 activations are permuted to match once
 * per tile (two VSHUFI64X2), so 128-bit block b of each VPDPBUSD result holds the products of
 * 32-value block b alone. Per 128 values and row: 1 load, 2 VPANDQ + 1 VPSRLW, 2 VPSHUFB
 * (none for Q4_0), 2 VPDPBUSD. Group sizes that are multiples of 128: each row's int32 vector
 * runs over the group and one 16-vector reduction gives the group's isums (lane = row); other
 * sizes (32, 64, 96, ...): per 128 values the 16 rows' vectors are reduced to 4 vectors of
 * block sums (lane = row; 12 unpack/add pairs and 8 block shuffles for 16 rows), added up per
 * group. Each group then adds ((float)isum * ws) * xs to the accumulator, groups in order:
 * q4_gemv_1x1_scalar's float order. A last chunk of fewer than 128 values (K % 128) is read
 * with byte masks (weights and activations zero past K: zero products), rows past n1 repeat
 * the last row (read, never stored: masked stores). Groups are taken Q4Z_GCH at a time (the
 * sums' buffer); a later pass continues each row's float chain from out. The weight stream is
 * prefetched whole tiles ahead (a full tile's 16 rows are contiguous). */
#include "../q4_avx512_common.h"

#define Q4Z_GCH 512       /* groups per pass */
#define Q4Z_PF_BYTES 9216 /* prefetch distance, rounded to whole tiles (1 .. Q4Z_PF_TILES) */
#define Q4Z_PF_TILES 4

/* The 128 activations at x (nv valid, 32 .. 128, a multiple of 32; zeros past them) permuted
 * to the nibble order: *xl block b = x[32 b, 32 b + 16), *xh block b = x[32 b + 16, 32 b + 32). */
IFZ_INLINE void q4z_xperm(const int8_t *x, size_t nv, __m512i *xl, __m512i *xh) {
    const __m512i a = nv >= 64 ? _mm512_loadu_si512(x) : _mm512_maskz_loadu_epi8(ifz_bytemask(nv), x);
    const __m512i c = nv >= 128 ? _mm512_loadu_si512(x + 64)
                      : nv > 64 ? _mm512_maskz_loadu_epi8(ifz_bytemask(nv - 64), x + 64)
                                : _mm512_setzero_si512();
    *xl = _mm512_shuffle_i64x2(a, c, 0x88);
    *xh = _mm512_shuffle_i64x2(a, c, 0xDD);
}

/* v[r] += the products of row r's 128 values at byte offset o (nv valid) with xl/xh. */
IFZ_INLINE void q4z_rows128(__m512i v[16], const uint8_t *const wr[16], size_t o, size_t nv,
                            __m512i xl, __m512i xh, __m512i lut, const int mode) {
    const __mmask64 bm = ifz_bytemask(nv / 2);
    IFZ_UNROLL
    for (int r = 0; r < 16; r++) {
        const __m512i b = nv >= 128 ? _mm512_loadu_si512(wr[r] + o) : _mm512_maskz_loadu_epi8(bm, wr[r] + o);
        __m512i lo, hi;
        q4z_expand(b, lut, &lo, &hi, mode);
        v[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(v[r], lo, xl), hi, xh);
    }
}

/* 16 row vectors -> o[b] lane r = the sum of v[r]'s 128-bit block b. */
IFZ_INLINE void q4z_blocks(const __m512i v[16], __m512i o[4]) {
    __m512i t[8];
    IFZ_UNROLL
    for (int k = 0; k < 8; k++) t[k] = ifz_hA(v[2 * k], v[2 * k + 1]);
    IFZ_UNROLL
    for (int k = 0; k < 4; k++) t[k] = ifz_hB(t[2 * k], t[2 * k + 1]);
    /* t[k] block b lane q = row 4k + q's sum of block b */
    ifz_blk4x4(t[0], t[1], t[2], t[3], &o[0], &o[1], &o[2], &o[3]);
}

/* 16 row vectors -> lane r = the sum of all of v[r]'s lanes. */
IFZ_INLINE __m512i q4z_net16(const __m512i v[16]) {
    __m512i o[4];
    q4z_blocks(v, o);
    return _mm512_add_epi32(_mm512_add_epi32(o[0], o[1]), _mm512_add_epi32(o[2], o[3]));
}

/* Software prefetch of 16 consecutive 64-byte lines from address a. */
IFZ_INLINE void q4z_prefetch16(uintptr_t a) {
    IFZ_UNROLL
    for (int c = 0; c < 16; c++) _mm_prefetch((const char *)(a + 64 * (uintptr_t)c), _MM_HINT_T0);
}

/* The tile's float state: the accumulator and the transposed scales of 16 groups from sb. */
typedef struct q4z_tile {
    __m512 acc;
    size_t sb;
    _Alignas(64) float st[16 * 16];
} q4z_tile;

/* acc += ((float)(is + msx[g - ga]) * ws[., g]) * xs[g] (lane = row). */
IFZ_INLINE void q4z_fold(q4z_tile *T, __m512i is, const float *const sr[16], const int32_t *msx,
                         const float *xs, size_t g, size_t ga, size_t gend) {
    if (g >= T->sb + 16) {
        T->sb = g;
        ifz_scales_t16(T->st, 16, sr, g, gend - g < 16 ? gend - g : 16);
    }
    is = _mm512_add_epi32(is, _mm512_set1_epi32(msx[g - ga]));
    const __m512 p = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(is), _mm512_load_ps(T->st + (g - T->sb) * 16)),
                                   _mm512_set1_ps(xs[g]));
    T->acc = _mm512_add_ps(T->acc, p);
}

/* Groups [ga, gend) of output rows [n0, n1); msx[g - ga] = min * sum(x of group g). WHOLE:
 * gs is a multiple of 128. */
IFZ_INLINE void q4z_pass(float *out, const int8_t *xq, const float *xs, const uint8_t *w,
                         const float *ws, __m512i lut, const int32_t *msx, size_t n0, size_t n1,
                         size_t K, size_t gs, size_t ga, size_t gend, const int mode,
                         const int whole) {
    const size_t ng = K / gs, rs = K / 2, tile = 16 * rs;
    const size_t pft0 = Q4Z_PF_BYTES / tile;
    const size_t pft = pft0 < 1 ? 1 : pft0 > Q4Z_PF_TILES ? Q4Z_PF_TILES : pft0;
    q4z_tile T;
    for (size_t n = n0; n < n1; n += 16) {
        const size_t nr = n1 - n < 16 ? n1 - n : 16;
        const __mmask16 om = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
        const uint8_t *wr[16];
        const float *sr[16];
        for (size_t r = 0; r < 16; r++) {
            const size_t rr = n + (r < nr ? r : nr - 1);
            wr[r] = w + rr * rs;
            sr[r] = ws + rr * ng;
        }
        /* 8 bytes of a full tile per value index k, the tiles pft ahead */
        const uintptr_t pf = (uintptr_t)w + (n + 16 * pft) * rs;
        T.acc = ga ? _mm512_maskz_loadu_ps(om, out + n) : _mm512_setzero_ps();
        T.sb = ga;
        ifz_scales_t16(T.st, 16, sr, ga, gend - ga < 16 ? gend - ga : 16);
        if (whole) {
            for (size_t g = ga; g < gend; g++) {
                __m512i v[16];
                IFZ_UNROLL
                for (int r = 0; r < 16; r++) v[r] = _mm512_setzero_si512();
                for (size_t k = g * gs; k < (g + 1) * gs; k += 128) {
                    q4z_prefetch16(pf + 8 * k);
                    __m512i xl, xh;
                    q4z_xperm(xq + k, 128, &xl, &xh);
                    q4z_rows128(v, wr, k / 2, 128, xl, xh, lut, mode);
                }
                q4z_fold(&T, q4z_net16(v), sr, msx, xs, g, ga, gend);
            }
        } else {
            const size_t bpg = gs / 32, ke = gend * gs;
            size_t g = ga, nb = 0;
            __m512i cur = _mm512_setzero_si512();
            for (size_t k = ga * gs; k < ke; k += 128) {
                const size_t nv = ke - k < 128 ? ke - k : 128;
                q4z_prefetch16(pf + 8 * k);
                __m512i xl, xh, v[16], o[4];
                q4z_xperm(xq + k, nv, &xl, &xh);
                IFZ_UNROLL
                for (int r = 0; r < 16; r++) v[r] = _mm512_setzero_si512();
                q4z_rows128(v, wr, k / 2, nv, xl, xh, lut, mode);
                q4z_blocks(v, o);
                for (size_t b = 0; b < nv / 32; b++) {
                    cur = _mm512_add_epi32(cur, o[b]);
                    if (++nb == bpg) {
                        q4z_fold(&T, cur, sr, msx, xs, g, ga, gend);
                        g++, nb = 0;
                        cur = _mm512_setzero_si512();
                    }
                }
            }
        }
        _mm512_mask_storeu_ps(out + n, om, T.acc);
    }
}

void if_q4_gemv_1x16_avx512_vnni(float *out, const int8_t *xq, const float *xs, const uint8_t *w,
                                 const float *ws, const int8_t *cb, size_t n0, size_t n1,
                                 size_t K, size_t gs) {
    if (gs == 0 || gs % 32 || K % gs || n1 <= n0) {
        if_q4_gemv_1x1_scalar(out, xq, xs, w, ws, cb, n0, n1, K, gs);
        return;
    }
    const size_t ng = K / gs;
    int32_t cmin, msx[Q4Z_GCH];
    uint8_t lb[16];
    const int mode = q4z_mode(cb, &cmin, lb);
    const __m512i lut = q4z_lut(lb);
    const int whole = gs % 128 == 0;
    for (size_t ga = 0; ga < ng; ga += Q4Z_GCH) {
        const size_t gend = ng - ga < Q4Z_GCH ? ng : ga + Q4Z_GCH;
        q4z_xsums(msx, xq + ga * gs, gend - ga, gs, cmin);
#define Q4Z_RUN(MODE, WHOLE) \
    q4z_pass(out, xq, xs, w, ws, lut, msx, n0, n1, K, gs, ga, gend, MODE, WHOLE)
        if (mode == Q4Z_LIN) {
            if (whole) Q4Z_RUN(Q4Z_LIN, 1);
            else Q4Z_RUN(Q4Z_LIN, 0);
        } else {
            if (whole) Q4Z_RUN(Q4Z_LUT, 1);
            else Q4Z_RUN(Q4Z_LUT, 0);
        }
#undef Q4Z_RUN
    }
}

const if_q4_gemv_kernel if_k_q4_gemv_1x16_avx512_vnni = {.name = "q4_gemv_1x16_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = 1, .nr = 16,
    .run = if_q4_gemv_1x16_avx512_vnni};
