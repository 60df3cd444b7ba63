/* AMX Q8 GEMM, the ISA-free half (scalar flags: -O3, no -march): the weight packing done once
 * at load (also by the test-only emulated kernel, csrc/testing/, on CPUs without AMX). The
 * layout and the group-scale scheme are described in q8_gemm_16x16_amx_body.h. */
#include <string.h>

#include "../kernels.h"
#include "q8_gemm_16x16_amx_layout.h"

/* Bytes of one 16-row tile of the row-major fallback (gs % 4 != 0): 16 rows, zero-padded to
 * a multiple of 64 bytes. */
static size_t amx_rm_tile_bytes(size_t K) { return (16 * K + 63) / 64 * 64; }

/* Bytes of the packed buffer: ceil(N/16)*16*K (VNNI blocks of 16 output rows, zero-padded
 * past N) when gs is a multiple of 4, else ceil(N/16) tiles of 16 row-major rows each padded
 * to a multiple of 64. Either way tile-major (rows [16t, 16t + 16) at t * pack_size(16, K, gs))
 * and a multiple of 64, so aligned_alloc(64, size) is valid. */
size_t if_q8_gemm_pack_size_amx(size_t N, size_t K, size_t gs) {
    if (amx_layout_is_vnni(K, gs)) return (N + 15) / 16 * 16 * K;
    return (N + 15) / 16 * amx_rm_tile_bytes(K);
}

/* Packs w (N, K) row-major: packed[b*16*K + k4*64 + n*4 + j] = w[16b+n][4*k4+j] (0 for
 * 16b+n >= N), so every 4-aligned K window of a block is a TDPBSSD B tile with stride 64;
 * or, for gs % 4 != 0, row-major tiles of 16 rows (the kernel runs the scalar GEMM on them). */
void if_q8_gemm_pack_amx(int8_t *dst, const int8_t *w, size_t N, size_t K, size_t gs) {
    if (!amx_layout_is_vnni(K, gs)) {
        const size_t tb = amx_rm_tile_bytes(K);
        for (size_t t = 0; t * 16 < N; t++) {
            const size_t n = N - 16 * t < 16 ? N - 16 * t : 16;
            memcpy(dst + t * tb, w + 16 * t * K, n * K);
            memset(dst + t * tb + n * K, 0, tb - n * K);
        }
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

/* The inverse of if_q8_gemm_pack_amx for the N rows of src (a whole matrix, or one tile: its
 * rows at t * pack_size(16, K, gs), N <= 16). */
void if_q8_gemm_unpack_amx(int8_t *w, const int8_t *src, size_t N, size_t K, size_t gs) {
    if (!amx_layout_is_vnni(K, gs)) {
        const size_t tb = amx_rm_tile_bytes(K);
        for (size_t t = 0; t * 16 < N; t++) {
            const size_t n = N - 16 * t < 16 ? N - 16 * t : 16;
            memcpy(w + 16 * t * K, src + t * tb, n * K);
        }
        return;
    }
    const size_t K4 = K / 4;
    for (size_t row = 0; row < N; row++) {
        const int8_t *blk = src + row / 16 * 16 * K + row % 16 * 4;
        for (size_t k4 = 0; k4 < K4; k4++) memcpy(w + row * K + 4 * k4, blk + k4 * 64, 4);
    }
}
