/* Q4_K GEMM, AMX (kquant_amx.h): per block and 16 weight rows the nibbles are expanded once
 * into 8 VNNI B tiles (one per 32-value sub-block, the unsigned values 0..15) beside the rows'
 * 6-bit scales, int16 mins and f16 scales as lanes; then per 16 activation rows 8 TDPBSUD
 * (K = 32), each C tile stored and multiplied by its sub-block scale (VPMULLD) into the int32
 * sumi, the mins times the activations' sums per 16 by VPDPWSSD (summ), and the scalar
 * kernel's float step, block after block. Per output the same integers and float chain as
 * q4k_gemm_1x1_scalar, so the same bits; activation and weight rows past M and n1 are never
 * read (tile rows configured to the tail, masked gathers). */
#include "../kquant_amx.h"

/* Blocks expanded per chunk: 8 x 5.1 KiB, L1 sized. */
#define Q4KA_NBC 8

/* One block of 16 weight rows, expanded. */
typedef struct q4ka_blk {
    uint8_t q[8][8][64]; /* sub-block j, VNNI row (4 values), 4 bytes per weight row */
    int32_t sc[8][16];   /* lane = row */
    int32_t mn[8][16];   /* the min twice as int16 (the pair of its two sums per 16) */
    float d[16], dmin[16];
} q4ka_blk;

/* Block b's blocks of rows [0, r) at p (row stride rowbytes) into B. */
static void q4ka_expand(q4ka_blk *B, const uint8_t *p, size_t rowbytes, size_t r) {
    const __mmask16 k = ifka_mask(r);
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32((int)rowbytes));
    const __m512i m4 = _mm512_set1_epi8(15);
    /* qs byte 32c + l holds value l of sub-block 2c (low nibble) and of 2c + 1 (high) */
    for (size_t c = 0; c < 4; c++) {
        IFZ_UNROLL
        for (size_t q = 0; q < 8; q++) {
            const __m512i t = ifka_gather(k, idx, p + 16 + 32 * c + 4 * q);
            _mm512_store_si512((void *)B->q[2 * c][q], _mm512_and_si512(t, m4));
            _mm512_store_si512((void *)B->q[2 * c + 1][q],
                               _mm512_and_si512(_mm512_srli_epi16(t, 4), m4));
        }
    }
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
            B->sc[j][n] = sc[j];
            B->mn[j][n] = (int32_t)((uint32_t)m[j] | (uint32_t)m[j] << 16);
        }
        B->d[n] = d;
        B->dmin[n] = dmin;
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
    _Alignas(64) int32_t cb[8][256];
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
                    ifka_config(&cfg, mr, 32);
                    AMX_TILE_CONFIG(&cfg);
                    cfg_rows = mr;
                }
                for (size_t i = 0; i < bc; i++) {
                    const size_t b = b0 + i;
                    const int8_t *xa = xq + m0 * K + b * IF_QK;
                    const q4ka_blk *B = &S[i];
                    IFKA_SUB(0, 4, 6, xa, K, B->q[0], cb[0]);
                    IFKA_SUB(1, 5, 7, xa + 32, K, B->q[1], cb[1]);
                    IFKA_SUB(2, 4, 6, xa + 64, K, B->q[2], cb[2]);
                    IFKA_SUB(3, 5, 7, xa + 96, K, B->q[3], cb[3]);
                    IFKA_SUB(0, 4, 6, xa + 128, K, B->q[4], cb[4]);
                    IFKA_SUB(1, 5, 7, xa + 160, K, B->q[5], cb[5]);
                    IFKA_SUB(2, 4, 6, xa + 192, K, B->q[6], cb[6]);
                    IFKA_SUB(3, 5, 7, xa + 224, K, B->q[7], cb[7]);
                    const __m512 d = _mm512_load_ps(B->d), dmin = _mm512_load_ps(B->dmin);
                    for (size_t rr = 0; rr < mr; rr++) {
                        const size_t m = m0 + rr;
                        __m512i sumi = _mm512_setzero_si512(), summ = _mm512_setzero_si512();
                        const int16_t *bs = xsum + m * (K / 16) + b * 16;
                        IFZ_UNROLL
                        for (size_t j = 0; j < 8; j++) {
                            const __m512i c = _mm512_load_si512((const void *)(cb[j] + 16 * rr));
                            sumi = _mm512_add_epi32(
                                sumi, _mm512_mullo_epi32(_mm512_load_si512((const void *)B->sc[j]), c));
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
                                _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(d, xdb),
                                                                 _mm512_cvtepi32_ps(sumi))),
                                _mm512_mul_ps(_mm512_mul_ps(dmin, xdb), _mm512_cvtepi32_ps(summ))));
                    }
                }
            }
        }
    }
    if (cfg_rows) AMX_TILE_RELEASE();
}

const if_kq_gemm_kernel if_k_q4k_gemm_16x16_amx = {.name = "q4k_gemm_16x16_amx",
    .requires = IF_FEAT_AMX_TILE | IF_FEAT_AMX_INT8 | IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI,
    .mr = 16, .nr = 16, .run = if_q4k_gemm_16x16_amx};
