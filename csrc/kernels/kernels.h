/* kernels.h - every compiled kernel: its run function and its descriptor (one translation
 * unit per ISA and op, each compiled with only its own ISA flags; the descriptor types are in
 * isaforge.h). Every kernel follows its op's interface and equals the scalar kernel of that
 * op bit for bit.
 *
 * Names, one rule for every kernel: <type>_<op>_<mr>x<nr>_<isa>.
 *   type  the operand type the kernel's arithmetic runs on: q8 (int8 groups with float
 *         scales: Q8 matmuls, and quantize, which produces them), f32 (float32 matmuls,
 *         attention with float arithmetic over any cache, SwiGLU) or i8 (int8 matrix-engine
 *         attention: Q and P quantized to int8).
 *   op    gemv, gemm, quantize, attn, swiglu, geglu.
 *   mr    activation (query) rows per step.
 *   nr    rows of the other operand per step: weight rows = output rows (matmuls), keys per
 *         block (attention); 1 for the ops with a single operand (quantize, swiglu).
 *   isa   the tier whose instructions it uses (scalar: plain C).
 * "vl" stands for a step of the streaming vector length (SME2). The descriptor of kernel NAME
 * is if_k_NAME, its run function if_NAME, and both live in csrc/kernels/<op>/NAME.c. */
#ifndef ISAFORGE_KERNELS_H
#define ISAFORGE_KERNELS_H

#include "isaforge.h"
#include "../cpu/cpu.h"

#define IF_GEMV_ARGS                                                                 \
    float *out, const int8_t *xq, const float *xs, const int8_t *w, const float *ws, \
        size_t n0, size_t n1, size_t K, size_t gs
#define IF_GEMM_ARGS                                                                 \
    float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,             \
        const int8_t *w, const float *ws, size_t n0, size_t n1, size_t K, size_t gs
#define IF_QUANT_ARGS int8_t *q, float *s, const float *x, size_t K, size_t gs
#define IF_Q4_GEMV_ARGS                                                              \
    float *out, const int8_t *xq, const float *xs, const uint8_t *w, const float *ws, \
        const int8_t *cb, size_t n0, size_t n1, size_t K, size_t gs
#define IF_Q4_GEMM_ARGS                                                              \
    float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,             \
        const uint8_t *w, const float *ws, const int8_t *cb, size_t n0, size_t n1,   \
        size_t K, size_t gs
#define IF_HADAMARD_ARGS \
    float *y, const float *x, const float *signs, size_t K, size_t kpad, size_t gs

/* The descriptors: every kernel file's if_k_<name>, declared from the files' names by
 * csrc/manifest.py at configure time (nothing to add here for a new kernel). */
#include "if_kernel_decls.h"

/* Run functions. scalar tier: plain C, -O3, no -march (the baseline every other tier must
 * equal) */
void if_q8_quantize_1x1_scalar(IF_QUANT_ARGS);
void if_q8_gemv_1x1_scalar(IF_GEMV_ARGS);
void if_q8_gemm_1x1_scalar(IF_GEMM_ARGS);
void if_f32_gemv_1x1_scalar(float *out, const float *x, const float *w, size_t n0, size_t n1,
                            size_t K);

/* 4-bit codebook matmuls (csrc/kernels/q4_gemv/, q4_gemm/) and the activation rotation
 * (csrc/kernels/hadamard/): scalar references; AVX2 (VPSHUFB codebook lookup, then the Q8
 * sign-trick VPMADDUBSW + VPMADDWD; the rotation 8 floats per ymm, same butterflies) */
void if_q4_gemv_1x1_scalar(IF_Q4_GEMV_ARGS);
void if_q4_gemm_1x1_scalar(IF_Q4_GEMM_ARGS);
void if_f32_hadamard_1x1_scalar(IF_HADAMARD_ARGS);
#if defined(IF_X86_TIERS)
void if_q4_gemv_1x8_avx2(IF_Q4_GEMV_ARGS);
void if_q4_gemm_16x8_avx2(IF_Q4_GEMM_ARGS);
void if_f32_hadamard_1x1_avx2(IF_HADAMARD_ARGS);
#endif
#if defined(IF_ARM_TIERS)
/* dotprod (also the i8mm and sme2 tiers' 4-bit kernels): TBL codebook lookup + SDOT */
void if_q4_gemv_1x4_dotprod(IF_Q4_GEMV_ARGS);
void if_q4_gemm_1x4_dotprod(IF_Q4_GEMM_ARGS);
/* neon (Armv8.0): TBL lookup + SMULL/SMLAL2/SADALP; GEMV 1 x 4, GEMM 4 x 4 */
void if_q4_gemv_1x4_neon(IF_Q4_GEMV_ARGS);
void if_q4_gemm_4x4_neon(IF_Q4_GEMM_ARGS);
/* i8mm: TBL lookup + SMMLA on the row-major nibbles; GEMM 4 x 4 (decode: the dotprod GEMV) */
void if_q4_gemm_4x4_i8mm(IF_Q4_GEMM_ARGS);
/* sme2, any vector length: GEMV LUTI4 from ZT0 + streaming SDOT (../q4_sme2_common.h), GEMM
 * LUTI4 + SMOPA into ZA tiles, VL x VL */
