/* 4-bit codebook GEMM, AMX (-mamx-tile -mamx-int8 -mavx512f -mavx512bw -mavx512vl -mfma): the
 * body of q4_gemm_16x16_amx_body.h with real tile intrinsics (TDPBSSD, signed x signed) and the
 * AVX-512 nibble expansion and readout of q4_gemm_16x16_amx_avx512.h. Reads the row-major
 * nibbles (no pack hooks: the one resident 4-bit copy is the GEMV's too); each block of 16
 * output rows is expanded once per K chunk into an L1 scratch of VNNI B tiles, reused by all
 * activation blocks of the call. Its emulated twin, test-only, is
 * csrc/testing/q4_gemm_16x16_amx_emulated.c. */
#include <immintrin.h>
#include <stdint.h>

#include "../kernels.h"

#include "../amx_tiles.h"
#define AMXQ4_BARRIER() AMX_BARRIER()

#include "q4_gemm_16x16_amx_avx512.h"
#include "q4_gemm_16x16_amx_body.h"

/* 4-bit GEMM on AMX: 16 activation rows x 16 output rows per C tile; per group one TDPBSSD
 * (gs <= 64) or gs / 64 (+ a tail window) into a zeroed C tile, then a TILESTORED and an
 * AVX-512 readout applying ws and xs per group in order. Loads its tile configuration on entry
 * and releases the tiles on return (the process's AMX permission: if_amx_thread_init). */
void if_q4_gemm_16x16_amx(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                          const uint8_t *w, const float *ws, const int8_t *cb, size_t n0,
                          size_t n1, size_t K, size_t gs) {
    amx_q4_gemm_body(out, ldo, xq, xs, M, w, ws, cb, n0, n1, K, gs);
}

const if_q4_gemm_kernel if_k_q4_gemm_16x16_amx = {.name = "q4_gemm_16x16_amx",
    .requires = IF_FEAT_AMX_TILE | IF_FEAT_AMX_INT8 | IF_FEATS_AVX512, .mr = 16, .nr = 16,
    .run = if_q4_gemm_16x16_amx};
