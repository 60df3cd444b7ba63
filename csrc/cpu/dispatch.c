/* dispatch.c - ISA tiers, their priority, and the kernels chosen for each op.
 *
 * Tiers are listed once, lowest priority first, with the CPU features each one needs. The
 * choice is a value, not process state: if_kernels_choose is a pure function of the CPU's
 * features (detected once), the features the caller hides and the tier it asks for, and each
 * model keeps the kernel set it was created with. A tier is a list of kernel descriptors, one
 * per op, for decode (GEMV, M = 1) and prefill (GEMM, M > 1) alike: a matrix-engine tier names
 * the dot-product GEMV it decodes with. A forced tier this CPU cannot run is an error, never a silent
 * fallback. Hidden features (names as in if_cpu_features(), like NPY_DISABLE_CPU_FEATURES)
 * count as missing; unknown names are errors. The environment (ISAFORGE_KERNEL,
 * ISAFORGE_DISABLE_FEATURES) is read in one place, if_kernels_from_env, for programs without a
 * settings layer of their own; the Python package passes its settings in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/kernels.h"
#include "cpu.h"

/* The AVX-512 kernels the avx512_vnni and amx tiers share: the element-wise ops, attention on
 * float caches, every block type's GEMV, and the GEMMs AMX has no kernel of its own for. */
#define IF_AVX512_SHARED                                                                           \
    .quantize = &if_k_q8_quantize_1x1_avx512, .f32_gemv = &if_k_f32_gemv_1x1_scalar,               \
    .attn = &if_k_f32_attn_16x64_avx512, .swiglu = &if_k_f32_swiglu_1x1_avx512,                    \
    .geglu = &if_k_f32_geglu_1x1_avx512, .hadamard = &if_k_f32_hadamard_1x1_avx2,                  \
    .q4k_gemv = &if_k_q4k_gemv_1x4_avx512_vnni, .q6k_gemv = &if_k_q6k_gemv_1x4_avx512_vnni,       \
    .q5k_gemv = &if_k_q5k_gemv_1x4_avx512_vnni, .q40_gemv = &if_k_q40_gemv_1x4_avx512_vnni,        \
    .q41_gemv = &if_k_q41_gemv_1x4_avx512_vnni, .q50_gemv = &if_k_q50_gemv_1x4_avx512_vnni,        \
    .q51_gemv = &if_k_q51_gemv_1x4_avx512_vnni, .q40_gemm = &if_k_q40_gemm_6x32_avx512_vnni,       \
    .q41_gemm = &if_k_q41_gemm_6x32_avx512_vnni, .q50_gemm = &if_k_q50_gemm_6x32_avx512_vnni,      \
    .q51_gemm = &if_k_q51_gemm_6x32_avx512_vnni, .iq4nl_gemv = &if_k_iq4nl_gemv_1x8_avx512_vnni,   \
    .iq4xs_gemv = &if_k_iq4xs_gemv_1x8_avx512_vnni,                                                \
    .iq4nl_gemm = &if_k_iq4nl_gemm_1x8_avx512_vnni,                                                \
    .iq4xs_gemm = &if_k_iq4xs_gemm_1x8_avx512_vnni, .q80_gemv = &if_k_q80_gemv_1x4_avx512_vnni,    \
    .q80_gemm = &if_k_q80_gemm_6x32_avx512_vnni, .k8_quantize = &if_k_k8_quantize_1x1_avx512,     \
    .q80x16_gemv = &if_k_q80x16_gemv_1x16_avx512_vnni,                                             \
    .q80x16_gemm = &if_k_q80x16_gemm_6x32_avx512_vnni,                                             \
    .q40x16_gemv = &if_k_q40x16_gemv_1x16_avx512_vnni,                                             \
    .q40x16_gemm = &if_k_q40x16_gemm_6x32_avx512_vnni

/* The tiers, in rising priority (auto picks the last one this CPU runs): for every op the
 * kernel it runs, decode and prefill alike (a tier needs its kernels' features). Adding a
 * kernel to a tier is one line here. */
