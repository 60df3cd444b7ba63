/* STUB: to be replaced by the real avx512_vnni kernel. */
#include "../kernels.h"
void if_q8_gemv_1x4_avx512_vnni(IF_GEMV_ARGS) { if_q8_gemv_1x1_scalar(out, xq, xs, w, ws, n0, n1, K, gs); }
