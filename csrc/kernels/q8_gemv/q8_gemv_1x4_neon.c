/* STUB: to be replaced by the real kernel. */
#include "../kernels.h"
void if_q8_gemv_1x4_neon(IF_GEMV_ARGS) { if_q8_gemv_1x1_scalar(out, xq, xs, w, ws, n0, n1, K, gs); }
