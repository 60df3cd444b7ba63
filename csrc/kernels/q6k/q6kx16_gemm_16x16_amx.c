/* Q6_K GEMM on 16-row groups (if_kq_pack_x16), AMX: q6k_gemm_16x16_amx's body
 * (q6k_gemm_16x16_amx_body.h) whose block expansion reads each dword of the 16 rows as one load
 * of the group's block instead of a gather, so the same bits as q6k_gemm_1x1_scalar on the
 * file's rows. n0 is a multiple of 16 and whole groups are read. */
#define Q6KA_X16 1
#define Q6KA_FN if_q6kx16_gemm_16x16_amx
#include "q6k_gemm_16x16_amx_body.h"

const if_kq_gemm_kernel if_k_q6kx16_gemm_16x16_amx = {.name = "q6kx16_gemm_16x16_amx",
    .requires = IF_FEAT_AMX_TILE | IF_FEAT_AMX_INT8 | IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI,
    .mr = 16, .nr = 16, .run = if_q6kx16_gemm_16x16_amx};
