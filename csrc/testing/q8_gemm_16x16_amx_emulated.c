/* q8_gemm_16x16_amx_emulated.c - test-only (the _bench module and the test drivers, never the
 * runtime): the AMX kernel body (q8_gemm_16x16_amx_body.h) with the tile operations and the
 * readout emulated in plain C, scalar flags, so the packed layout, tile shapes, tile
 * configuration and group bookkeeping are tested on any x86 CPU. Bit-equal to
 * q8_gemm_1x1_scalar and to q8_gemm_16x16_amx, which shares every line of the body but the
 * tile ops. */
#define AMX_USE_TILE_EMULATION 1
#define AMX_USE_PLAIN_C_READOUT 1
#include "../kernels/q8_gemm/q8_gemm_16x16_amx_body.h"
#include "testing.h"

static void run(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                const int8_t *w, const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    amx_q8_gemm_body(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs);
}

const if_q8_gemm_kernel if_k_q8_gemm_16x16_amx_emulated = {.name = "q8_gemm_16x16_amx_emulated",
    .mr = 16, .nr = 16, .pack_size = if_q8_gemm_pack_size_amx, .pack = if_q8_gemm_pack_amx,
    .run = run};
