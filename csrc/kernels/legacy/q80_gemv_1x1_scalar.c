/* Q8_0 GEMV, scalar: the reference of Q8_0's in-place arithmetic (legacy_common.h). */
#include "../legacy_common.h"

void if_q80_gemv_1x1_scalar(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                            const uint8_t *w, size_t n0, size_t n1, size_t K) {
    (void)xsum; /* signed values: no zero point, the sums are not needed */
    ifl_gemv_q80_scalar(out, xq, xd, w, n0, n1, K);
}

const if_kq_gemv_kernel if_k_q80_gemv_1x1_scalar = {
    .name = "q80_gemv_1x1_scalar", .mr = 1, .nr = 1, .run = if_q80_gemv_1x1_scalar};