static const if_kernel_table g_tiers[] = {
    {.tier = "scalar", .q8_gemv = &if_k_q8_gemv_1x1_scalar, .q8_gemm = &if_k_q8_gemm_1x1_scalar,
     .quantize = &if_k_q8_quantize_1x1_scalar, .f32_gemv = &if_k_f32_gemv_1x1_scalar,
     .attn = &if_k_f32_attn_16x64_scalar, .attn_i8 = &if_k_f32_attn_16x64_scalar,
     .swiglu = &if_k_f32_swiglu_1x1_scalar,
     .geglu = &if_k_f32_geglu_1x1_scalar,
     .q4_gemv = &if_k_q4_gemv_1x1_scalar, .q4_gemm = &if_k_q4_gemm_1x1_scalar,
     .hadamard = &if_k_f32_hadamard_1x1_scalar,
     .q4k_gemv = &if_k_q4k_gemv_1x1_scalar, .q6k_gemv = &if_k_q6k_gemv_1x1_scalar,
     .q4k_gemm = &if_k_q4k_gemm_1x1_scalar, .q6k_gemm = &if_k_q6k_gemm_1x1_scalar,
     .q5k_gemv = &if_k_q5k_gemv_1x1_scalar, .q5k_gemm = &if_k_q5k_gemm_1x1_scalar,
     .q40_gemv = &if_k_q40_gemv_1x1_scalar, .q41_gemv = &if_k_q41_gemv_1x1_scalar,
     .q50_gemv = &if_k_q50_gemv_1x1_scalar, .q51_gemv = &if_k_q51_gemv_1x1_scalar,
     .q40_gemm = &if_k_q40_gemm_1x1_scalar, .q41_gemm = &if_k_q41_gemm_1x1_scalar,
     .q50_gemm = &if_k_q50_gemm_1x1_scalar, .q51_gemm = &if_k_q51_gemm_1x1_scalar,
     .iq4nl_gemv = &if_k_iq4nl_gemv_1x1_scalar, .iq4xs_gemv = &if_k_iq4xs_gemv_1x1_scalar,
     .iq4nl_gemm = &if_k_iq4nl_gemm_1x1_scalar, .iq4xs_gemm = &if_k_iq4xs_gemm_1x1_scalar,
     .q80_gemv = &if_k_q80_gemv_1x1_scalar, .q80_gemm = &if_k_q80_gemm_1x1_scalar,
     .k8_quantize = &if_k_k8_quantize_1x1_scalar},
#if defined(IF_X86_TIERS)
    {.tier = "avx2", .q8_gemv = &if_k_q8_gemv_1x8_avx2, .q8_gemm = &if_k_q8_gemm_4x16_avx2,
     .quantize = &if_k_q8_quantize_1x1_avx2, .f32_gemv = &if_k_f32_gemv_1x1_scalar,
     .attn = &if_k_f32_attn_16x64_avx2, .attn_i8 = &if_k_f32_attn_16x64_avx2,
     .swiglu = &if_k_f32_swiglu_1x1_avx2,
     .geglu = &if_k_f32_geglu_1x1_avx2,
     .q4_gemv = &if_k_q4_gemv_1x8_avx2, .q4_gemm = &if_k_q4_gemm_16x8_avx2,
     .hadamard = &if_k_f32_hadamard_1x1_avx2,
     .q4k_gemv = &if_k_q4k_gemv_1x8_avx2, .q6k_gemv = &if_k_q6k_gemv_1x8_avx2,
     .q4k_gemm = &if_k_q4k_gemm_4x8_avx2, .q6k_gemm = &if_k_q6k_gemm_4x8_avx2,
     .q5k_gemv = &if_k_q5k_gemv_1x8_avx2, .q5k_gemm = &if_k_q5k_gemm_4x8_avx2,
     .q40_gemv = &if_k_q40_gemv_1x8_avx2, .q41_gemv = &if_k_q41_gemv_1x8_avx2,
     .q50_gemv = &if_k_q50_gemv_1x8_avx2, .q51_gemv = &if_k_q51_gemv_1x8_avx2,
     .q40_gemm = &if_k_q40_gemm_4x8_avx2, .q41_gemm = &if_k_q41_gemm_4x8_avx2,
     .q50_gemm = &if_k_q50_gemm_4x8_avx2, .q51_gemm = &if_k_q51_gemm_4x8_avx2,
     .iq4nl_gemv = &if_k_iq4nl_gemv_1x8_avx2, .iq4xs_gemv = &if_k_iq4xs_gemv_1x8_avx2,
     .iq4nl_gemm = &if_k_iq4nl_gemm_1x8_avx2, .iq4xs_gemm = &if_k_iq4xs_gemm_1x8_avx2,
     .q80_gemv = &if_k_q80_gemv_1x8_avx2, .q80_gemm = &if_k_q80_gemm_4x8_avx2,
     .k8_quantize = &if_k_k8_quantize_1x1_avx2,
     .q4kx8_gemv = &if_k_q4kx8_gemv_1x8_avx2, .q4kx8_gemm = &if_k_q4kx8_gemm_4x8_avx2,
     .q6kx8_gemv = &if_k_q6kx8_gemv_1x8_avx2, .q6kx8_gemm = &if_k_q6kx8_gemm_4x8_avx2},
    {.tier = "avx_vnni", .q8_gemv = &if_k_q8_gemv_1x8_avx_vnni,
     .q8_gemm = &if_k_q8_gemm_4x16_avx_vnni, .quantize = &if_k_q8_quantize_1x1_avx2,
     .f32_gemv = &if_k_f32_gemv_1x1_scalar, .attn = &if_k_f32_attn_16x64_avx2,
     .attn_i8 = &if_k_f32_attn_16x64_avx2, .swiglu = &if_k_f32_swiglu_1x1_avx2,
     .geglu = &if_k_f32_geglu_1x1_avx2,
     .q4_gemv = &if_k_q4_gemv_1x8_avx2, .q4_gemm = &if_k_q4_gemm_16x8_avx2,
     .hadamard = &if_k_f32_hadamard_1x1_avx2,
     .q4k_gemv = &if_k_q4k_gemv_1x8_avx_vnni, .q6k_gemv = &if_k_q6k_gemv_1x8_avx_vnni,
     .q4k_gemm = &if_k_q4k_gemm_4x8_avx_vnni, .q6k_gemm = &if_k_q6k_gemm_4x8_avx_vnni,
     .q5k_gemv = &if_k_q5k_gemv_1x8_avx_vnni, .q5k_gemm = &if_k_q5k_gemm_4x8_avx_vnni,
     .q40_gemv = &if_k_q40_gemv_1x8_avx_vnni, .q41_gemv = &if_k_q41_gemv_1x8_avx_vnni,
     .q50_gemv = &if_k_q50_gemv_1x8_avx_vnni, .q51_gemv = &if_k_q51_gemv_1x8_avx_vnni,
     .q40_gemm = &if_k_q40_gemm_4x8_avx_vnni, .q41_gemm = &if_k_q41_gemm_4x8_avx_vnni,
     .q50_gemm = &if_k_q50_gemm_4x8_avx_vnni, .q51_gemm = &if_k_q51_gemm_4x8_avx_vnni,
     .iq4nl_gemv = &if_k_iq4nl_gemv_1x8_avx_vnni, .iq4xs_gemv = &if_k_iq4xs_gemv_1x8_avx_vnni,
     .iq4nl_gemm = &if_k_iq4nl_gemm_1x8_avx_vnni, .iq4xs_gemm = &if_k_iq4xs_gemm_1x8_avx_vnni,
     .q80_gemv = &if_k_q80_gemv_1x8_avx_vnni, .q80_gemm = &if_k_q80_gemm_4x8_avx_vnni,
     .k8_quantize = &if_k_k8_quantize_1x1_avx2,
     .q4kx8_gemv = &if_k_q4kx8_gemv_1x8_avx_vnni, .q4kx8_gemm = &if_k_q4kx8_gemm_4x8_avx_vnni,
     .q6kx8_gemv = &if_k_q6kx8_gemv_1x8_avx_vnni, .q6kx8_gemm = &if_k_q6kx8_gemm_4x8_avx_vnni},
    {.tier = "avx512_vnni", IF_AVX512_SHARED, .q8_gemv = &if_k_q8_gemv_1x1_avx512_vnni,
     .q8_gemm = &if_k_q8_gemm_4x32_avx512_vnni, .attn_i8 = &if_k_f32_attn_16x64_avx512,
     .q4_gemv = &if_k_q4_gemv_1x16_avx512_vnni, .q4_gemm = &if_k_q4_gemm_8x16_avx512_vnni,
     .q4k_gemm = &if_k_q4k_gemm_6x32_avx512_vnni, .q6k_gemm = &if_k_q6k_gemm_8x16_avx512_vnni,
     .q5k_gemm = &if_k_q5k_gemm_6x32_avx512_vnni,
     .q4kx16_gemv = &if_k_q4kx16_gemv_1x16_avx512_vnni,
     .q4kx16_gemm = &if_k_q4kx16_gemm_6x32_avx512_vnni,
     .q6kx16_gemv = &if_k_q6kx16_gemv_1x16_avx512_vnni,
     .q6kx16_gemm = &if_k_q6kx16_gemm_8x16_avx512_vnni},
    /* AMX is a GEMM engine: decode (M = 1) runs the AVX-512 VNNI GEMV; the int8 KV cache gets
     * the matrix-engine attention (bounded, not exact), float caches the exact one. Q8, CQ4
     * and the K-quants have AMX GEMMs (the CQ4 one decodes from its packed copy,
     * decode_packed); the legacy and IQ4 blocks, GGUF Q8_0 included, run in place on the
     * AVX-512 VNNI kernels (a packed Q8 copy would take Q8's float order, not Q8_0's). */
    {.tier = "amx", IF_AVX512_SHARED, .q8_gemv = &if_k_q8_gemv_1x1_avx512_vnni,
     .q8_gemm = &if_k_q8_gemm_16x16_amx, .attn_i8 = &if_k_i8_attn_16x64_amx,
     .q4_gemv = &if_k_q4_gemv_1x16_avx512_vnni, .q4_gemm = &if_k_q4_gemm_16x16_amx,
     .q4k_gemm = &if_k_q4k_gemm_16x16_amx, .q6k_gemm = &if_k_q6k_gemm_16x16_amx,
     .q5k_gemm = &if_k_q5k_gemm_16x16_amx, .q4kx16_gemv = &if_k_q4kx16_gemv_1x16_avx512_vnni,
     .q4kx16_gemm = &if_k_q4kx16_gemm_16x16_amx, .q6kx16_gemv = &if_k_q6kx16_gemv_1x16_avx512_vnni,
     .q6kx16_gemm = &if_k_q6kx16_gemm_16x16_amx},
#endif
#if defined(IF_ARM_TIERS)
    /* Arm: fp32 attention and SwiGLU are the scalar kernels (bit-exact and not the
     * bottleneck); the tiers differ in their int8 dot product */
    {.tier = "neon", .q8_gemv = &if_k_q8_gemv_1x4_neon, .q8_gemm = &if_k_q8_gemm_4x4_neon,
     .quantize = &if_k_q8_quantize_1x1_neon, .f32_gemv = &if_k_f32_gemv_1x1_scalar,
     .attn = &if_k_f32_attn_16x64_scalar, .attn_i8 = &if_k_f32_attn_16x64_scalar,
     .swiglu = &if_k_f32_swiglu_1x1_scalar,
     .geglu = &if_k_f32_geglu_1x1_scalar,
     .q4_gemv = &if_k_q4_gemv_1x4_neon, .q4_gemm = &if_k_q4_gemm_4x4_neon,
     .hadamard = &if_k_f32_hadamard_1x1_scalar,
     .q4k_gemv = &if_k_q4k_gemv_1x1_neon, .q6k_gemv = &if_k_q6k_gemv_1x1_neon,
     .q4k_gemm = &if_k_q4k_gemm_1x1_neon, .q6k_gemm = &if_k_q6k_gemm_1x1_neon,
     .q5k_gemv = &if_k_q5k_gemv_1x1_neon, .q5k_gemm = &if_k_q5k_gemm_1x1_neon,
     .q40_gemv = &if_k_q40_gemv_1x4_neon, .q41_gemv = &if_k_q41_gemv_1x4_neon,
     .q50_gemv = &if_k_q50_gemv_1x4_neon, .q51_gemv = &if_k_q51_gemv_1x4_neon,
     .q40_gemm = &if_k_q40_gemm_4x4_neon, .q41_gemm = &if_k_q41_gemm_4x4_neon,
     .q50_gemm = &if_k_q50_gemm_4x4_neon, .q51_gemm = &if_k_q51_gemm_4x4_neon,
     .q80_gemv = &if_k_q80_gemv_1x4_neon, .q80_gemm = &if_k_q80_gemm_4x4_neon},
    {.tier = "dotprod", .q8_gemv = &if_k_q8_gemv_1x4_dotprod,
     .q8_gemm = &if_k_q8_gemm_4x4_dotprod, .quantize = &if_k_q8_quantize_1x1_neon,
     .f32_gemv = &if_k_f32_gemv_1x1_scalar,
     .attn = &if_k_f32_attn_16x64_scalar, .attn_i8 = &if_k_f32_attn_16x64_scalar,
     .swiglu = &if_k_f32_swiglu_1x1_scalar,
     .geglu = &if_k_f32_geglu_1x1_scalar,
     .q4_gemv = &if_k_q4_gemv_1x4_dotprod, .q4_gemm = &if_k_q4_gemm_1x4_dotprod,
     .hadamard = &if_k_f32_hadamard_1x1_scalar,
     .q4k_gemv = &if_k_q4k_gemv_1x1_dotprod, .q6k_gemv = &if_k_q6k_gemv_1x1_dotprod,
     .q4k_gemm = &if_k_q4k_gemm_1x1_dotprod, .q6k_gemm = &if_k_q6k_gemm_1x1_dotprod,
     .q5k_gemv = &if_k_q5k_gemv_1x1_dotprod, .q5k_gemm = &if_k_q5k_gemm_1x1_dotprod,
     .q40_gemv = &if_k_q40_gemv_1x4_dotprod, .q41_gemv = &if_k_q41_gemv_1x4_dotprod,
     .q50_gemv = &if_k_q50_gemv_1x4_dotprod, .q51_gemv = &if_k_q51_gemv_1x4_dotprod,
     .q40_gemm = &if_k_q40_gemm_1x4_dotprod, .q41_gemm = &if_k_q41_gemm_1x4_dotprod,
     .q50_gemm = &if_k_q50_gemm_1x4_dotprod, .q51_gemm = &if_k_q51_gemm_1x4_dotprod,
     .iq4nl_gemv = &if_k_iq4nl_gemv_1x4_dotprod, .iq4xs_gemv = &if_k_iq4xs_gemv_1x4_dotprod,
     .iq4nl_gemm = &if_k_iq4nl_gemm_1x4_dotprod, .iq4xs_gemm = &if_k_iq4xs_gemm_1x4_dotprod,
     .q80_gemv = &if_k_q80_gemv_1x4_dotprod, .q80_gemm = &if_k_q80_gemm_1x4_dotprod},
    /* i8mm is a prefill ISA; decode runs the dotprod GEMV (SMMLA wastes half its work at
     * M = 1) */
    {.tier = "i8mm", .q8_gemv = &if_k_q8_gemv_1x4_dotprod, .q8_gemm = &if_k_q8_gemm_2x4_i8mm,
     .quantize = &if_k_q8_quantize_1x1_neon, .f32_gemv = &if_k_f32_gemv_1x1_scalar,
     .attn = &if_k_f32_attn_16x64_scalar, .attn_i8 = &if_k_f32_attn_16x64_scalar,
     .swiglu = &if_k_f32_swiglu_1x1_scalar,
     .geglu = &if_k_f32_geglu_1x1_scalar,
     .q4_gemv = &if_k_q4_gemv_1x4_dotprod, .q4_gemm = &if_k_q4_gemm_4x4_i8mm,
     .hadamard = &if_k_f32_hadamard_1x1_scalar,
     .q4k_gemv = &if_k_q4k_gemv_1x1_dotprod, .q6k_gemv = &if_k_q6k_gemv_1x1_dotprod,
     .q4k_gemm = &if_k_q4k_gemm_2x2_i8mm, .q6k_gemm = &if_k_q6k_gemm_2x2_i8mm,
     .q5k_gemv = &if_k_q5k_gemv_1x1_dotprod, .q5k_gemm = &if_k_q5k_gemm_2x2_i8mm,
     .q40_gemv = &if_k_q40_gemv_1x4_dotprod, .q41_gemv = &if_k_q41_gemv_1x4_dotprod,
     .q50_gemv = &if_k_q50_gemv_1x4_dotprod, .q51_gemv = &if_k_q51_gemv_1x4_dotprod,
     .q40_gemm = &if_k_q40_gemm_8x2_i8mm, .q41_gemm = &if_k_q41_gemm_8x2_i8mm,
     .q50_gemm = &if_k_q50_gemm_8x2_i8mm, .q51_gemm = &if_k_q51_gemm_8x2_i8mm,
     .iq4nl_gemv = &if_k_iq4nl_gemv_1x4_dotprod, .iq4xs_gemv = &if_k_iq4xs_gemv_1x4_dotprod,
     .iq4nl_gemm = &if_k_iq4nl_gemm_1x4_dotprod, .iq4xs_gemm = &if_k_iq4xs_gemm_1x4_dotprod,
     .q80_gemv = &if_k_q80_gemv_1x4_dotprod, .q80_gemm = &if_k_q80_gemm_8x2_i8mm},
    /* SME2: SMOPA outer products into ZA at any streaming vector length; the int8 KV cache
     * gets the SMOPA attention (bounded, not exact) */
    {.tier = "sme2", .q8_gemv = &if_k_q8_gemv_1xvl_sme2, .q8_gemm = &if_k_q8_gemm_vlxvl_sme2,
     .quantize = &if_k_q8_quantize_1x1_neon, .f32_gemv = &if_k_f32_gemv_1x1_scalar,
     .attn = &if_k_f32_attn_16x64_scalar, .attn_i8 = &if_k_i8_attn_16x64_sme2,
     .swiglu = &if_k_f32_swiglu_1x1_scalar,
     .geglu = &if_k_f32_geglu_1x1_scalar,
     .q4_gemv = &if_k_q4_gemv_1x1_sme2, .q4_gemm = &if_k_q4_gemm_vlxvl_sme2,
     .hadamard = &if_k_f32_hadamard_1x1_scalar,
     .q4k_gemv = &if_k_q4k_gemv_1x1_dotprod, .q6k_gemv = &if_k_q6k_gemv_1x1_dotprod,
     .q4k_gemm = &if_k_q4k_gemm_vlxvl_sme2, .q6k_gemm = &if_k_q6k_gemm_vlxvl_sme2,
     .q5k_gemv = &if_k_q5k_gemv_1x1_dotprod, .q5k_gemm = &if_k_q5k_gemm_vlxvl_sme2,
     .q40_gemv = &if_k_q40_gemv_1x4_dotprod, .q41_gemv = &if_k_q41_gemv_1x4_dotprod,
     .q50_gemv = &if_k_q50_gemv_1x4_dotprod, .q51_gemv = &if_k_q51_gemv_1x4_dotprod,
     .q40_gemm = &if_k_q40_gemm_vlxvl_sme2, .q41_gemm = &if_k_q41_gemm_vlxvl_sme2,
     .q50_gemm = &if_k_q50_gemm_vlxvl_sme2, .q51_gemm = &if_k_q51_gemm_vlxvl_sme2,
     .iq4nl_gemv = &if_k_iq4nl_gemv_1x4_dotprod, .iq4xs_gemv = &if_k_iq4xs_gemv_1x4_dotprod,
     .iq4nl_gemm = &if_k_iq4nl_gemm_1x4_dotprod, .iq4xs_gemm = &if_k_iq4xs_gemm_1x4_dotprod,
     .q80_gemv = &if_k_q80_gemv_1x4_dotprod, .q80_gemm = &if_k_q80_gemm_1x4_dotprod},
#endif
};
#define N_TIERS (sizeof g_tiers / sizeof g_tiers[0])

