/* 4-bit codebook GEMV, SME2 (-mcpu=generic+sme2): LUTI4 from ZT0 expands each weight row's
 * nibbles, SDOT with the activation (permuted to LUTI4's order once per K block) gives the
 * exact int32 group sums, one output row at a time with K along the streaming vector (any
 * vector length); see ../q4_sme2_common.h. An ordinary (non-streaming) entry: other group
 * sizes go to the scalar kernel, the rest to the __arm_locally_streaming __arm_new("zt0")
 * body. */
#include "../q4_sme2_common.h"

void if_q4_gemv_1x1_sme2(float *out, const int8_t *xq, const float *xs, const uint8_t *w,
                         const float *ws, const int8_t *cb, size_t n0, size_t n1, size_t K,
                         size_t gs) {
    if (gs == 0 || gs % 32 || K % gs || gs > Q4S_KC) {
        if_q4_gemv_1x1_scalar(out, xq, xs, w, ws, cb, n0, n1, K, gs);
        return;
    }
    if (n0 < n1) q4s_rows(out, 0, xq, xs, 1, w, ws, cb, n0, n1, K, gs);
}

const if_q4_gemv_kernel if_k_q4_gemv_1x1_sme2 = {.name = "q4_gemv_1x1_sme2",
    .requires = IF_FEAT_ASIMD | IF_FEAT_SME | IF_FEAT_SME2, .mr = 1, .nr = 1,
    .run = if_q4_gemv_1x1_sme2};
