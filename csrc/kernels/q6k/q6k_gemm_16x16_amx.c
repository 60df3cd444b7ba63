/* Q6_K GEMM, AMX (kquant_amx.h): per block and 16 weight rows the 6-bit values are expanded
 * once into 16 VNNI B tiles (one per 16-value sub-block, the unsigned u = q + 32) beside the
 * rows' int8 scales and f16 scale as lanes; then per 16 activation rows 16 TDPBSUD (K = 16),
 * each C tile stored and multiplied by its sub-block scale (VPMULLD) into the int32 sumi, less
 * 32 x the scales times the activations' sums per 16 (VPDPWSSD), and the scalar kernel's float
 * step, block after block. Per output the same integers and float chain as
 * q6k_gemm_1x1_scalar, so the same bits; activation and weight rows past M and n1 are never
 * read (tile rows configured to the tail, masked gathers). */
#include "../kquant_amx.h"

/* Blocks expanded per chunk: 8 x 5.6 KiB, L1 sized. */
#define Q6KA_NBC 8

/* One block of 16 weight rows, expanded. */
typedef struct q6ka_blk {
    uint8_t q[16][4][64]; /* sub-block j, VNNI row (4 values), 4 bytes per weight row */
    int32_t sc[16][16];   /* lane = row */
    int32_t sc32[8][16];  /* 32 x the scales of sub-blocks 2p, 2p + 1 as an int16 pair */
    float d[16];
} q6ka_blk;

/* Block b's blocks of rows [0, r) at p (row stride rowbytes) into B. */
static void q6ka_expand(q6ka_blk *B, const uint8_t *p, size_t rowbytes, size_t r) {
    const __mmask16 k = ifka_mask(r);
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32((int)rowbytes));
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    /* value 128 h + 32 t + l: low 4 bits in ql[64 h + 32 (t & 1) + l] (low nibble for t < 2),
     * top 2 in bits 2t, 2t + 1 of qh[32 h + l] (kquant_common.h, ifk_q6k_u); 4 values of a
     * dword go to VNNI row (l / 4) % 4 of sub-block 8 h + 2 t + l / 16 */
    for (size_t h = 0; h < 2; h++) {
        IFZ_UNROLL
        for (size_t dw = 0; dw < 8; dw++) {
            const __m512i l0 = ifka_gather(k, idx, p + 64 * h + 4 * dw);
            const __m512i l1 = ifka_gather(k, idx, p + 64 * h + 32 + 4 * dw);
            const __m512i hb = ifka_gather(k, idx, p + 128 + 32 * h + 4 * dw);
            const size_t j = 8 * h + dw / 4, q = dw % 4;
            _mm512_store_si512((void *)B->q[j][q],
                               _mm512_or_si512(_mm512_and_si512(l0, m4),
                                               _mm512_and_si512(_mm512_slli_epi16(hb, 4), m30)));
            _mm512_store_si512((void *)B->q[j + 2][q],
                               _mm512_or_si512(_mm512_and_si512(l1, m4),
                                               _mm512_and_si512(_mm512_slli_epi16(hb, 2), m30)));
            _mm512_store_si512((void *)B->q[j + 4][q],
                               _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4),
                                               _mm512_and_si512(hb, m30)));
            _mm512_store_si512((void *)B->q[j + 6][q],
                               _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4),
                                               _mm512_and_si512(_mm512_srli_epi16(hb, 2), m30)));
        }
    }
    for (size_t n = 0; n < 16; n++) {
        int8_t sc[16] = {0};
        float d = 0.0f;
        if (n < r) {
            const uint8_t *blk = p + n * rowbytes;
            memcpy(sc, blk + 192, 16);
            d = ifk_f16(blk + 208);
        }
        for (size_t j = 0; j < 16; j++) B->sc[j][n] = sc[j];
        for (size_t j = 0; j < 8; j++)
            B->sc32[j][n] = (int32_t)((uint32_t)(uint16_t)(int16_t)(32 * sc[2 * j]) |
                                      (uint32_t)(uint16_t)(int16_t)(32 * sc[2 * j + 1]) << 16);
        B->d[n] = d;
    }
}

