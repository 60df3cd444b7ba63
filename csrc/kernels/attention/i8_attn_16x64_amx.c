/* attn_i8_amx.c - int8 matrix-engine attention on AMX (-mamx-tile -mamx-int8): TDPBSSD for
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
#define TILE_LOAD(t, p, s) _tile_loadd(t, p, s)
#define TILE_STORE(t, p, s) _tile_stored(t, p, s)
#define TILE_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define TILE_DPBUSD(c, a, b) _tile_dpbusd(c, a, b)
#define ATTN_AMX_FN if_attn_i8_amx
#include "attn_i8_matrix_body.h"