void if_q4_gemv_1x1_sme2(IF_Q4_GEMV_ARGS);
void if_q4_gemm_vlxvl_sme2(IF_Q4_GEMM_ARGS);
#endif

/* SwiGLU x = silu(x) * g (csrc/kernels/swiglu/): the reference, AVX2 and AVX-512 (same bits) */
void if_f32_swiglu_1x1_scalar(float *x, const float *g, size_t n);
void if_f32_swiglu_1x1_avx2(float *x, const float *g, size_t n);
void if_f32_swiglu_1x1_avx512(float *x, const float *g, size_t n);
/* GeGLU x = gelu_tanh(x) * g (csrc/kernels/geglu/): likewise */
void if_f32_geglu_1x1_scalar(float *x, const float *g, size_t n);
void if_f32_geglu_1x1_avx2(float *x, const float *g, size_t n);
void if_f32_geglu_1x1_avx512(float *x, const float *g, size_t n);

/* attention (csrc/kernels/attention/): the fp32 reference kernel, any cache type */
#define IF_ATTN_ARGS                                                                 \
    const if_attn_job *j, size_t r0, size_t r1, size_t h0, size_t h1, float *scratch
void if_f32_attn_16x64_scalar(IF_ATTN_ARGS);

#if defined(IF_X86_TIERS)
/* AVX-512 fp32 attention (-mavx512f): scores 16 keys per zmm, P.V 16 head dims per zmm,
 * no FMA; equals if_f32_attn_16x64_scalar bit for bit */
void if_f32_attn_16x64_avx512(IF_ATTN_ARGS);
/* fp32 attention with AVX2 (8-wide, same float order, no FMA); equals if_f32_attn_16x64_scalar bit
 * for bit */
void if_f32_attn_16x64_avx2(IF_ATTN_ARGS);
/* int8 matrix-engine attention (attn_i8_matrix_body.h): AMX TDPBSSD/TDPBUSD (the same body with
 * emulated tile ops is test-only: csrc/testing/) */
void if_i8_attn_16x64_amx(IF_ATTN_ARGS);

/* avx2 tier: -mavx2 -mfma; VPMADDUBSW + VPMADDWD with the sign trick (u8 = |x|,
 * s8 = w * sign(x)); GEMV 1 x 8 rows, GEMM 4 x 16 with weights transposed per K block */
void if_q8_quantize_1x1_avx2(IF_QUANT_ARGS);
void if_q8_gemv_1x8_avx2(IF_GEMV_ARGS);
void if_q8_gemm_4x16_avx2(IF_GEMM_ARGS);
/* avx_vnni tier: -mavx2 -mfma -mavxvnni; VPDPBUSD on ymm: the GEMV with the sign trick, the
 * GEMM with the offset trick (u8 = x ^ 0x80, minus 128 * sum(w) per group, exact) */
void if_q8_gemv_1x8_avx_vnni(IF_GEMV_ARGS);
void if_q8_gemm_4x16_avx_vnni(IF_GEMM_ARGS);
/* avx512_vnni tier: -mavx512f -mavx512bw -mavx512vl -mavx512vnni; VPDPBUSD on zmm: GEMV
 * 1 x 16 rows with the sign trick, GEMM 4 x 32 with the offset trick */
void if_q8_quantize_1x1_avx512(IF_QUANT_ARGS);
void if_q8_gemv_1x1_avx512_vnni(IF_GEMV_ARGS);
void if_q8_gemm_4x32_avx512_vnni(IF_GEMM_ARGS);
/* amx tier: -mamx-tile -mamx-int8 (+AVX-512 for readout); TDPBSSD on packed 16x64 tiles */
size_t if_q8_gemm_pack_size_amx(size_t N, size_t K, size_t gs);
void if_q8_gemm_pack_amx(int8_t *dst, const int8_t *w, size_t N, size_t K, size_t gs);
void if_q8_gemm_unpack_amx(int8_t *w, const int8_t *src, size_t N, size_t K, size_t gs);
void if_q8_gemm_16x16_amx(IF_GEMM_ARGS);
/* the 4-bit GEMM: the row-major nibbles expanded per K chunk into VNNI B tiles, TDPBSSD */
void if_q4_gemm_16x16_amx(IF_Q4_GEMM_ARGS);
/* AMX needs the tile configuration loaded on each thread before use; returns 0 on success. */
int if_amx_thread_init(void);
#endif