void if_q6k_gemm_16x16_amx(float *out, size_t ldo, const int8_t *xq, const float *xd,
                           const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                           size_t K) {
    const size_t nb = K / IF_QK, rowbytes = nb * IF_Q6K_BLOCK_BYTES;
    if (M == 0 || n0 >= n1) return;
    if (rowbytes > (size_t)INT32_MAX / 16) { /* gather offsets are int32 */
        if_q6k_gemm_1x1_scalar(out, ldo, xq, xd, xsum, M, w, n0, n1, K);
        return;
    }
    _Alignas(64) q6ka_blk S[Q6KA_NBC];
    _Alignas(64) int32_t cb[16][256];
    _Alignas(64) ifka_cfg cfg;
    size_t cfg_rows = 0;
    for (size_t n = n0; n < n1; n += 16) {
        const size_t r = n1 - n < 16 ? n1 - n : 16;
        const __mmask16 km = ifka_mask(r);
        for (size_t b0 = 0; b0 < nb; b0 += Q6KA_NBC) {
            const size_t bc = nb - b0 < Q6KA_NBC ? nb - b0 : Q6KA_NBC;
            AMX_BARRIER(); /* earlier tile loads of the scratch stay before its rewrite */
            for (size_t i = 0; i < bc; i++)
                q6ka_expand(&S[i], w + n * rowbytes + (b0 + i) * IF_Q6K_BLOCK_BYTES, rowbytes, r);
            for (size_t m0 = 0; m0 < M; m0 += 16) {
                const size_t mr = M - m0 < 16 ? M - m0 : 16;
                if (mr != cfg_rows) {
                    ifka_config(&cfg, mr, 16);
                    AMX_TILE_CONFIG(&cfg);
                    cfg_rows = mr;
                }
                for (size_t i = 0; i < bc; i++) {
                    const size_t b = b0 + i;
                    const int8_t *xa = xq + m0 * K + b * IF_QK;
                    const q6ka_blk *B = &S[i];
                    IFKA_SUB(0, 4, 6, xa, K, B->q[0], cb[0]);
                    IFKA_SUB(1, 5, 7, xa + 16, K, B->q[1], cb[1]);
                    IFKA_SUB(2, 4, 6, xa + 32, K, B->q[2], cb[2]);
                    IFKA_SUB(3, 5, 7, xa + 48, K, B->q[3], cb[3]);
                    IFKA_SUB(0, 4, 6, xa + 64, K, B->q[4], cb[4]);
                    IFKA_SUB(1, 5, 7, xa + 80, K, B->q[5], cb[5]);
                    IFKA_SUB(2, 4, 6, xa + 96, K, B->q[6], cb[6]);
                    IFKA_SUB(3, 5, 7, xa + 112, K, B->q[7], cb[7]);
                    IFKA_SUB(0, 4, 6, xa + 128, K, B->q[8], cb[8]);
                    IFKA_SUB(1, 5, 7, xa + 144, K, B->q[9], cb[9]);
                    IFKA_SUB(2, 4, 6, xa + 160, K, B->q[10], cb[10]);
                    IFKA_SUB(3, 5, 7, xa + 176, K, B->q[11], cb[11]);
                    IFKA_SUB(0, 4, 6, xa + 192, K, B->q[12], cb[12]);
                    IFKA_SUB(1, 5, 7, xa + 208, K, B->q[13], cb[13]);
                    IFKA_SUB(2, 4, 6, xa + 224, K, B->q[14], cb[14]);
                    IFKA_SUB(3, 5, 7, xa + 240, K, B->q[15], cb[15]);
                    const __m512 d = _mm512_load_ps(B->d);
                    for (size_t rr = 0; rr < mr; rr++) {
                        const size_t m = m0 + rr;
                        __m512i sumi = _mm512_setzero_si512(), corr = _mm512_setzero_si512();
                        const int16_t *bs = xsum + m * (K / 16) + b * 16;
                        IFZ_UNROLL
                        for (size_t j = 0; j < 16; j++) {
                            const __m512i c = _mm512_load_si512((const void *)(cb[j] + 16 * rr));
                            sumi = _mm512_add_epi32(
                                sumi, _mm512_mullo_epi32(_mm512_load_si512((const void *)B->sc[j]), c));
                        }
                        IFZ_UNROLL
                        for (size_t j = 0; j < 8; j++) {
                            int32_t pair;
                            memcpy(&pair, bs + 2 * j, 4);
                            corr = _mm512_dpwssd_epi32(corr, _mm512_load_si512((const void *)B->sc32[j]),
                                                       _mm512_set1_epi32(pair));
                        }
                        const __m512 xdb = _mm512_set1_ps(xd[m * nb + b]);
                        float *o = out + m * ldo + n;
                        const __m512 acc = b ? _mm512_maskz_loadu_ps(km, o) : _mm512_setzero_ps();
                        _mm512_mask_storeu_ps(
                            o, km,
                            _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(d, xdb),
                                                             _mm512_cvtepi32_ps(
                                                                 _mm512_sub_epi32(sumi, corr)))));
                    }
                }
            }
        }
    }
    if (cfg_rows) AMX_TILE_RELEASE();
}

const if_kq_gemm_kernel if_k_q6k_gemm_16x16_amx = {.name = "q6k_gemm_16x16_amx",
    .requires = IF_FEAT_AMX_TILE | IF_FEAT_AMX_INT8 | IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI,
    .mr = 16, .nr = 16, .run = if_q6k_gemm_16x16_amx};
