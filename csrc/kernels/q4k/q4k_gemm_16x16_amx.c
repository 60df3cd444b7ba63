/* Q4_K GEMM, AMX (kquant_amx.h): per block and 16 weight rows the nibbles are expanded once
 * into 8 VNNI B tiles (one per 32-value sub-block, the unsigned values 0..15) beside the rows'
 * 6-bit scales, int16 mins and f16 scales as lanes; then per 16 activation rows 8 TDPBSUD
 * (K = 32), each C tile stored and multiplied by its sub-block scale (VPMULLD) into the int32
 * sumi, the mins times the activations' sums per 16 by VPDPWSSD (summ), and the scalar
 * kernel's float step, block after block. Per output the same integers and float chain as
 * q4k_gemm_1x1_scalar, so the same bits; activation and weight rows past M and n1 are never
 * read (tile rows configured to the tail, masked gathers). */
#include "../kquant_amx.h"

/* Blocks expanded per chunk: 4 x 8.8 KiB, L1 sized. */
#define Q4KA_NBC 4

/* One block of 16 weight rows, expanded: the values times the low 4 bits of their sub-block's
 * scale (lo, <= 225) and times its top 2 bits (hi, <= 45), as unsigned bytes in VNNI order
 * per 64-value window (sub-blocks 2w, 2w + 1), so sumi = lo . x + 16 (hi . x). */
typedef struct q4ka_blk {
    uint8_t lo[4][16][64]; /* window w, VNNI row (4 values), 4 bytes per weight row */
    uint8_t hi[4][16][64];
    int32_t mn[8][16];     /* the min twice as int16 (the pair of its two sums per 16) */
    float d[16], dmin[16];
} q4ka_blk;

/* Block b's blocks of rows [0, r) at p (row stride rowbytes) into B. */
static void q4ka_expand(q4ka_blk *B, const uint8_t *p, size_t rowbytes, size_t r) {
    const __mmask16 k = ifka_mask(r);
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32((int)rowbytes));
    const __m512i m4 = _mm512_set1_epi8(15);
    _Alignas(64) int32_t slo[8][16], shi[8][16];
    for (size_t n = 0; n < 16; n++) {
        uint8_t sc[8] = {0}, m[8] = {0};
        float d = 0.0f, dmin = 0.0f;
        if (n < r) {
            const uint8_t *blk = p + n * rowbytes;
            ifk_q4k_scales(blk + 4, sc, m);
            d = ifk_f16(blk);
            dmin = ifk_f16(blk + 2);
        }
        for (size_t j = 0; j < 8; j++) {
            const uint32_t l = sc[j] & 15u, h = (uint32_t)sc[j] >> 4;
            slo[j][n] = (int32_t)(l | l << 16);
            shi[j][n] = (int32_t)(h | h << 16);
            B->mn[j][n] = (int32_t)((uint32_t)m[j] | (uint32_t)m[j] << 16);
        }
        B->d[n] = d;
        B->dmin[n] = dmin;
    }
    /* qs byte 32c + l holds value l of sub-block 2c (low nibble) and of 2c + 1 (high); a
     * 16-bit multiply of two such bytes by a scale piece <= 15 keeps each byte's product
     * (<= 225) in its byte */
    for (size_t c = 0; c < 4; c++) {
        const __m512i l0 = _mm512_load_si512((const void *)slo[2 * c]);
        const __m512i h0 = _mm512_load_si512((const void *)shi[2 * c]);
        const __m512i l1 = _mm512_load_si512((const void *)slo[2 * c + 1]);
        const __m512i h1 = _mm512_load_si512((const void *)shi[2 * c + 1]);
        IFZ_UNROLL
        for (size_t q = 0; q < 8; q++) {
            const __m512i t = ifka_gather(k, idx, p + 16 + 32 * c + 4 * q);
            const __m512i a = _mm512_and_si512(t, m4);
            const __m512i b = _mm512_and_si512(_mm512_srli_epi16(t, 4), m4);
            _mm512_store_si512((void *)B->lo[c][q], _mm512_mullo_epi16(a, l0));
            _mm512_store_si512((void *)B->hi[c][q], _mm512_mullo_epi16(a, h0));
            _mm512_store_si512((void *)B->lo[c][q + 8], _mm512_mullo_epi16(b, l1));
            _mm512_store_si512((void *)B->hi[c][q + 8], _mm512_mullo_epi16(b, h1));
        }
    }
}

/* C tiles CL, CH = the block's lo . x and hi . x over its 4 windows (A tiles 4, 5 and B tiles
 * 6, 7 alternate), stored to cl, ch. */
