/* q45k_gemm_16x16_amx_body.h - the AMX Q4_K and Q5_K GEMM body (kquant_amx.h), written once
 * and compiled four times: with real tile instructions (q4k/q4k_gemm_16x16_amx.c,
 * q5k/q5k_gemm_16x16_amx.c, amx_tiles.h) and with the tile operations emulated in plain C
 * (csrc/testing/q4k_gemm_16x16_amx_emulated.c, q5k_..., amx_emu.h: the test-only
 * "amx_emulated" table). Both compile with AVX-512 flags: only the tile operations differ.
 *
 * Per block and 16 weight rows the values are expanded once into three sets of VNNI B tiles
 * (see q45ka_blk), the f16 scales into lanes; then per 16 activation rows and 64-value window
 * 3 TDPBSUD (K = 64), so per block 12 TDPs and 3 tile stores, and the readout
 * sumi = lo + 2^S hi, summ = mn, then the scalar kernel's float step, block after block. The
 * integers are the scalar kernel's sumi and summ (integer sums in another order; summ by the
 * K8 rule that xsum is the sum of its 16 xq values), the float chain is its own, so the same
 * bits; activation and weight rows past M and n1 are never read (tile rows configured to the
 * tail, masked gathers).
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

#if Q45KA_Q5
#define Q45KA_S 3 /* low bits of the scale in lo: 5-bit value times 7 fits a byte */
#define Q45KA_BLOCK_BYTES IF_Q5K_BLOCK_BYTES
#define Q45KA_SCALAR if_q5k_gemm_1x1_scalar
#else
#define Q45KA_S 4 /* 4-bit value times 15 fits a byte */
#define Q45KA_BLOCK_BYTES IF_Q4K_BLOCK_BYTES
#define Q45KA_SCALAR if_q4k_gemm_1x1_scalar
#endif

/* Blocks expanded per chunk: 3 x 12.1 KiB, L1 sized. */
#define Q45KA_NBC 3

/* One block of 16 weight rows, expanded: the values times the low S bits of their sub-block's
 * scale (lo) and times its top 6 - S bits (hi), and the sub-block's 6-bit min repeated (mn),
 * as unsigned bytes in VNNI order per 64-value window (sub-blocks 2w, 2w + 1):
 * sumi = lo . x + 2^S (hi . x) and summ = mn . x, exact in int32. */
typedef struct q45ka_blk {
    uint8_t lo[4][16][64]; /* window w, VNNI row (4 values), 4 bytes per weight row */
    uint8_t hi[4][16][64];
    uint8_t mn[4][16][64];
    float d[16], dmin[16];
} q45ka_blk;

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
    const __m512i t = ifka_gather(k, idx, p + 16 + 32 * c + 4 * q);
    *a = _mm512_and_si512(t, m4);
    *b = _mm512_and_si512(_mm512_srli_epi16(t, 4), m4);
}
#endif

/* Block b's blocks of rows [0, r) at p (row stride rowbytes) into B. */
static void q45ka_expand(q45ka_blk *B, const uint8_t *p, size_t rowbytes, size_t r) {
    const __mmask16 k = ifka_mask(r);
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32((int)rowbytes));
    const __m512i k15 = _mm512_set1_epi32(15), klo = _mm512_set1_epi32((1 << Q45KA_S) - 1);
    const __m512i k63 = _mm512_set1_epi32(63), rep16 = _mm512_set1_epi32(0x00010001);
    const __m512i rep8 = _mm512_set1_epi32(0x01010101);
    /* the f16 scales and the 12 scale bytes (ifk_q4k_scales, lane-wise) */
    const __m512i dd = ifka_gather(k, idx, p);
    _mm512_store_ps(B->d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd)));
    _mm512_store_ps(B->dmin, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16))));
    const __m512i s0 = ifka_gather(k, idx, p + 4), s1 = ifka_gather(k, idx, p + 8);
    const __m512i s2 = ifka_gather(k, idx, p + 12);
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
        const __m512i n0 = _mm512_mullo_epi32(mn[2 * c], rep8);
        const __m512i n1 = _mm512_mullo_epi32(mn[2 * c + 1], rep8);
        IFZ_UNROLL
        for (size_t q = 0; q < 8; q++) {
            __m512i a, b;
            q45ka_values(k, idx, p, c, q, &a, &b);
            _mm512_store_si512((void *)B->lo[c][q], _mm512_mullo_epi16(a, l0));
            _mm512_store_si512((void *)B->hi[c][q], _mm512_mullo_epi16(a, h0));
            _mm512_store_si512((void *)B->lo[c][q + 8], _mm512_mullo_epi16(b, l1));
            _mm512_store_si512((void *)B->hi[c][q + 8], _mm512_mullo_epi16(b, h1));
            _mm512_store_si512((void *)B->mn[c][q], n0);
            _mm512_store_si512((void *)B->mn[c][q + 8], n1);
        }
    }
}