size_t if_tier_count(void) { return N_TIERS; }

const char *if_tier_name(size_t i) { return i < N_TIERS ? g_tiers[i].tier : NULL; }

const if_kernel_table *if_tier_table(size_t i) { return i < N_TIERS ? &g_tiers[i] : NULL; }

uint32_t if_table_requires(const if_kernel_table *t) {
    return t->q8_gemv->requires | t->q8_gemm->requires | t->quantize->requires |
           t->f32_gemv->requires | t->attn->requires | t->attn_i8->requires |
           t->swiglu->requires | t->geglu->requires |
           (t->q4_gemv ? t->q4_gemv->requires : 0) | (t->q4_gemm ? t->q4_gemm->requires : 0) |
           (t->hadamard ? t->hadamard->requires : 0) |
           (t->q4k_gemv ? t->q4k_gemv->requires : 0) | (t->q6k_gemv ? t->q6k_gemv->requires : 0) |
           (t->q4k_gemm ? t->q4k_gemm->requires : 0) | (t->q6k_gemm ? t->q6k_gemm->requires : 0) |
           (t->q5k_gemv ? t->q5k_gemv->requires : 0) | (t->q5k_gemm ? t->q5k_gemm->requires : 0) |
           (t->q40_gemv ? t->q40_gemv->requires : 0) | (t->q41_gemv ? t->q41_gemv->requires : 0) |
           (t->q50_gemv ? t->q50_gemv->requires : 0) | (t->q51_gemv ? t->q51_gemv->requires : 0) |
           (t->q40_gemm ? t->q40_gemm->requires : 0) | (t->q41_gemm ? t->q41_gemm->requires : 0) |
           (t->q50_gemm ? t->q50_gemm->requires : 0) | (t->q51_gemm ? t->q51_gemm->requires : 0) |
           (t->iq4nl_gemv ? t->iq4nl_gemv->requires : 0) |
           (t->iq4xs_gemv ? t->iq4xs_gemv->requires : 0) |
           (t->iq4nl_gemm ? t->iq4nl_gemm->requires : 0) |
           (t->iq4xs_gemm ? t->iq4xs_gemm->requires : 0) |
           (t->q80_gemv ? t->q80_gemv->requires : 0) | (t->q80_gemm ? t->q80_gemm->requires : 0) |
           (t->k8_quantize ? t->k8_quantize->requires : 0) |
           (t->q4kx8_gemv ? t->q4kx8_gemv->requires : 0) |
           (t->q4kx8_gemm ? t->q4kx8_gemm->requires : 0) |
           (t->q6kx8_gemv ? t->q6kx8_gemv->requires : 0) |
           (t->q6kx8_gemm ? t->q6kx8_gemm->requires : 0) |
           (t->q80x16_gemv ? t->q80x16_gemv->requires : 0) |
           (t->q80x16_gemm ? t->q80x16_gemm->requires : 0) |
           (t->q4kx16_gemv ? t->q4kx16_gemv->requires : 0) |
           (t->q4kx16_gemm ? t->q4kx16_gemm->requires : 0) |
           (t->q6kx16_gemv ? t->q6kx16_gemv->requires : 0) |
           (t->q6kx16_gemm ? t->q6kx16_gemm->requires : 0) |
           (t->q40x16_gemv ? t->q40x16_gemv->requires : 0) |
           (t->q40x16_gemm ? t->q40x16_gemm->requires : 0);
}

