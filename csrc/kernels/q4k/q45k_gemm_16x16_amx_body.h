/* q45k_gemm_16x16_amx_body.h - the AMX Q4_K and Q5_K GEMM body (kquant_amx.h), written once
 * and compiled four times: with real tile instructions (q4k/q4k_gemm_16x16_amx.c,
 * q5k/q5k_gemm_16x16_amx.c, amx_tiles.h) and with the tile operations emulated in plain C
 * (csrc/testing/q4k_gemm_16x16_amx_emulated.c, q5k_..., amx_emu.h: the test-only
 * "amx_emulated" table). Both compile with AVX-512 flags: only the tile operations differ.
 *
 * Per block and 16 weight rows the values are expanded once into two sets of VNNI B tiles
 * (see q45ka_blk), the f16 scales and the mins into lanes; then per pair of 16-row activation
 * tiles and 64-value window 4 TDPBSUD (K = 64: A tiles 4, 5 x B tiles 6, 7 into C tiles 0-3,
 * so each tile load feeds two TDPs), per block 16 TDPs and 4 tile stores, and the readout
 * sumi = lo + 2^S hi per row, summ = the mins times the activations' 32-value sums (4
 * VPDPWSSD of int16 pairs per row: the AVX-512 units take this term, where a third B tile of
 * repeated mins took a third of the TDPs), then the scalar kernel's float step, block after
 * block, each output row read and written once per chunk of Q45KA_NBC blocks. The TDPs, the
 * expansion and the readout add up in time (the readout, on the AVX-512 ports, is the largest),
 * so the readout is kept short.
 * The integers are the scalar kernel's sumi and summ (integer sums in another order; summ by
 * the K8 rule that xsum is the sum of its 16 xq values), the float chain is its own, so the
 * same bits; activation and weight rows past M and n1 are never read (tile rows configured to
 * the tail, masked gathers).
 *
 * The two types differ only in the values and the scale split, both from Q45KA_Q5 (0: Q4_K,
 * 1: Q5_K): a 6-bit scale is split into its low S bits and its top 6 - S so that a value
 * times either piece fits a byte: Q4_K's 4-bit values S = 4 (products <= 225 and <= 45),
 * Q5_K's 5-bit values S = 3 (<= 217 both); q45ka_values reads a dword of values.
 *
 * The includer defines Q45KA_Q5 and Q45KA_FN (the function's name), and AMX_USE_TILE_EMULATION
 * for the emulated twin. */
#ifndef IF_Q45K_GEMM_16X16_AMX_BODY_H
#define IF_Q45K_GEMM_16X16_AMX_BODY_H

#include "../kquant_amx.h"

#ifndef Q45KA_X16
#define Q45KA_X16 0
#endif
#if Q45KA_Q5
#define Q45KA_S 3 /* low bits of the scale in lo: 5-bit value times 7 fits a byte */
#define Q45KA_BLOCK_BYTES IF_Q5K_BLOCK_BYTES
#define Q45KA_SCALAR if_q5k_gemm_1x1_scalar
#else
#define Q45KA_S 4 /* 4-bit value times 15 fits a byte */
#define Q45KA_BLOCK_BYTES IF_Q4K_BLOCK_BYTES
#define Q45KA_SCALAR if_q4k_gemm_1x1_scalar
#endif

/* Blocks expanded per chunk (8.4 KiB each): 2 measured within noise of 1 and ahead of 3-6. */
#define Q45KA_NBC 2
/* Activation rows per piece (xp's rows), weight rows per column chunk (the output tile of
 * 128 x 128 floats, 64 KiB, that the blocks' readouts update, stays in L2) */
#define Q45KA_MP 128
#define Q45KA_NC 128

/* One block of 16 weight rows, expanded: the values times the low S bits of their sub-block's
 * scale (lo) and times its top 6 - S bits (hi), as unsigned bytes in VNNI order per 64-value
 * window (sub-blocks 2w, 2w + 1), so sumi = lo . x + 2^S (hi . x); the 6-bit mins by pairs of
 * sub-blocks (mn), the readout's VPDPWSSD operand for summ. Exact in int32. */
