/* Q4_K GEMV, Armv8.2 dotprod (-march=armv8.2-a+dotprod): kquant_dotprod.h's body, one row at
 * a time on the file's blocks. Per 32-byte chunk the low nibbles (sub-block 2c) and the high
 * ones (2c + 1) go through SDOT against their 32 activations, and each sub-block's int32x4 is
 * added times its 6-bit scale (MLA by a scalar), so a block ends in one vector and one ADDV.
 * The mins and the float step as the scalar kernel. */
#include "../kquant_dotprod.h"

void if_q4k_gemv_1x1_dotprod(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                             const uint8_t *w, size_t n0, size_t n1, size_t K) {
    ifkd_gemv_q45(out, xq, xd, xsum, w, n0, n1, K, 0);
}

const if_kq_gemv_kernel if_k_q4k_gemv_1x1_dotprod = {.name = "q4k_gemv_1x1_dotprod",
    .requires = IF_FEAT_ASIMD | IF_FEAT_ASIMDDP, .mr = 1, .nr = 1, .run = if_q4k_gemv_1x1_dotprod};
