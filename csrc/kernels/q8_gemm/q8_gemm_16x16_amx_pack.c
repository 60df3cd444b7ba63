/* STUB: AMX packing (identity here) and the plain-C emulation of the AMX kernel. */
#include <string.h>
#include "../kernels.h"
size_t if_q8_gemm_pack_size_amx(size_t N, size_t K, size_t gs) { (void)gs; return N * K; }
void if_q8_gemm_pack_amx(int8_t *dst, const int8_t *w, size_t N, size_t K, size_t gs) { (void)gs; memcpy(dst, w, N * K); }
void if_q8_gemm_16x16_amx_emulated(IF_GEMM_ARGS) { if_q8_gemm_1x1_scalar(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs); }
