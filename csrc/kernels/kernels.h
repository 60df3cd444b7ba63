/* kernels.h - declarations of every compiled kernel variant (one translation unit per ISA and
 * op, each compiled with only its own ISA flags). Names state op, data types, tile and ISA:
 * q8_gemm_4x32_avx512_vnni computes 4 activation rows x 4 output rows per inner step.
 * Every variant follows the interface typedefs in isaforge.h and equals the scalar variant bit
 * for bit. */
#ifndef ISAFORGE_KERNELS_H
#define ISAFORGE_KERNELS_H

#include "isaforge.h"

#define IF_GEMV_ARGS                                                                 \
    float *out, const int8_t *xq, const float *xs, const int8_t *w, const float *ws, \
        size_t n0, size_t n1, size_t K, size_t gs
#define IF_GEMM_ARGS                                                                 \
    float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,             \
        const int8_t *w, const float *ws, size_t n0, size_t n1, size_t K, size_t gs
#define IF_QUANT_ARGS int8_t *q, float *s, const float *x, size_t K, size_t gs

/* scalar tier: plain C, -O3, no -march (the baseline every other tier must equal) */
void if_quantize_q8_scalar(IF_QUANT_ARGS);
void if_q8_gemv_1x1_scalar(IF_GEMV_ARGS);
void if_q8_gemm_1x1_scalar(IF_GEMM_ARGS);
void if_f32_gemv_1x1_scalar(float *out, const float *x, const float *w, size_t n0, size_t n1,
                            size_t K);

/* SwiGLU x = silu(x) * g (csrc/kernels/swiglu/): the reference, AVX2 and AVX-512 (same bits) */
void if_swiglu_scalar(float *x, const float *g, size_t n);
void if_swiglu_avx2(float *x, const float *g, size_t n);
void if_swiglu_avx512(float *x, const float *g, size_t n);

/* attention (csrc/kernels/attention/): the fp32 reference kernel, any cache type */
#define IF_ATTN_ARGS                                                                 \
    const if_attn_job *j, size_t r0, size_t r1, size_t h0, size_t h1, float *scratch
void if_attn_f32_scalar(IF_ATTN_ARGS);

#if defined(IF_X86_TIERS)
/* AVX-512 fp32 attention (-mavx512f): scores 16 keys per zmm, P.V 16 head dims per zmm,
 * no FMA; equals if_attn_f32_scalar bit for bit */
void if_attn_f32_avx512(IF_ATTN_ARGS);
/* fp32 attention with AVX2 (8-wide, same float order, no FMA); equals if_attn_f32_scalar bit
 * for bit */
void if_attn_f32_avx2(IF_ATTN_ARGS);
/* int8 matrix-engine attention (attn_i8_matrix_body.h): AMX TDPBSSD/TDPBUSD, and the same body
 * with emulated tile ops (plain C, for the test-only "amx_emulated" table) */
void if_attn_i8_amx(IF_ATTN_ARGS);
void if_attn_i8_amx_emulated(IF_ATTN_ARGS);

/* avx2 tier: -mavx2 -mfma; VPMADDUBSW + VPMADDWD with the sign trick (u8 = |x|,
 * s8 = w * sign(x)); GEMV 1 x 8 rows, GEMM 4 x 16 with weights transposed per K block */
void if_quantize_q8_avx2(IF_QUANT_ARGS);
void if_q8_gemv_1x8_avx2(IF_GEMV_ARGS);
void if_q8_gemm_4x16_avx2(IF_GEMM_ARGS);
/* avx_vnni tier: -mavx2 -mfma -mavxvnni; VPDPBUSD on ymm: the GEMV with the sign trick, the
 * GEMM with the offset trick (u8 = x ^ 0x80, minus 128 * sum(w) per group, exact) */
void if_q8_gemv_1x8_avx_vnni(IF_GEMV_ARGS);
void if_q8_gemm_4x16_avx_vnni(IF_GEMM_ARGS);
/* avx512_vnni tier: -mavx512f -mavx512bw -mavx512vl -mavx512vnni; VPDPBUSD on zmm: GEMV
 * 1 x 16 rows with the sign trick, GEMM 4 x 32 with the offset trick */
void if_quantize_q8_avx512(IF_QUANT_ARGS);
void if_q8_gemv_1x16_avx512_vnni(IF_GEMV_ARGS);
void if_q8_gemm_4x32_avx512_vnni(IF_GEMM_ARGS);
/* amx tier: -mamx-tile -mamx-int8 (+AVX-512 for readout); TDPBSSD on packed 16x64 tiles */
size_t if_q8_gemm_pack_size_amx(size_t N, size_t K, size_t gs);
void if_q8_gemm_pack_amx(int8_t *dst, const int8_t *w, size_t N, size_t K, size_t gs);
void if_q8_gemm_16x16_amx(IF_GEMM_ARGS);
/* the same packed layout and loop structure with tile ops emulated in plain C, so the AMX
 * layout and group bookkeeping are tested on machines without AMX */
void if_q8_gemm_16x16_amx_emulated(IF_GEMM_ARGS);
/* AMX needs the tile configuration loaded on each thread before use; returns 0 on success. */
int if_amx_thread_init(void);
#endif

#if defined(IF_ARM_TIERS)
/* neon tier: Armv8.0 Advanced SIMD only (-march=armv8-a): SMULL/SADALP int8 dot products */
void if_quantize_q8_neon(IF_QUANT_ARGS);
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
void if_attn_i8_sme2(IF_ATTN_ARGS);
#endif

#endif
