/* kquant_amx.h - the tile setup of the AMX K-quant GEMMs (q4k/q4k_gemm_16x16_amx.c,
 * q6k/q6k_gemm_16x16_amx.c). Include only from translation units compiled with the amx
 * group's flags (AMX tile + int8, AVX-512 F/BW/VL/VNNI).
 *
 * The kernels share one shape: a C tile of 16 activation rows x 16 weight rows per sub-block
 * (TDPBSUD: int8 activations x the unsigned weight values, K = the sub-block length), stored
 * and read out with the sub-block scales in int32 (exact: the scalar kernel's sumi in another
 * order), then the scalar kernel's float step per block. Tiles 0-3 are C (rotating, so the
 * tile unit runs ahead of the stores), 4-5 A and 6-7 B (alternating). The weights stay the
 * file's blocks: each block of 16 rows is expanded once per call into an L1 scratch of VNNI B
 * tiles, reused by every activation tile of the call. */
#ifndef IF_KQUANT_AMX_H
#define IF_KQUANT_AMX_H

#include "kquant_avx512.h"
#include "amx_tiles.h"

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

/* One sub-block: C tile TC = A (activation rows from a, stride lda) . B (the scratch's VNNI
 * rows at b), stored to cbuf. Tile numbers are literals (the intrinsics stringify them). */
#define IFKA_SUB(TC, TA, TB, a, lda, b, cbuf)                                              \
    do {                                                                                   \
        AMX_TILE_ZERO(TC);                                                                 \
        AMX_TILE_LOAD(TA, (a), (lda));                                                     \
        AMX_TILE_LOAD(TB, (b), 64);                                                        \
        _tile_dpbsud(TC, TA, TB);                                                          \
        AMX_TILE_STORE(TC, (cbuf), 64);                                                    \
    } while (0)

/* Lanes [0, r) of 16. */
static inline __mmask16 ifka_mask(size_t r) {
    return (__mmask16)(r >= 16 ? 0xFFFFu : (1u << r) - 1u);
}

/* Dword at p + lane * stride for the lanes in k (others 0 and not read). */
IFZ_INLINE __m512i ifka_gather(__mmask16 k, __m512i idx, const uint8_t *p) {
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, idx, p, 1);
}

#endif
