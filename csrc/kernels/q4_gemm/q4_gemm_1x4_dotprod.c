/* 4-bit codebook GEMM, Armv8.2 dotprod: each activation row through q4_gemv_1x4_dotprod (TBL
 * lookup + SDOT), so every output is computed exactly as q4_gemv_1x1_scalar. */
#include "../kernels.h"

void if_q4_gemm_1x4_dotprod(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                            const uint8_t *w, const float *ws, const int8_t *cb, size_t n0,
                            size_t n1, size_t K, size_t gs) {
    const size_t ng = gs ? K / gs : 0;
    for (size_t m = 0; m < M; m++)
        if_q4_gemv_1x4_dotprod(out + m * ldo, xq + m * K, xs + m * ng, w, ws, cb, n0, n1, K, gs);
}

const if_q4_gemm_kernel if_k_q4_gemm_1x4_dotprod = {.name = "q4_gemm_1x4_dotprod",
    .requires = IF_FEAT_ASIMD | IF_FEAT_ASIMDDP, .mr = 1, .nr = 4, .run = if_q4_gemm_1x4_dotprod};