typedef struct q45ka_blk {
    uint8_t lo[4][16][64]; /* window w, VNNI row (4 values), 4 bytes per weight row */
    uint8_t hi[4][16][64];
    int32_t mn[4][16]; /* the mins of sub-blocks 2j, 2j + 1 as an int16 pair, lane = weight row */
    float d[16], dmin[16];
} q45ka_blk;

/* Dword off / 4 of the 16 rows' blocks: gathered from the file's rows (row stride in idx), or
 * with Q45KA_X16 (Q4_K in 16-row groups, if_kq_pack_x16) one load of the group's block. */
#if Q45KA_X16
#define q45ka_ld(k, idx, p, off) _mm512_loadu_si512((const void *)((p) + 16 * (off)))
#else
#define q45ka_ld(k, idx, p, off) ifka_gather((k), (idx), (p) + (off))
#endif

/* Byte j of each int32 lane. */
IFZ_INLINE __m512i q45ka_byte(__m512i v, unsigned j) {
    return _mm512_and_si512(_mm512_srli_epi32(v, 8 * j), _mm512_set1_epi32(0xFF));
}

#if Q45KA_Q5
/* Dword q of chunk c: qs byte 32c + l (at 48) holds the low 4 bits of value l of sub-block 2c
 * (low nibble) and of 2c + 1 (high), bits 2c and 2c + 1 of qh byte l (at 16) their fifth
 * bits; *a, *b the 5-bit values of sub-blocks 2c and 2c + 1, one per byte. */
IFZ_INLINE void q45ka_values(__mmask16 k, __m512i idx, const uint8_t *p, size_t c, size_t q,
                             __m512i *a, __m512i *b) {
    const __m512i m4 = _mm512_set1_epi8(15), one = _mm512_set1_epi8(1);
    const __m512i t = ifka_gather(k, idx, p + 48 + 32 * c + 4 * q);
    const __m512i u = ifka_gather(k, idx, p + 16 + 4 * q);
    const __m512i ua = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(u, (unsigned)(2 * c)), one), 4);
    const __m512i ub = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(u, (unsigned)(2 * c + 1)), one), 4);
    *a = _mm512_or_si512(_mm512_and_si512(t, m4), ua);
    *b = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(t, 4), m4), ub);
}
#else
/* Dword q of chunk c: qs byte 32c + l (at 16) holds value l of sub-block 2c (low nibble) and
 * of 2c + 1 (high); *a, *b those values, one per byte. */
IFZ_INLINE void q45ka_values(__mmask16 k, __m512i idx, const uint8_t *p, size_t c, size_t q,
                             __m512i *a, __m512i *b) {
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i t = q45ka_ld(k, idx, p, 16 + 32 * c + 4 * q);
    *a = _mm512_and_si512(t, m4);
    *b = _mm512_and_si512(_mm512_srli_epi16(t, 4), m4);
}
#endif

/* Block b's blocks of rows [0, r) at p (row stride rowbytes; Q45KA_X16: the group's block) into
 * B. */