/* One window: A tile TA from xa, the lo / hi / mn B tiles into C tiles CL, CH, CM. */
#define Q45KA_WIN(CL, CH, CM, TA, xa, lda, B, w)                                           \
    do {                                                                                   \
        AMX_TILE_LOAD(TA, (xa), (lda));                                                    \
        AMX_TILE_LOAD(6, (B)->lo[w], 64);                                                  \
        AMX_TILE_LOAD(7, (B)->hi[w], 64);                                                  \
        AMX_TILE_DPBSUD(CL, TA, 6);                                                        \
        AMX_TILE_DPBSUD(CH, TA, 7);                                                        \
        AMX_TILE_LOAD(6, (B)->mn[w], 64);                                                  \
        AMX_TILE_DPBSUD(CM, TA, 6);                                                        \
    } while (0)

/* C tiles 0, 1, 2 = the block's lo . x, hi . x and mn . x over its 4 windows (A tiles 4, 5
 * alternating), stored to c[0..2]. */
#define Q45KA_BLOCK(xa, lda, B, c)                                                         \
    do {                                                                                   \
        AMX_TILE_ZERO(0);                                                                  \
        AMX_TILE_ZERO(1);                                                                  \
        AMX_TILE_ZERO(2);                                                                  \
        Q45KA_WIN(0, 1, 2, 4, (xa), (lda), (B), 0);                                        \
        Q45KA_WIN(0, 1, 2, 5, (xa) + 64, (lda), (B), 1);                                   \
        Q45KA_WIN(0, 1, 2, 4, (xa) + 128, (lda), (B), 2);                                  \
        Q45KA_WIN(0, 1, 2, 5, (xa) + 192, (lda), (B), 3);                                  \
        AMX_TILE_STORE(0, (c)[0], 64);                                                     \
        AMX_TILE_STORE(1, (c)[1], 64);                                                     \
        AMX_TILE_STORE(2, (c)[2], 64);                                                     \
    } while (0)

/* Block b's float step for activation rows [m0, m0 + mr) from its stored C tiles. */
static inline void q45ka_readout(float *out, size_t ldo, const float *xd, size_t nb, size_t m0,
                                 size_t mr, size_t n, __mmask16 km, size_t b,
                                 const q45ka_blk *B, int32_t c[3][256]) {
    const __m512 d = _mm512_load_ps(B->d), dmin = _mm512_load_ps(B->dmin);
    for (size_t rr = 0; rr < mr; rr++) {
        const size_t m = m0 + rr;
        const __m512i sumi =
            _mm512_add_epi32(_mm512_load_si512((const void *)(c[0] + 16 * rr)),
                             _mm512_slli_epi32(_mm512_load_si512((const void *)(c[1] + 16 * rr)), Q45KA_S));
        const __m512i summ = _mm512_load_si512((const void *)(c[2] + 16 * rr));
        const __m512 xdb = _mm512_set1_ps(xd[m * nb + b]);
        float *o = out + m * ldo + n;
        const __m512 acc = b ? _mm512_maskz_loadu_ps(km, o) : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(
            o, km,
            _mm512_sub_ps(
                _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(d, xdb), _mm512_cvtepi32_ps(sumi))),
                _mm512_mul_ps(_mm512_mul_ps(dmin, xdb), _mm512_cvtepi32_ps(summ))));
    }
}

void Q45KA_FN(IF_KQ_GEMM_ARGS);
void Q45KA_FN(float *out, size_t ldo, const int8_t *xq, const float *xd, const int16_t *xsum,
              size_t M, const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QK, rowbytes = nb * Q45KA_BLOCK_BYTES;
    if (M == 0 || n0 >= n1) return;
    if (rowbytes > (size_t)INT32_MAX / 16) { /* gather offsets are int32 */
        Q45KA_SCALAR(out, ldo, xq, xd, xsum, M, w, n0, n1, K);
        return;
    }
    _Alignas(64) q45ka_blk S[Q45KA_NBC];
    _Alignas(64) int32_t cb[3][256];
    _Alignas(64) ifka_cfg cfg;
    size_t cfg_rows = 0;
    AMX_TILE_STATE;
    (void)xsum; /* summ comes from the mins' B tiles (mn . x), the same integer */
    for (size_t n = n0; n < n1; n += 16) {
        const size_t r = n1 - n < 16 ? n1 - n : 16;
        const __mmask16 km = ifka_mask(r);
        for (size_t b0 = 0; b0 < nb; b0 += Q45KA_NBC) {
            const size_t bc = nb - b0 < Q45KA_NBC ? nb - b0 : Q45KA_NBC;
            AMX_BARRIER(); /* earlier tile loads of the scratch stay before its rewrite */
            for (size_t i = 0; i < bc; i++)
                q45ka_expand(&S[i], w + n * rowbytes + (b0 + i) * Q45KA_BLOCK_BYTES, rowbytes, r);
            for (size_t m0 = 0; m0 < M; m0 += 16) {
                const size_t mr = M - m0 < 16 ? M - m0 : 16;
                if (mr != cfg_rows) {
                    ifka_config(&cfg, mr, 64);
                    AMX_TILE_CONFIG(&cfg);
                    cfg_rows = mr;
                }
                for (size_t i = 0; i < bc; i++) {
                    Q45KA_BLOCK(xq + m0 * K + (b0 + i) * IF_QK, K, &S[i], cb);
                    q45ka_readout(out, ldo, xd, nb, m0, mr, n, km, b0 + i, &S[i], cb);
                }
            }
        }
    }
    if (cfg_rows) AMX_TILE_RELEASE();
}

#endif
