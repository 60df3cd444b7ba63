/* Q6_K GEMM, AMX (kquant_amx.h): the body q6k_gemm_16x16_amx_body.h with real tile
 * instructions; per block 4 TDPs (TDPBSUD, TDPBSSD for the signed top scale piece) per 64-value
 * window and 16 activation rows, then the scalar kernel's float step, so the same bits as
 * q6k_gemm_1x1_scalar. Its emulated twin (test-only) is
 * csrc/testing/q6k_gemm_16x16_amx_emulated.c. */
#define Q6KA_FN if_q6k_gemm_16x16_amx
#include "q6k_gemm_16x16_amx_body.h"

const if_kq_gemm_kernel if_k_q6k_gemm_16x16_amx = {.name = "q6k_gemm_16x16_amx",
    .requires = IF_FEAT_AMX_TILE | IF_FEAT_AMX_INT8 | IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI,
    .mr = 16, .nr = 16, .run = if_q6k_gemm_16x16_amx};
