/* i8_attn_16x64_amx.c - int8 matrix-engine attention on AMX (-mamx-tile -mamx-int8): TDPBSSD for
 * Q.K^T, TDPBUSD for u8 P.V, the body and contract of attn_i8_matrix_body.h with real tile
 * instructions. The tile configuration is loaded at the start of every call and released
 * at its end (AMX permission: if_amx_thread_init / features.c). */
#include <immintrin.h>

#define TILE_STATE ((void)0)
#define TILE_CONFIG(cfg)                                                                   \
    do {                                                                                   \
        __asm__ volatile("" : : "r"(cfg) : "memory");                                      \
        _tile_loadconfig(cfg);                                                             \
    } while (0)
#define TILE_RELEASE() _tile_release()
#define TILE_ZERO(t) _tile_zero(t)
/* GCC's _tile_loadd asm declares no memory input, so plain stores to the staged Q / P planes
 * could be moved past it: an empty asm with a memory clobber first orders them. */
#define TILE_LOAD(t, p, s)                                                                 \
    do {                                                                                   \
        __asm__ volatile("" : : : "memory");                                               \
        _tile_loadd(t, p, s);                                                              \
    } while (0)
#define TILE_STORE(t, p, s) _tile_stored(t, p, s)
#define TILE_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define TILE_DPBUSD(c, a, b) _tile_dpbusd(c, a, b)
#define ATTN_AMX_FN if_i8_attn_16x64_amx
#include "attn_i8_matrix_body.h"

const if_attn_kernel if_k_i8_attn_16x64_amx = {.name = "i8_attn_16x64_amx",
    .requires = IF_FEAT_AMX_TILE | IF_FEAT_AMX_INT8 | IF_FEATS_AVX512, .mr = IF_ATTN_Q_TILE,
    .nr = IF_ATTN_KEY_BLOCK, .run = if_i8_attn_16x64_amx};