int if_table_decodes_packed(const if_kernel_table *t) {
    const if_q8_gemm_kernel *k = t->q8_gemm;
    return k->pack && k->pack_size && k->decode_packed && k->unpack;
}

if_status if_features_mask(const char *names, uint32_t *mask, char *err, size_t errlen) {
    *mask = 0;
    for (const char *p = names; p && *p;) {
        while (*p == ',' || *p == ' ') p++;
        size_t n = strcspn(p, ", ");
        if (n == 0) break;
        char tok[32];
        uint32_t bit = 0;
        if (n < sizeof tok) {
            memcpy(tok, p, n);
            tok[n] = '\0';
            bit = if_feature_bit(tok);
        }
        if (!bit) {
            if (err && errlen)
                snprintf(err, errlen,
                         "ISAFORGE_DISABLE_FEATURES: unknown feature '%.*s' (known: %s)",
                         (int)(n < 64 ? n : 64), p, if_feature_names());
            return IF_EINVAL;
        }
        *mask |= bit;
        p += n;
    }
    return IF_OK;
}

const char *if_features_string(uint32_t mask, char *buf, size_t n) {
    size_t len = 0;
    if (n) buf[0] = '\0';
    for (uint32_t b = 1; b && len < n; b <<= 1)
        if (mask & b)
            len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? "," : "", if_feature_name(b));
    return buf;
}

