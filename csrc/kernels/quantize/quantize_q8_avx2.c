/* STUB: to be replaced by the real avx2 kernel. */
#include "../kernels.h"
void if_quantize_q8_avx2(IF_QUANT_ARGS) { if_quantize_q8_scalar(q, s, x, K, gs); }
