/* Q4_1 GEMV, scalar: the reference of the legacy blocks' arithmetic (legacy_common.h). */
#include "../legacy_common.h"

void if_q41_gemv_1x1_scalar(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                            const uint8_t *w, size_t n0, size_t n1, size_t K) {
    ifl_gemv_scalar(IFL_Q41, out, xq, xd, xsum, w, n0, n1, K);
}

const if_kq_gemv_kernel if_k_q41_gemv_1x1_scalar = {
    .name = "q41_gemv_1x1_scalar", .mr = 1, .nr = 1, .run = if_q41_gemv_1x1_scalar};
