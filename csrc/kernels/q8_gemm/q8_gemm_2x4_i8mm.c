/* STUB: to be replaced by the real kernel. */
#include "../kernels.h"
void if_q8_gemm_2x4_i8mm(IF_GEMM_ARGS) { if_q8_gemm_1x1_scalar(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs); }