static void q45ka_expand(q45ka_blk *B, const uint8_t *p, size_t rowbytes, size_t r) {
    const __mmask16 k = ifka_mask(r);
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32((int)rowbytes));
    const __m512i k15 = _mm512_set1_epi32(15), klo = _mm512_set1_epi32((1 << Q45KA_S) - 1);
    (void)k, (void)idx; /* the row groups' loads need neither */
    const __m512i k63 = _mm512_set1_epi32(63), rep16 = _mm512_set1_epi32(0x00010001);
    /* the f16 scales and the 12 scale bytes (ifk_q4k_scales, lane-wise) */
    const __m512i dd = q45ka_ld(k, idx, p, 0);
    _mm512_store_ps(B->d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd)));
    _mm512_store_ps(B->dmin, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16))));
    const __m512i s0 = q45ka_ld(k, idx, p, 4), s1 = q45ka_ld(k, idx, p, 8);
    const __m512i s2 = q45ka_ld(k, idx, p, 12);
    __m512i sc[8], mn[8];
    IFZ_UNROLL
    for (unsigned j = 0; j < 4; j++) {
        const __m512i a = q45ka_byte(s0, j), b = q45ka_byte(s1, j), c = q45ka_byte(s2, j);
        sc[j] = _mm512_and_si512(a, k63);
        mn[j] = _mm512_and_si512(b, k63);
        sc[j + 4] = _mm512_or_si512(_mm512_and_si512(c, k15), _mm512_slli_epi32(_mm512_srli_epi32(a, 6), 4));
        mn[j + 4] = _mm512_or_si512(_mm512_srli_epi32(c, 4), _mm512_slli_epi32(_mm512_srli_epi32(b, 6), 4));
    }
    /* a 16-bit multiply of two value bytes by a scale piece keeps each byte's product in its
     * byte (the split above) */
    for (size_t c = 0; c < 4; c++) {
        const __m512i l0 = _mm512_mullo_epi32(_mm512_and_si512(sc[2 * c], klo), rep16);
        const __m512i h0 = _mm512_mullo_epi32(_mm512_srli_epi32(sc[2 * c], Q45KA_S), rep16);
        const __m512i l1 = _mm512_mullo_epi32(_mm512_and_si512(sc[2 * c + 1], klo), rep16);
        const __m512i h1 = _mm512_mullo_epi32(_mm512_srli_epi32(sc[2 * c + 1], Q45KA_S), rep16);
        const __m512i pair = _mm512_or_si512(mn[2 * c], _mm512_slli_epi32(mn[2 * c + 1], 16));
        _mm512_store_si512((void *)B->mn[c], pair);
        IFZ_UNROLL
        for (size_t q = 0; q < 8; q++) {
            __m512i a, b;
            q45ka_values(k, idx, p, c, q, &a, &b);
            _mm512_store_si512((void *)B->lo[c][q], _mm512_mullo_epi16(a, l0));
            _mm512_store_si512((void *)B->hi[c][q], _mm512_mullo_epi16(a, h0));
            _mm512_store_si512((void *)B->lo[c][q + 8], _mm512_mullo_epi16(b, l1));
            _mm512_store_si512((void *)B->hi[c][q + 8], _mm512_mullo_epi16(b, h1));
        }
    }
}

/* One window of one activation tile (A tile 4) against the lo / hi B tiles 6, 7 into C tiles
 * 0, 1. */
#define Q45KA_WIN1(xa, lda, B, w)                                                          \
    do {                                                                                   \
        AMX_TILE_LOAD(4, (xa), (lda));                                                     \
        AMX_TILE_LOAD(6, (B)->lo[w], 64);                                                  \
        AMX_TILE_DPBSUD(0, 4, 6);                                                          \
        AMX_TILE_LOAD(7, (B)->hi[w], 64);                                                  \
        AMX_TILE_DPBSUD(1, 4, 7);                                                          \
    } while (0)

/* The same for two activation tiles: the second (A tile 5) into C tiles 2, 3 against the same
 * B tiles, so each B load feeds two TDPs. */
#define Q45KA_WIN2(xa, xb, lda, B, w)                                                      \
    do {                                                                                   \
        Q45KA_WIN1((xa), (lda), (B), (w));                                                 \
        AMX_TILE_LOAD(5, (xb), (lda));                                                     \
        AMX_TILE_DPBSUD(2, 5, 6);                                                          \
        AMX_TILE_DPBSUD(3, 5, 7);                                                          \
    } while (0)

/* The float steps of blocks b0 .. b0 + bc - 1 for activation rows [m0, m0 + mr), from their
 * stored C tiles (block i's lo at c[i][t], hi at c[i][t + 1]): sumi = lo + 2^S hi; summ = the
 * mins times the activations' 32-value sums (int16 pairs of both, VPDPWSSD: exact); then
 * acc = (acc + (d xd) sumi) - (dmin xd) summ block after block, the scalar chain. Each output
 * row is read and written once for the bc blocks (a row stored by one block and loaded again
 * by the next, a masked store then a masked load, waited for the store each time). */
