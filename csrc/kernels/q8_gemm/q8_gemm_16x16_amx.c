/* STUB: to be replaced by the real AMX kernel. */
#include "../kernels.h"
void if_q8_gemm_16x16_amx(IF_GEMM_ARGS) { if_q8_gemm_16x16_amx_emulated(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs); }
int if_amx_thread_init(void) { return 0; }
