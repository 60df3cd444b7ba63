/* q6kx16_gemm_16x16_amx_emulated.c - test-only: q6kx16_gemm_16x16_amx (the AMX Q6_K GEMM body on
 * 16-row groups) with the tile operations emulated in plain C (amx_emu.h), compiled with the
 * avx512 group's flags as q6k_gemm_16x16_amx_emulated.c is. Bit-equal to q6k_gemm_1x1_scalar on
 * the file's rows. */
#define AMX_USE_TILE_EMULATION 1
#define Q6KA_X16 1
#define Q6KA_FN if_q6kx16_gemm_16x16_amx_emulated
#include "../kernels/q6k/q6k_gemm_16x16_amx_body.h"
#include "testing.h"

const if_kq_gemm_kernel if_k_q6kx16_gemm_16x16_amx_emulated = {
    .name = "q6kx16_gemm_16x16_amx_emulated", .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI,
    .mr = 16, .nr = 16, .run = if_q6kx16_gemm_16x16_amx_emulated};
