/* peak_int8_amx.c (-mamx-tile -mamx-int8) - the amx tier's int8 rate: TDPBSSD (16 x 16 x 64
 * s8 multiply-adds into an int32 tile) into 4 independent accumulator tiles from 2 A and 2 B
 * tiles loaded once. Runs only where the amx tier is supported; asks Linux for the XTILEDATA
 * permission first and does nothing (returns 0) without it. */
#define _DEFAULT_SOURCE 1 /* syscall() under -std=c11 */
#include <immintrin.h>
#include <string.h>

#include "isaforge_bench.h"

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static int amx_permitted(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    unsigned long long perm = 0;
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0)
        return 0;
    if (syscall(SYS_arch_prctl, 0x1022 /* ARCH_GET_XCOMP_PERM */, &perm) != 0) return 0;
    return (int)((perm >> 18) & 1u);
#else
    return 1;
#endif
}

uint64_t ifb_peak_loop_amx(size_t iters, int64_t *sink) {
    if (!amx_permitted()) return 0;
    _Alignas(64) tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    _Alignas(64) int8_t a[16 * 64], b[16 * 64];
    _Alignas(64) int32_t c[16 * 16];
    for (int i = 0; i < 16 * 64; i++) a[i] = (int8_t)(i % 7 - 3), b[i] = (int8_t)(i % 5 - 2);
    __asm__ volatile("" : : "r"(&cfg) : "memory"); /* all 64 bytes stored before the load */
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, a, 64);
    _tile_loadd(5, a, 64);
    _tile_loadd(6, b, 64);
    _tile_loadd(7, b, 64);
    for (size_t it = 0; it < iters; it++) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
    _tile_stored(0, c, 64);
    int64_t s = c[0] + c[255];
    _tile_stored(3, c, 64);
    *sink = s + c[17];
    _tile_release();
    return (uint64_t)iters * 4 * 16 * 16 * 64;
}
