/* q5k_gemm_16x16_amx_emulated.c - test-only (the _bench module and the test drivers, never the
 * runtime): the AMX Q5_K GEMM body (q4k/q45k_gemm_16x16_amx_body.h) with the tile operations
 * emulated in plain C (amx_emu.h), so the expansion, tile shapes, tile configuration, M / N
 * tails and readout of q5k_gemm_16x16_amx are tested on CPUs without AMX. The expansion and
 * readout are the kernel's AVX-512 code, so this file is compiled with the avx512 group's flags
 * and its descriptor requires AVX-512 (the amx_emulated table leaves it out on a CPU without).
 * Bit-equal to q5k_gemm_1x1_scalar. */
#define AMX_USE_TILE_EMULATION 1
#define Q45KA_Q5 1
#define Q45KA_FN if_q5k_gemm_16x16_amx_emulated
#include "../kernels/q4k/q45k_gemm_16x16_amx_body.h"
#include "testing.h"

const if_kq_gemm_kernel if_k_q5k_gemm_16x16_amx_emulated = {.name = "q5k_gemm_16x16_amx_emulated",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = 16, .nr = 16,
    .run = if_q5k_gemm_16x16_amx_emulated};