static inline void q45ka_readout(float *out, size_t ldo, const float *xd, const int32_t *xp,
                                 size_t nb, size_t m0, size_t mr, size_t n, __mmask16 km,
                                 size_t b0, size_t bc, const q45ka_blk *S,
                                 int32_t c[Q45KA_NBC][4][256], size_t t) {
    for (size_t rr = 0; rr < mr; rr++) {
        const size_t m = m0 + rr;
        float *o = out + m * ldo + n;
        __m512 acc = b0 ? _mm512_maskz_loadu_ps(km, o) : _mm512_setzero_ps();
        for (size_t i = 0; i < bc; i++) {
            const q45ka_blk *B = &S[i];
            const __m512i h = _mm512_load_si512((const void *)(c[i][t + 1] + 16 * rr));
            const __m512i l = _mm512_load_si512((const void *)(c[i][t] + 16 * rr));
            const __m512i sumi = _mm512_add_epi32(l, _mm512_slli_epi32(h, Q45KA_S));
            const int32_t *x = xp + (i * Q45KA_MP + rr) * 4;
            __m512i summ = _mm512_madd_epi16(_mm512_load_si512((const void *)B->mn[0]),
                                             _mm512_set1_epi32(x[0]));
            for (size_t j = 1; j < 4; j++)
                summ = _mm512_dpwssd_epi32(summ, _mm512_load_si512((const void *)B->mn[j]),
                                           _mm512_set1_epi32(x[j]));
            const __m512 xdb = _mm512_set1_ps(xd[m * nb + b0 + i]);
            const __m512 p = _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(B->d), xdb),
                                           _mm512_cvtepi32_ps(sumi));
            const __m512 q = _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(B->dmin), xdb),
                                           _mm512_cvtepi32_ps(summ));
            acc = _mm512_sub_ps(_mm512_add_ps(acc, p), q);
        }
        _mm512_mask_storeu_ps(o, km, acc);
    }
}

/* Tiles for activation tiles of ma and mb rows (mb 0: one tile) and K = 64 windows. */
static inline void q45ka_config2(ifka_cfg *c, size_t ma, size_t mb) {
    memset(c, 0, sizeof *c);
    c->palette_id = 1;
    const size_t rows[8] = {ma, ma, mb, mb, ma, mb, 16, 16};
    for (int t = 0; t < 8; t++) {
        c->rows[t] = (uint8_t)rows[t];
        c->colsb[t] = rows[t] ? 64 : 0;
    }
}

/* The tile configuration loaded now (rows of the two activation tiles; a = 0: none yet). */
typedef struct q45ka_state {
    _Alignas(64) ifka_cfg cfg;
    size_t a, b;
} q45ka_state;

/* The pieces' activation rows [p0, p0 + pm) against the bc expanded blocks S (blocks b0..) of
 * the 16 weight rows at n (r real, mask km): two activation tiles a pass, per block the TDPs,
 * the tile stores to cb and the readouts; xp the rows' sum pairs (xp[i][row - p0]). */
static void q45ka_rows(float *out, size_t ldo, const int8_t *xq, const float *xd,
                       int32_t xp[Q45KA_NBC][Q45KA_MP][4], size_t nb, size_t K, size_t p0,
                       size_t pm, size_t n, __mmask16 km, size_t b0, size_t bc,
                       const q45ka_blk *S, int32_t cb[Q45KA_NBC][4][256], q45ka_state *st,
                       AMX_TILE_PARAM) {
    for (size_t m0 = p0; m0 < p0 + pm; m0 += 32) {
        const size_t left = p0 + pm - m0;
        const size_t ma = left < 16 ? left : 16, mb = left <= 16 ? 0 : (left < 32 ? left - 16 : 16);
        if (ma != st->a || mb != st->b) {
            q45ka_config2(&st->cfg, ma, mb);
            AMX_TILE_CONFIG(&st->cfg);
            st->a = ma;
            st->b = mb;
        }
        const int8_t *xa = xq + m0 * K, *xb = mb ? xa + 16 * K : xa;
        for (size_t i = 0; i < bc; i++) {
            const size_t o = (b0 + i) * IF_QK;
            AMX_TILE_ZERO(0);
            AMX_TILE_ZERO(1);
            if (mb) {
                AMX_TILE_ZERO(2);
                AMX_TILE_ZERO(3);
                for (size_t w = 0; w < 4; w++)
                    Q45KA_WIN2(xa + o + 64 * w, xb + o + 64 * w, K, &S[i], w);
            } else {
                for (size_t w = 0; w < 4; w++) Q45KA_WIN1(xa + o + 64 * w, K, &S[i], w);
            }
            AMX_TILE_STORE(0, cb[i][0], 64);
            AMX_TILE_STORE(1, cb[i][1], 64);
            if (mb) {
                AMX_TILE_STORE(2, cb[i][2], 64);
                AMX_TILE_STORE(3, cb[i][3], 64);
            }
        }
        const int32_t *xpa = xp[0][m0 - p0];
        q45ka_readout(out, ldo, xd, xpa, nb, m0, ma, n, km, b0, bc, S, cb, 0);
        if (mb) q45ka_readout(out, ldo, xd, xpa + 64, nb, m0 + 16, mb, n, km, b0, bc, S, cb, 2);
    }
}

