/* STUB: to be replaced by the real kernel. */
#include "../kernels.h"
void if_q8_gemm_4x4_dotprod(IF_GEMM_ARGS) { if_q8_gemm_1x1_scalar(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs); }
