/* q4kx16_gemm_16x16_amx_emulated.c - test-only: q4kx16_gemm_16x16_amx (the AMX Q4_K GEMM body on
 * 16-row groups) with the tile operations emulated in plain C (amx_emu.h), compiled with the
 * avx512 group's flags as q4k_gemm_16x16_amx_emulated.c is. Bit-equal to q4k_gemm_1x1_scalar on
 * the file's rows. */
#define AMX_USE_TILE_EMULATION 1
#define Q45KA_Q5 0
#define Q45KA_X16 1
#define Q45KA_FN if_q4kx16_gemm_16x16_amx_emulated
#include "../kernels/q4k/q45k_gemm_16x16_amx_body.h"
#include "testing.h"

const if_kq_gemm_kernel if_k_q4kx16_gemm_16x16_amx_emulated = {
    .name = "q4kx16_gemm_16x16_amx_emulated", .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI,
    .mr = 16, .nr = 16, .run = if_q4kx16_gemm_16x16_amx_emulated};
