/* amx_tiles.h - the real AMX tile operations under the names the AMX kernel bodies use
 * (AMX_TILE_*: q8_gemm_16x16_amx_body.h, q4_gemm_16x16_amx_body.h, the K-quant bodies
 * q4k/q45k_gemm_16x16_amx_body.h and q6k/q6k_gemm_16x16_amx_body.h; the int8 attention body
 * maps its TILE_* names onto them), for the files compiled with -mamx-tile -mamx-int8. Their
 * emulated twins (csrc/testing/) take the same names in plain C from amx_emu.h instead.
 *
 * GCC's AMX intrinsics are asm statements that tell the compiler less than they do:
 * _tile_loadconfig declares a read of 8 of the config's 64 bytes, and _tile_loadd no memory
 * read at all, so plain stores to a config, a staged A / B tile or a scratch could be moved
 * past them; an empty asm with a memory clobber before each orders those stores first. A
 * tile store is followed by one too, so that the plain reads of a stored C tile stay after
 * it whatever the compiler's version says of _tile_stored. */
#ifndef ISAFORGE_AMX_TILES_H
#define ISAFORGE_AMX_TILES_H

#include <immintrin.h>

#define AMX_BARRIER() __asm__ volatile("" : : : "memory")
#define AMX_TILE_STATE ((void)0)
/* a helper that runs tile operations: the tiles are the core's, nothing to pass */
#define AMX_TILE_PARAM __attribute__((unused)) int amx_tile_unused_
#define AMX_TILE_ARG 0
#define AMX_TILE_CONFIG(cfgp)                                                              \
    do {                                                                                   \
        __asm__ volatile("" : : "r"(cfgp) : "memory");                                     \
        _tile_loadconfig(cfgp);                                                            \
    } while (0)
#define AMX_TILE_RELEASE() _tile_release()
#define AMX_TILE_ZERO(t) _tile_zero(t)
#define AMX_TILE_LOAD(t, p, s)                                                             \
    do {                                                                                   \
        AMX_BARRIER();                                                                     \
        _tile_loadd(t, p, s);                                                              \
    } while (0)
#define AMX_TILE_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define AMX_TILE_DPBUSD(c, a, b) _tile_dpbusd(c, a, b)
#define AMX_TILE_DPBSUD(c, a, b) _tile_dpbsud(c, a, b)
#define AMX_TILE_STORE(t, p, s)                                                            \
    do {                                                                                   \
        _tile_stored(t, p, s);                                                             \
        AMX_BARRIER();                                                                     \
    } while (0)

#endif