/* Per block and activation row of the piece, its 32-value sums by pairs (int16: |sum| <= 32
 * x 128), the operands of the mins' VPDPWSSD. */
static void q45ka_pairs(int32_t xp[Q45KA_NBC][Q45KA_MP][4], const int16_t *xsum, size_t ns,
                        size_t p0, size_t pm, size_t b0, size_t bc) {
    for (size_t i = 0; i < bc; i++)
        for (size_t rr = 0; rr < pm; rr++) {
            const __m256i s16 = _mm256_loadu_si256(
                (const __m256i *)(const void *)(xsum + (p0 + rr) * ns + (b0 + i) * 16));
            const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
            _mm_store_si128((__m128i *)(void *)xp[i][rr],
                            _mm_packs_epi32(_mm256_castsi256_si128(s32),
                                            _mm256_extracti128_si256(s32, 1)));
        }
}

void Q45KA_FN(IF_KQ_GEMM_ARGS);
void Q45KA_FN(float *out, size_t ldo, const int8_t *xq, const float *xd, const int16_t *xsum,
              size_t M, const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QK, rowbytes = nb * Q45KA_BLOCK_BYTES, ns = nb * (IF_QK / 16);
    if (M == 0 || n0 >= n1) return;
    if (rowbytes > (size_t)INT32_MAX / 16) { /* gather offsets are int32 */
        Q45KA_SCALAR(out, ldo, xq, xd, xsum, M, w, n0, n1, K);
        return;
    }
    _Alignas(64) q45ka_blk S[Q45KA_NBC];
    _Alignas(64) int32_t cb[Q45KA_NBC][4][256];
    _Alignas(64) int32_t xp[Q45KA_NBC][Q45KA_MP][4];
    q45ka_state st = {.a = 0, .b = 0};
    AMX_TILE_STATE;
    /* pieces of activation rows x chunks of weight rows x chunks of blocks, so that the
     * expanded blocks are reused by every activation tile of the piece and the output tile
     * the readouts update stays in cache */
    for (size_t p0 = 0; p0 < M; p0 += Q45KA_MP) {
        const size_t pm = M - p0 < Q45KA_MP ? M - p0 : Q45KA_MP;
        for (size_t c0 = n0; c0 < n1; c0 += Q45KA_NC) {
            const size_t c1 = n1 - c0 < Q45KA_NC ? n1 : c0 + Q45KA_NC;
            for (size_t b0 = 0; b0 < nb; b0 += Q45KA_NBC) {
                const size_t bc = nb - b0 < Q45KA_NBC ? nb - b0 : Q45KA_NBC;
                q45ka_pairs(xp, xsum, ns, p0, pm, b0, bc);
                for (size_t n = c0; n < c1; n += 16) {
                    const size_t r = c1 - n < 16 ? c1 - n : 16;
                    AMX_BARRIER(); /* earlier tile loads of the scratch stay before its rewrite */
                    for (size_t i = 0; i < bc; i++)
                        q45ka_expand(&S[i],
                                     Q45KA_X16 ? w + n * rowbytes + (b0 + i) * 16 * Q45KA_BLOCK_BYTES
                                               : w + n * rowbytes + (b0 + i) * Q45KA_BLOCK_BYTES,
                                     rowbytes, r);
                    q45ka_rows(out, ldo, xq, xd, xp, nb, K, p0, pm, n, ifka_mask(r), b0, bc, S,
                               cb, &st, AMX_TILE_ARG);
                }
            }
        }
    }
    if (st.a) AMX_TILE_RELEASE();
}

#endif