#define Q4KA_BLOCK(CL, CH, xa, lda, B, cl, ch)                                             \
    do {                                                                                   \
        AMX_TILE_ZERO(CL);                                                                 \
        AMX_TILE_ZERO(CH);                                                                 \
        AMX_TILE_LOAD(4, (xa), (lda));                                                     \
        AMX_TILE_LOAD(6, (B)->lo[0], 64);                                                  \
        AMX_TILE_LOAD(7, (B)->hi[0], 64);                                                  \
        _tile_dpbsud(CL, 4, 6);                                                            \
        _tile_dpbsud(CH, 4, 7);                                                            \
        AMX_TILE_LOAD(5, (xa) + 64, (lda));                                                \
        AMX_TILE_LOAD(6, (B)->lo[1], 64);                                                  \
        AMX_TILE_LOAD(7, (B)->hi[1], 64);                                                  \
        _tile_dpbsud(CL, 5, 6);                                                            \
        _tile_dpbsud(CH, 5, 7);                                                            \
        AMX_TILE_LOAD(4, (xa) + 128, (lda));                                               \
        AMX_TILE_LOAD(6, (B)->lo[2], 64);                                                  \
        AMX_TILE_LOAD(7, (B)->hi[2], 64);                                                  \
        _tile_dpbsud(CL, 4, 6);                                                            \
        _tile_dpbsud(CH, 4, 7);                                                            \
        AMX_TILE_LOAD(5, (xa) + 192, (lda));                                               \
        AMX_TILE_LOAD(6, (B)->lo[3], 64);                                                  \
        AMX_TILE_LOAD(7, (B)->hi[3], 64);                                                  \
        _tile_dpbsud(CL, 5, 6);                                                            \
        _tile_dpbsud(CH, 5, 7);                                                            \
        AMX_TILE_STORE(CL, (cl), 64);                                                      \
        AMX_TILE_STORE(CH, (ch), 64);                                                      \
    } while (0)

/* Block b's float step for activation rows [m0, m0 + mr) from its stored C tiles. */
static inline void q4ka_readout(float *out, size_t ldo, const float *xd, const int16_t *xsum,
                                size_t K, size_t m0, size_t mr, size_t n, __mmask16 km,
                                size_t b, const q4ka_blk *B, const int32_t *cl,
                                const int32_t *ch) {
    const size_t nb = K / IF_QK;
    const __m512 d = _mm512_load_ps(B->d), dmin = _mm512_load_ps(B->dmin);
    for (size_t rr = 0; rr < mr; rr++) {
        const size_t m = m0 + rr;
        const __m512i sumi =
            _mm512_add_epi32(_mm512_load_si512((const void *)(cl + 16 * rr)),
                             _mm512_slli_epi32(_mm512_load_si512((const void *)(ch + 16 * rr)), 4));
        __m512i summ = _mm512_setzero_si512();
        const int16_t *bs = xsum + m * (K / 16) + b * 16;
        IFZ_UNROLL
        for (size_t j = 0; j < 8; j++) {
            int32_t pair;
            memcpy(&pair, bs + 2 * j, 4);
            summ = _mm512_dpwssd_epi32(summ, _mm512_load_si512((const void *)B->mn[j]),
                                       _mm512_set1_epi32(pair));
        }
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

void if_q4k_gemm_16x16_amx(float *out, size_t ldo, const int8_t *xq, const float *xd,
                           const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                           size_t K) {
    const size_t nb = K / IF_QK, rowbytes = nb * IF_Q4K_BLOCK_BYTES;
    if (M == 0 || n0 >= n1) return;
    if (rowbytes > (size_t)INT32_MAX / 16) { /* gather offsets are int32 */
        if_q4k_gemm_1x1_scalar(out, ldo, xq, xd, xsum, M, w, n0, n1, K);
        return;
    }
    _Alignas(64) q4ka_blk S[Q4KA_NBC];
    _Alignas(64) int32_t cb[4][256];
    _Alignas(64) ifka_cfg cfg;
    size_t cfg_rows = 0;
    for (size_t n = n0; n < n1; n += 16) {
        const size_t r = n1 - n < 16 ? n1 - n : 16;
        const __mmask16 km = ifka_mask(r);
        for (size_t b0 = 0; b0 < nb; b0 += Q4KA_NBC) {
            const size_t bc = nb - b0 < Q4KA_NBC ? nb - b0 : Q4KA_NBC;
            AMX_BARRIER(); /* earlier tile loads of the scratch stay before its rewrite */
            for (size_t i = 0; i < bc; i++)
                q4ka_expand(&S[i], w + n * rowbytes + (b0 + i) * IF_Q4K_BLOCK_BYTES, rowbytes, r);
            for (size_t m0 = 0; m0 < M; m0 += 16) {
                const size_t mr = M - m0 < 16 ? M - m0 : 16;
                if (mr != cfg_rows) {
                    ifka_config(&cfg, mr, 64);
                    AMX_TILE_CONFIG(&cfg);
                    cfg_rows = mr;
                }
                const int8_t *xa = xq + m0 * K + b0 * IF_QK;
                /* the tile unit runs block i + 1 (C tiles 2, 3 or 0, 1) before the readout
                 * of block i; readouts stay in block order */
                Q4KA_BLOCK(0, 1, xa, K, &S[0], cb[0], cb[1]);
                for (size_t i = 0; i < bc; i += 2) {
                    if (i + 1 < bc) Q4KA_BLOCK(2, 3, xa + (i + 1) * IF_QK, K, &S[i + 1], cb[2], cb[3]);
                    q4ka_readout(out, ldo, xd, xsum, K, m0, mr, n, km, b0 + i, &S[i], cb[0], cb[1]);
                    if (i + 1 >= bc) break;
                    if (i + 2 < bc) Q4KA_BLOCK(0, 1, xa + (i + 2) * IF_QK, K, &S[i + 2], cb[0], cb[1]);
                    q4ka_readout(out, ldo, xd, xsum, K, m0, mr, n, km, b0 + i + 1, &S[i + 1], cb[2],
                                 cb[3]);
                }
            }
        }
    }
    if (cfg_rows) AMX_TILE_RELEASE();
}

const if_kq_gemm_kernel if_k_q4k_gemm_16x16_amx = {.name = "q4k_gemm_16x16_amx",
    .requires = IF_FEAT_AMX_TILE | IF_FEAT_AMX_INT8 | IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI,
    .mr = 16, .nr = 16, .run = if_q4k_gemm_16x16_amx};
