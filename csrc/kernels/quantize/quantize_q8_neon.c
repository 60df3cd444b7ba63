/* STUB: to be replaced by the real kernel. */
#include "../kernels.h"
void if_quantize_q8_neon(IF_QUANT_ARGS) { if_quantize_q8_scalar(q, s, x, K, gs); }