int if_tier_supported(size_t i, uint32_t disabled, char *why, size_t whylen) {
    if (i >= N_TIERS) {
        if (why && whylen) snprintf(why, whylen, "no such tier");
        return 0;
    }
    const uint32_t have = if_cpu_detect()->flags;
    const uint32_t missing = if_table_requires(&g_tiers[i]) & ~(have & ~disabled);
    if (missing) {
        if (why && whylen) {
            int off = snprintf(why, whylen, "missing");
            for (uint32_t b = 1; b && off > 0 && (size_t)off < whylen; b <<= 1) {
                if (!(missing & b)) continue;
                off += snprintf(why + off, whylen - (size_t)off, " %s%s", if_feature_name(b),
                                (have & b) ? " (disabled)" : "");
            }
            const char *notes = if_cpu_detect()->notes;
            if (notes[0] && (size_t)off < whylen)
                snprintf(why + off, whylen - (size_t)off, "; %s", notes);
        }
        return 0;
    }
    if (why && whylen) why[0] = '\0';
    return 1;
}

if_status if_tier_find(const char *name, uint32_t disabled, const if_kernel_table **out,
                       char *err, size_t errlen) {
    for (size_t i = 0; i < N_TIERS; i++) {
        if (strcmp(name, g_tiers[i].tier) != 0) continue;
        char why[200];
        if (!if_tier_supported(i, disabled, why, sizeof why)) {
            if (err && errlen)
                snprintf(err, errlen, "kernel tier '%s' is not supported on this CPU: %s", name,
                         why);
            return IF_ENOTSUP;
        }
        *out = &g_tiers[i];
        return IF_OK;
    }
    if (err && errlen) {
        int off = snprintf(err, errlen, "unknown kernel tier '%s'; compiled tiers:", name);
        for (size_t i = 0; i < N_TIERS && off > 0 && (size_t)off < errlen; i++)
            off += snprintf(err + off, errlen - (size_t)off, " %s", g_tiers[i].tier);
    }
    return IF_EINVAL;
}

if_status if_kernels_choose(const char *tier, uint32_t disabled, if_kernel_set *out, char *err,
                            size_t errlen) {
    if (tier == NULL || tier[0] == '\0' || strcmp(tier, "auto") == 0) {
        size_t best = 0;
        for (size_t i = 0; i < N_TIERS; i++)
            if (if_tier_supported(i, disabled, NULL, 0)) best = i;
        out->gemv = out->gemm = &g_tiers[best];
        return IF_OK;
    }
    const if_kernel_table *t;
    if_status st = if_tier_find(tier, disabled, &t, err, errlen);
    if (st != IF_OK) return st;
    out->gemv = out->gemm = t;
    return IF_OK;
}

if_status if_kernels_from_env(if_kernel_set *out, uint32_t *disabled, char *err,
                              size_t errlen) {
    uint32_t mask;
    if_status st = if_features_mask(getenv("ISAFORGE_DISABLE_FEATURES"), &mask, err, errlen);
    if (st != IF_OK) return st;
    if (disabled) *disabled = mask;
    return if_kernels_choose(getenv("ISAFORGE_KERNEL"), mask, out, err, errlen);
}
