/* amx_emu.h - the AMX tile machine in plain C (palette 1: 8 tiles of 16 rows x 64 bytes), for
 * the test-only emulated twins of the AMX GEMMs (csrc/testing/): the same AMX_TILE_* names
 * amx_tiles.h gives the real instructions, so a kernel body compiles against either. It follows the pseudo-code of LDTILECFG, TILEZERO, TILELOADD, TILESTORED, TDPBSSD,
 * TDPBSUD and TILERELEASE in the Intel SDM / intrinsics guide, including the checks that raise
 * #GP / #UD on hardware (reported here with abort()): a configuration or operand shape the
 * emulator accepts is one the hardware accepts.
 *
 * The includer gets AMX_TILE_STATE (the per-call machine, a local pointed to by amx_emu_s_;
 * a helper taking AMX_TILE_PARAM is passed AMX_TILE_ARG),
 * AMX_TILE_CONFIG(cfgp) (64 bytes at cfgp), AMX_TILE_RELEASE(), AMX_TILE_ZERO(t),
 * AMX_TILE_LOAD(t, p, s), AMX_TILE_STORE(t, p, s), AMX_TILE_DPBSSD(c, a, b),
 * AMX_TILE_DPBSUD(c, a, b) and AMX_BARRIER() (nothing to order: plain C loads and stores). */
#ifndef ISAFORGE_AMX_EMU_H
#define ISAFORGE_AMX_EMU_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* LDTILECFG's 64-byte memory operand, palette 1. */
typedef struct amx_emu_cfg {
    uint8_t palette_id;   /* 1 */
    uint8_t start_row;    /* 0: restart row, only non-zero after an interrupted load/store */
    uint8_t reserved[14]; /* must be zero */
    uint16_t colsb[16];   /* bytes per row of tmm0..tmm7; entries 8..15 must be zero */
    uint8_t rows[16];     /* rows of tmm0..tmm7; entries 8..15 must be zero */
} amx_emu_cfg;
_Static_assert(sizeof(amx_emu_cfg) == 64, "tile configuration must be 64 bytes");

typedef struct amx_emu {
    int configured; /* palette 1 loaded and not released */
    amx_emu_cfg cfg;
    uint8_t t[8][16][64];
} amx_emu;

static void amx_emu_fault(const char *what) {
    fprintf(stderr, "amx emulation: %s (would fault on hardware)\n", what);
    abort();
}

static void amx_emu_release(amx_emu *s) { memset(s, 0, sizeof *s); }

/* LDTILECFG from the 64 bytes at mem (any 64-byte configuration struct of the includer). */
static void amx_emu_config(amx_emu *s, const void *mem) {
    amx_emu_cfg c;
    memcpy(&c, mem, sizeof c);
    if (c.palette_id == 0) { /* INIT state, like TILERELEASE */
        amx_emu_release(s);
        return;
    }
    if (c.palette_id != 1) amx_emu_fault("LDTILECFG: palette other than 0/1 (#GP)");
    if (c.start_row != 0) amx_emu_fault("LDTILECFG: start_row != 0 in a fresh config");
    for (int i = 0; i < 14; i++)
        if (c.reserved[i]) amx_emu_fault("LDTILECFG: reserved byte set (#GP)");
    for (int t = 0; t < 16; t++) {
        if (t >= 8 && (c.colsb[t] || c.rows[t])) amx_emu_fault("LDTILECFG: tile >= 8 (#GP)");
        if (c.colsb[t] > 64 || c.rows[t] > 16) amx_emu_fault("LDTILECFG: tile too big (#GP)");
        if ((c.colsb[t] == 0) != (c.rows[t] == 0))
            amx_emu_fault("LDTILECFG: rows/colsb half configured (#GP)");
    }
    s->cfg = c;
    s->configured = 1;
    memset(s->t, 0, sizeof s->t); /* LDTILECFG zeroes the tile data */
}

static void amx_emu_valid(const amx_emu *s, int t) {
    if (!s->configured) amx_emu_fault("tile instruction without a configuration (#UD)");
    if (t < 0 || t >= 8 || s->cfg.rows[t] == 0) amx_emu_fault("unconfigured tile (#UD)");
}

static void amx_emu_zero(amx_emu *s, int t) {
    amx_emu_valid(s, t);
    memset(s->t[t], 0, sizeof s->t[t]);
}

