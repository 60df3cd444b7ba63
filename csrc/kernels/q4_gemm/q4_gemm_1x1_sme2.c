/* 4-bit codebook GEMM, SME2 (-mcpu=generic+sme2): every activation row as the SME2 GEMV
 * computes it (LUTI4 from ZT0 + SDOT, ../q4_sme2_common.h), all M rows in one streaming
 * call, so every output equals q4_gemv_1x1_scalar's bits. */
#include "../q4_sme2_common.h"

void if_q4_gemm_1x1_sme2(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                         const uint8_t *w, const float *ws, const int8_t *cb, size_t n0,
                         size_t n1, size_t K, size_t gs) {
    if (gs == 0 || gs % 32 || K % gs || gs > Q4S_KC) {
        if_q4_gemm_1x1_scalar(out, ldo, xq, xs, M, w, ws, cb, n0, n1, K, gs);
        return;
    }
    if (M && n0 < n1) q4s_rows(out, ldo, xq, xs, M, w, ws, cb, n0, n1, K, gs);
}

const if_q4_gemm_kernel if_k_q4_gemm_1x1_sme2 = {.name = "q4_gemm_1x1_sme2",
    .requires = IF_FEAT_ASIMD | IF_FEAT_SME | IF_FEAT_SME2, .mr = 1, .nr = 1,
    .run = if_q4_gemm_1x1_sme2};
