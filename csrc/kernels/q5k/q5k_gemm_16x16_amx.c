/* Q5_K GEMM, AMX (kquant_amx.h): the body q4k/q45k_gemm_16x16_amx_body.h with the fifth bit
 * (qh) in the expansion and the scales split 3 + 3 bits (a 5-bit value times 7 still fits a
 * byte), sumi = lo + 8 hi; per block 12 TDPBSUD (K = 64) per 16 activation rows and 3 tile
 * stores, then the scalar kernel's float step, so the same bits as q5k_gemm_1x1_scalar. Its
 * emulated twin (test-only) is csrc/testing/q5k_gemm_16x16_amx_emulated.c. */
#define Q45KA_Q5 1
#define Q45KA_FN if_q5k_gemm_16x16_amx
#include "../q4k/q45k_gemm_16x16_amx_body.h"

const if_kq_gemm_kernel if_k_q5k_gemm_16x16_amx = {.name = "q5k_gemm_16x16_amx",
    .requires = IF_FEAT_AMX_TILE | IF_FEAT_AMX_INT8 | IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI,
    .mr = 16, .nr = 16, .run = if_q5k_gemm_16x16_amx};
