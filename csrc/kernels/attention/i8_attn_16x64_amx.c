/* i8_attn_16x64_amx.c - int8 matrix-engine attention on AMX (-mamx-tile -mamx-int8): TDPBSSD for
 * Q.K^T, TDPBUSD for u8 P.V, the body and contract of attn_i8_matrix_body.h with real tile
 * instructions. The tile configuration is loaded at the start of every call and released
 * at its end (AMX permission: if_amx_thread_init / features.c). */
#include <immintrin.h>

#include "../amx_tiles.h" /* the tile ops with the compiler barriers GCC's lack */

#define TILE_STATE AMX_TILE_STATE
#define TILE_CONFIG(cfg) AMX_TILE_CONFIG(cfg)
#define TILE_RELEASE() AMX_TILE_RELEASE()
#define TILE_ZERO(t) AMX_TILE_ZERO(t)
#define TILE_LOAD(t, p, s) AMX_TILE_LOAD(t, p, s)
#define TILE_STORE(t, p, s) AMX_TILE_STORE(t, p, s)
#define TILE_DPBSSD(c, a, b) AMX_TILE_DPBSSD(c, a, b)
#define TILE_DPBUSD(c, a, b) AMX_TILE_DPBUSD(c, a, b)
#define ATTN_AMX_FN if_i8_attn_16x64_amx
#include "attn_i8_matrix_body.h"

const if_attn_kernel if_k_i8_attn_16x64_amx = {.name = "i8_attn_16x64_amx",
    .requires = IF_FEAT_AMX_TILE | IF_FEAT_AMX_INT8 | IF_FEATS_AVX512, .mr = IF_ATTN_Q_TILE,
    .nr = IF_ATTN_KEY_BLOCK, .run = if_i8_attn_16x64_amx};
