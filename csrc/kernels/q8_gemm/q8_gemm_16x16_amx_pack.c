/* AMX Q8 GEMM, the ISA-free half (scalar flags: -O3, no -march): the weight packing done once
 * at load, and the test-only kernel that runs the AMX kernel body with the tile operations
 * and the readout emulated in plain C (so the packed layout, tile shapes, tile configuration
 * and group bookkeeping are tested on any x86 CPU). The layout and the group-scale scheme are
 * described in q8_gemm_16x16_amx_body.h. */
#define AMX_USE_TILE_EMULATION 1
#define AMX_USE_PLAIN_C_READOUT 1
#include "q8_gemm_16x16_amx_body.h"

/* Bytes of the packed buffer: ceil(N/16)*16*K (VNNI blocks of 16 output rows, zero-padded
 * past N) when gs is a multiple of 4, else the row-major copy N*K rounded up to a multiple
 * of 64. Always a multiple of 64, so aligned_alloc(64, size) is valid. */
size_t if_q8_gemm_pack_size_amx(size_t N, size_t K, size_t gs) {
    if (amx_layout_is_vnni(K, gs)) return (N + 15) / 16 * 16 * K;
    return (N * K + 63) / 64 * 64;
}

/* Packs w (N, K) row-major: packed[b*16*K + k4*64 + n*4 + j] = w[16b+n][4*k4+j] (0 for
 * 16b+n >= N), so every 4-aligned K window of a block is a TDPBSSD B tile with stride 64;
 * or, for gs % 4 != 0, a plain copy (the kernel then runs the scalar GEMM on it). */
void if_q8_gemm_pack_amx(int8_t *dst, const int8_t *w, size_t N, size_t K, size_t gs) {
    if (!amx_layout_is_vnni(K, gs)) {
        const size_t size = if_q8_gemm_pack_size_amx(N, K, gs);
        memcpy(dst, w, N * K);
        memset(dst + N * K, 0, size - N * K);
        return;
    }
    const size_t nblocks = (N + 15) / 16, K4 = K / 4;
    for (size_t b = 0; b < nblocks; b++) {
        int8_t *blk = dst + b * 16 * K;
        for (size_t n = 0; n < 16; n++) {
            const size_t row = 16 * b + n;
            if (row < N) {
                const int8_t *src = w + row * K;
                for (size_t k4 = 0; k4 < K4; k4++) memcpy(blk + k4 * 64 + n * 4, src + 4 * k4, 4);
            } else {
                for (size_t k4 = 0; k4 < K4; k4++) memset(blk + k4 * 64 + n * 4, 0, 4);
            }
        }
    }
}

/* The AMX kernel (16 activation rows x 16 output rows per tile, one TDPBSSD group per C
 * readout) on an emulated tile machine, plain-C readout: bit-equal to if_q8_gemm_1x1_scalar
 * and to if_q8_gemm_16x16_amx, which shares every line of the body but the tile ops. */
void if_q8_gemm_16x16_amx_emulated(float *out, size_t ldo, const int8_t *xq, const float *xs,
                                   size_t M, const int8_t *w, const float *ws, size_t n0,
                                   size_t n1, size_t K, size_t gs) {
    amx_q8_gemm_body(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs);
}

const if_q8_gemm_kernel if_k_q8_gemm_16x16_amx_emulated = {.name = "q8_gemm_16x16_amx_emulated",
    .mr = 16, .nr = 16, .pack_size = if_q8_gemm_pack_size_amx, .pack = if_q8_gemm_pack_amx,
    .run = if_q8_gemm_16x16_amx_emulated};
