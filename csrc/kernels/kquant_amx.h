/* kquant_amx.h - the tile setup of the AMX K-quant GEMMs (their bodies
 * q4k/q45k_gemm_16x16_amx_body.h for Q4_K and Q5_K, q6k/q6k_gemm_16x16_amx_body.h). Include
 * only from translation units compiled with the amx group's flags (AMX tile + int8, AVX-512
 * F/BW/VL/VNNI), or, with AMX_USE_TILE_EMULATION (the emulated twins in csrc/testing/: the
 * tile operations in plain C, amx_emu.h), with the avx512 group's.
 *
 * The kernels share one shape: C tiles of 16 activation rows x 16 weight rows per 64-value
 * window (TDPBSUD: int8 activations x unsigned weight bytes, K = 64). A sub-block scale cannot
 * ride in a weight byte whole (a value times it exceeds 8 bits), so it is split into pieces
 * that do (Q4_K 4 + 2 bits, Q5_K 3 + 3, Q6_K four 2-bit pieces), each piece's products are one
 * B tile set and the pieces' int32 C tiles recombine by shifts: the scalar kernel's sumi
 * exactly, in another order, with a few tile stores per block and no per-sub-block multiply.
 * Then the scalar kernel's float step per block. The weights stay the file's blocks: each
 * block of 16 rows is expanded once per call into an L1 scratch, reused by every activation
 * tile of the call. Tiles 0-3 are C, 4-5 A (alternating), 6-7 B.
 */
#ifndef IF_KQUANT_AMX_H
#define IF_KQUANT_AMX_H

#include "kquant_avx512.h"
#if defined(AMX_USE_TILE_EMULATION)
#include "amx_emu.h"
#else
#include "amx_tiles.h"
#endif

typedef struct ifka_cfg {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} ifka_cfg;
_Static_assert(sizeof(ifka_cfg) == 64, "tile configuration must be 64 bytes");

/* Tiles for mr activation rows and a K window of kb bytes (a multiple of 4, <= 64). */
static inline void ifka_config(ifka_cfg *c, size_t mr, size_t kb) {
    memset(c, 0, sizeof *c);
    c->palette_id = 1;
    for (int t = 0; t < 4; t++) {
        c->rows[t] = (uint8_t)mr;
        c->colsb[t] = 64;
    }
    for (int t = 4; t < 6; t++) {
        c->rows[t] = (uint8_t)mr;
        c->colsb[t] = (uint16_t)kb;
        c->rows[t + 2] = (uint8_t)(kb / 4);
        c->colsb[t + 2] = 64;
    }
}

/* Lanes [0, r) of 16. */
static inline __mmask16 ifka_mask(size_t r) {
    return (__mmask16)(r >= 16 ? 0xFFFFu : (1u << r) - 1u);
}

/* Dword at p + lane * stride for the lanes in k (others 0 and not read). */
IFZ_INLINE __m512i ifka_gather(__mmask16 k, __m512i idx, const uint8_t *p) {
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, idx, p, 1);
}

#endif
