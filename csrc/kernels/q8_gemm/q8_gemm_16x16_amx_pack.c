/* AMX Q8 GEMM, the ISA-free half (scalar flags: -O3, no -march): the weight packing done once
 * at load (also by the test-only emulated kernel, csrc/testing/, on CPUs without AMX). The
 * layout and the group-scale scheme are described in q8_gemm_16x16_amx_body.h. */
#include <string.h>

#include "../kernels.h"
#include "q8_gemm_16x16_amx_layout.h"

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
