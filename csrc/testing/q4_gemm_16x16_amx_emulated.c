/* q4_gemm_16x16_amx_emulated.c - test-only (the _bench module and the test drivers, never the
 * runtime): the AMX 4-bit GEMM body (q4_gemm_16x16_amx_body.h) with the tile operations, the
 * nibble expansion and the readout in plain C, scalar flags, so the scratch layout, tile
 * shapes, tile configuration, K chunks and group bookkeeping are tested on any x86 CPU.
 * Bit-equal to q4_gemm_1x1_scalar; q4_gemm_16x16_amx shares every line of the body but the
 * tile ops, the expansion and the readout. */
#define AMX_USE_TILE_EMULATION 1
#define AMX_USE_PLAIN_C_READOUT 1
#define AMXQ4_USE_PLAIN_C 1
#include "../kernels/q4_gemm/q4_gemm_16x16_amx_body.h"
#include "testing.h"

static void run(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                const uint8_t *w, const float *ws, const int8_t *cb, size_t n0, size_t n1,
                size_t K, size_t gs) {
    amx_q4_gemm_body(out, ldo, xq, xs, M, w, ws, cb, n0, n1, K, gs);
}

const if_q4_gemm_kernel if_k_q4_gemm_16x16_amx_emulated = {.name = "q4_gemm_16x16_amx_emulated",
    .mr = 16, .nr = 16, .run = run};
