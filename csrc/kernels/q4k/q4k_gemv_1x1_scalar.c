/* Q4_K GEMV, scalar: the reference of isaforge.h's K-quant arithmetic (kquant_scalar.h), one
 * output row and one 256-value block at a time, on the file's blocks. Per block the nibbles
 * times the int8 activations per 32-value sub-block, times the 6-bit scale, summed in int32
 * (sumi); the 6-bit mins times the activations' sub-block sums (summ); then the float step. */
#include "../kquant_scalar.h"

void if_q4k_gemv_1x1_scalar(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                            const uint8_t *w, size_t n0, size_t n1, size_t K) {
    ifks_gemv_q45(out, xq, xd, xsum, w, n0, n1, K, 0);
}

const if_kq_gemv_kernel if_k_q4k_gemv_1x1_scalar = {.name = "q4k_gemv_1x1_scalar", .mr = 1,
    .nr = 1, .run = if_q4k_gemv_1x1_scalar};