static void amx_emu_load(amx_emu *s, int t, const void *base, size_t stride) {
    amx_emu_valid(s, t);
    const size_t rows = s->cfg.rows[t], colsb = s->cfg.colsb[t];
    memset(s->t[t], 0, sizeof s->t[t]); /* write_row_and_zero + zero_upper_rows */
    for (size_t r = 0; r < rows; r++)
        memcpy(s->t[t][r], (const uint8_t *)base + r * stride, colsb);
}

static void amx_emu_store(const amx_emu *s, int t, void *base, size_t stride) {
    amx_emu_valid(s, t);
    const size_t rows = s->cfg.rows[t], colsb = s->cfg.colsb[t];
    for (size_t r = 0; r < rows; r++) memcpy((uint8_t *)base + r * stride, s->t[t][r], colsb);
}

/* TDPBSSD / TDPBSUD c, a, b (name says which): for m < c.rows, k < a.colsb/4, n < c.colsb/4:
 *   c[m].dword[n] += sum_j (int8)a[m].byte[4k+j] * B(b[k].byte[4n+j])   (int32, wraps)
 * with B the byte as int8 (TDPBSSD) or as uint8 (b_unsigned: TDPBSUD). Both instructions have
 * the same operand checks. */
static void amx_emu_dp(amx_emu *s, int c, int a, int b, int b_unsigned, const char *name) {
    char why[96];
    amx_emu_valid(s, c);
    amx_emu_valid(s, a);
    amx_emu_valid(s, b);
    const amx_emu_cfg *f = &s->cfg;
    const char *bad = c == a || c == b || a == b           ? "tiles not distinct"
                      : f->colsb[a] % 4 || f->colsb[c] % 4 ? "colsb % 4 != 0"
                      : f->colsb[a] / 4 != f->rows[b]      ? "a.colsb/4 != b.rows"
                      : f->colsb[c] != f->colsb[b]         ? "c.colsb != b.colsb"
                      : f->rows[c] != f->rows[a]           ? "c.rows != a.rows"
                                                           : NULL;
    if (bad) {
        snprintf(why, sizeof why, "%s: %s (#UD)", name, bad);
        amx_emu_fault(why);
    }
    const size_t rows = f->rows[c], nk = f->colsb[a] / 4u, nn = f->colsb[c] / 4u;
    for (size_t m = 0; m < rows; m++) {
        uint32_t tmp[16];
        memcpy(tmp, s->t[c][m], sizeof tmp);
        for (size_t k = 0; k < nk; k++) {
            for (size_t n = 0; n < nn; n++) {
                uint32_t d = tmp[n];
                for (size_t j = 0; j < 4; j++) {
                    const uint8_t bb = s->t[b][k][4 * n + j];
                    const int32_t bv = b_unsigned ? (int32_t)bb : (int32_t)(int8_t)bb;
                    d += (uint32_t)((int32_t)(int8_t)s->t[a][m][4 * k + j] * bv);
                }
                tmp[n] = d;
            }
        }
        memset(s->t[c][m], 0, 64); /* write_row_and_zero */
        memcpy(s->t[c][m], tmp, nn * 4);
    }
    for (size_t m = rows; m < 16; m++) memset(s->t[c][m], 0, 64); /* zero_upper_rows */
}

#define AMX_BARRIER() ((void)0)
#define AMX_TILE_STATE                                                                     \
    amx_emu amx_emu_m_;                                                                    \
    amx_emu *const amx_emu_s_ = &amx_emu_m_;                                               \
    amx_emu_release(amx_emu_s_)
/* a helper that runs tile operations takes the caller's machine */
#define AMX_TILE_PARAM amx_emu *const amx_emu_s_
#define AMX_TILE_ARG amx_emu_s_
#define AMX_TILE_CONFIG(cfgp) amx_emu_config(amx_emu_s_, (cfgp))
#define AMX_TILE_RELEASE() amx_emu_release(amx_emu_s_)
#define AMX_TILE_ZERO(t) amx_emu_zero(amx_emu_s_, (t))
#define AMX_TILE_LOAD(t, p, s) amx_emu_load(amx_emu_s_, (t), (p), (size_t)(s))
#define AMX_TILE_DPBSSD(c, a, b) amx_emu_dp(amx_emu_s_, (c), (a), (b), 0, "TDPBSSD")
#define AMX_TILE_DPBSUD(c, a, b) amx_emu_dp(amx_emu_s_, (c), (a), (b), 1, "TDPBSUD")
#define AMX_TILE_STORE(t, p, s) amx_emu_store(amx_emu_s_, (t), (p), (size_t)(s))

#endif
