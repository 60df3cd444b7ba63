/* isaforge_convert.h - the C core's conversions at load: GGUF tensors to Q8
 * (csrc/ggml_convert.c) and CQ4 quantization (csrc/cq4_convert.c). Part of the C API
 * (isaforge.h includes it); its own header because it is its own job. */
#ifndef ISAFORGE_CONVERT_H
#define ISAFORGE_CONVERT_H

#include "isaforge.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------
 * GGUF tensors to Q8 (csrc/ggml_convert.c): a quantized matrix straight from the file's
 * blocks, one row of float32 scratch per thread, never the matrix in float32.
 * ------------------------------------------------------------------------------------- */

/* GGML type ids (ggml.h enum ggml_type) this converter reads. */
enum {
    IF_GGML_F32 = 0, IF_GGML_F16 = 1, IF_GGML_Q4_0 = 2, IF_GGML_Q4_1 = 3, IF_GGML_Q5_0 = 6,
    IF_GGML_Q5_1 = 7, IF_GGML_Q8_0 = 8, IF_GGML_Q2_K = 10, IF_GGML_Q3_K = 11,
    IF_GGML_Q4_K = 12, IF_GGML_Q5_K = 13, IF_GGML_Q6_K = 14, IF_GGML_IQ4_NL = 20,
    IF_GGML_IQ4_XS = 23, IF_GGML_BF16 = 30,
};
/* if_ggml_to_q8 flag: a Q8_0 tensor at group 32 keeps its quants and fp16 scales as stored,
 * unless a quant in the range is -128 (the kernels need [-127, 127]): then it is requantized. */
#define IF_GGML_KEEP_Q8_0 1u
/* Bytes of a (rows, cols) tensor of GGML type `type`; 0 for an unknown type, a row length
 * that is not a multiple of the block, or an overflow. */
size_t if_ggml_bytes(int type, size_t rows, size_t cols);
/* One row of cols values of GGML type `type` (the row's bytes at `row`) dequantized into out
 * as ggml does, in float32 (gguf.quants.dequantize's values); nothing for an unknown type or a
 * cols that is not a multiple of its block. */
void if_ggml_dequant_row(int type, const void *row, size_t cols, float *out);
/* The type's name ("Q4_K"), NULL if unknown. */
const char *if_ggml_type_name(int type);
/* Row `row` of the (rows, cols) GGML tensor src (the caller checked its size with
 * if_ggml_bytes) as float32 into out (cols values), dequantized exactly as if_ggml_to_q8 does;
 * 0 for an unknown type or a row length that is not a multiple of the block. */
int if_ggml_row_f32(int type, const void *src, size_t cols, size_t row, float *out);
/* Rows [r0, r1) of the (rows, cols) GGML tensor src (src_bytes must be exactly its size) as
 * Q8 at group size gs: q (rows, cols) int8 and s (rows, cols / gs) float32, whole-matrix
 * arrays of which only the range is written. Values are dequantized as ggml does (float32) and
 * quantized per group as if_quantize_fn but rounding half to even and clipping to [-127, 127],
 * i.e. isaforge.quant.q8.quantize_q8 bit for bit. Rows run on the pool's threads (NULL: the
 * caller). *kept (may be NULL) is set to 1 when IF_GGML_KEEP_Q8_0 kept the rows as stored.
 * IF_EINVAL for an unknown type, bad sizes or a non-finite dequantized value. */
if_status if_ggml_to_q8(int type, const void *src, size_t src_bytes, size_t rows, size_t cols,
                        size_t r0, size_t r1, size_t gs, unsigned flags, int8_t *q, float *s,
                        if_pool *pool, int *kept, char *err, size_t errlen);

/* ---------------------------------------------------------------------------------------
 * CQ4 quantization (csrc/cq4_convert.c): isaforge.quant.cq4's "norm" rule bit for bit.
 * ------------------------------------------------------------------------------------- */

/* The (rows, cols) matrix src (type: a GGML type id, its bytes exactly src_bytes; or -1,
 * float32 rows) as CQ4 at group size gs (32, 64 or 128, dividing cols; cols a multiple of 32):
 * nibbles (rows, cols / 2) in the kernels' layout and float32 scales (rows, cols / gs).
 * signs: the +-1 rotation over a row (cols values), or NULL for none. codebook: 16 ascending
 * int8 levels; step: the float value of one int8 step. Rows run on the pool's threads (NULL:
 * the caller). IF_EINVAL for bad sizes or a NaN or infinity in the matrix. */
if_status if_cq4_quantize(int type, const void *src, size_t src_bytes, size_t rows,
                          size_t cols, size_t gs, const float *signs, const int8_t codebook[16],
                          double step, uint8_t *nibbles, float *scales, if_pool *pool,
                          char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* ISAFORGE_CONVERT_H */
