/* Q5_K GEMV, Armv8.2 dotprod (-march=armv8.2-a+dotprod): Q4_K's dotprod kernel with the fifth
 * bit (kquant_dotprod.h). Per 32-byte chunk c the low nibbles (sub-block 2c) and the high ones
 * (2c + 1) each get bit 2c / 2c + 1 of the 32 qh bytes as their bit 4 (0..31: still a signed
 * byte for SDOT), SDOT against their 32 activations, and each sub-block's int32x4 is added
 * times its 6-bit scale (MLA by a scalar), so a block ends in one vector and one ADDV. The mins
 * and the float step as the scalar kernel. */
#include "../kquant_dotprod.h"

void if_q5k_gemv_1x1_dotprod(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                             const uint8_t *w, size_t n0, size_t n1, size_t K) {
    ifkd_gemv_q45(out, xq, xd, xsum, w, n0, n1, K, 1);
}

const if_kq_gemv_kernel if_k_q5k_gemv_1x1_dotprod = {.name = "q5k_gemv_1x1_dotprod",
    .requires = IF_FEAT_ASIMD | IF_FEAT_ASIMDDP, .mr = 1, .nr = 1, .run = if_q5k_gemv_1x1_dotprod};