#if defined(IF_ARM_TIERS)
/* neon tier: Armv8.0 Advanced SIMD only (-march=armv8-a): SMULL/SADALP int8 dot products */
void if_q8_quantize_1x1_neon(IF_QUANT_ARGS);
void if_q8_gemv_1x4_neon(IF_GEMV_ARGS);
void if_q8_gemm_4x4_neon(IF_GEMM_ARGS);
/* dotprod tier: Armv8.2 SDOT (-march=armv8.2-a+dotprod); the decode tier */
void if_q8_gemv_1x4_dotprod(IF_GEMV_ARGS);
void if_q8_gemm_4x4_dotprod(IF_GEMM_ARGS);
/* i8mm tier: Armv8.6 SMMLA 2x8 . 8x2 -> 2x2 int32 (-march=armv8.6-a+i8mm); the prefill tier */
void if_q8_gemm_2x4_i8mm(IF_GEMM_ARGS);
/* sme2 tier: streaming SVE/SME2 (-march=armv9-a+sme2), any streaming vector length:
 * SMOPA outer products into ZA for the GEMM, multi-vector SDOT for the GEMV */
void if_q8_gemv_1xvl_sme2(IF_GEMV_ARGS);
void if_q8_gemm_vlxvl_sme2(IF_GEMM_ARGS);
/* int8 matrix-engine attention (attn_i8_matrix_body.h) with SMOPA / USMOPA */
void if_i8_attn_16x64_sme2(IF_ATTN_ARGS);
#endif

/* K-quant matmuls on the file's Q4_K / Q5_K / Q6_K blocks and the K8 activation quantizer
 * (csrc/kernels/q4k/, q5k/, q6k/, quantize/k8_*): the scalar references */
#define IF_KQ_GEMV_ARGS                                                                  \
    float *out, const int8_t *xq, const float *xd, const int16_t *xsum, const uint8_t *w, \
        size_t n0, size_t n1, size_t K
#define IF_KQ_GEMM_ARGS                                                                  \
    float *out, size_t ldo, const int8_t *xq, const float *xd, const int16_t *xsum,       \
        size_t M, const uint8_t *w, size_t n0, size_t n1, size_t K
void if_q4k_gemv_1x1_scalar(IF_KQ_GEMV_ARGS);
void if_q5k_gemv_1x1_scalar(IF_KQ_GEMV_ARGS);
void if_q6k_gemv_1x1_scalar(IF_KQ_GEMV_ARGS);
void if_q4k_gemm_1x1_scalar(IF_KQ_GEMM_ARGS);
void if_q5k_gemm_1x1_scalar(IF_KQ_GEMM_ARGS);
void if_q6k_gemm_1x1_scalar(IF_KQ_GEMM_ARGS);
void if_k8_quantize_1x1_scalar(int8_t *q, float *d, int16_t *bsum, const float *x, size_t K);
/* bsum[i] = the int16 sum of q[16 i .. 16 i + 16), i < K / 16 */
void if_k8_sums(int16_t *bsum, const int8_t *q, size_t K);

#if defined(IF_X86_TIERS)
/* avx512_vnni: 4 rows per tile, 4 blocks a step; VPERMW-spread scales */
void if_q4k_gemv_1x4_avx512_vnni(IF_KQ_GEMV_ARGS);
void if_q5k_gemv_1x4_avx512_vnni(IF_KQ_GEMV_ARGS);
void if_q6k_gemv_1x4_avx512_vnni(IF_KQ_GEMV_ARGS);
/* avx2 / avx_vnni: 8 rows per tile, one body (kquant_avx2.h) per ISA */
void if_q4k_gemv_1x8_avx2(IF_KQ_GEMV_ARGS);
void if_q5k_gemv_1x8_avx2(IF_KQ_GEMV_ARGS);
void if_q6k_gemv_1x8_avx2(IF_KQ_GEMV_ARGS);
void if_q4k_gemv_1x8_avx_vnni(IF_KQ_GEMV_ARGS);
void if_q5k_gemv_1x8_avx_vnni(IF_KQ_GEMV_ARGS);
void if_q6k_gemv_1x8_avx_vnni(IF_KQ_GEMV_ARGS);
#endif

#if defined(IF_ARM_TIERS)
/* dotprod (also the i8mm and sme2 tiers'): one row at a time, SDOT per sub-block, MLA by the
 * scale, one ADDV per block */
void if_q4k_gemv_1x1_dotprod(IF_KQ_GEMV_ARGS);
void if_q5k_gemv_1x1_dotprod(IF_KQ_GEMV_ARGS);
void if_q6k_gemv_1x1_dotprod(IF_KQ_GEMV_ARGS);
#endif

#endif
