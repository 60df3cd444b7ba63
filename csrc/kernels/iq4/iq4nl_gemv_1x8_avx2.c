/* IQ4_NL GEMV, avx2 (iq4_avx2.h's body; |level| by VPMADDUBSW, the sign on x). */
#include "../iq4_avx2.h"

void if_iq4nl_gemv_1x8_avx2(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                            const uint8_t *w, size_t n0, size_t n1, size_t K) {
    ifqy_nl_gemv(out, xq, xd, xsum, w, n0, n1, K);
}

const if_kq_gemv_kernel if_k_iq4nl_gemv_1x8_avx2 = {
    .name = "iq4nl_gemv_1x8_avx2",
    .requires = IF_FEATS_AVX2,
    .mr = 1,
    .nr = 8,
    .run = if_iq4nl_gemv_1x8_avx2};
