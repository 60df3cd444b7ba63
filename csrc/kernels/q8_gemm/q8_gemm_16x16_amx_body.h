/* q8_gemm_16x16_amx_body.h - the AMX Q8 GEMM kernel body, written once and compiled twice:
 * with real tile intrinsics (q8_gemm_16x16_amx.c, AMX + AVX-512 flags) and with the tile
 * operations emulated in plain C (csrc/testing/q8_gemm_16x16_amx_emulated.c, scalar flags: the test-only
 * "amx_emulated" table). Only the tile ops and the 16x16 readout differ between the two;
 * the loops, the tile shapes, the tile configuration and all address arithmetic are this file.
 *
 * ---------------------------------------------------------------------------------------
 * Packed weight layout (if_q8_gemm_pack_amx), when amx_layout_is_vnni(K, gs):
 *   the N output rows are cut into blocks of 16 (block b = rows 16b .. 16b+15; rows >= N of
 *   the last block are zero), and each block is stored as the VNNI ("4 bytes of K per row
 *   per column") form of the whole K range:
 *       packed[b*16*K + k4*64 + n*4 + j] = w[16b + n][4*k4 + j]     (0 for 16b + n >= N)
 *   for k4 in [0, K/4), n in [0, 16), j in [0, 4). Block b starts at byte b*16*K and K
 *   offset k (a multiple of 4) of block b starts at byte b*16*K + 16*k, so ANY K window
 *   [k, k + width) with k, width multiples of 4 is one TDPBSSD B operand: width/4 rows of
 *   64 bytes, stride 64. The layout does not depend on gs (only the window widths do).
 *   Size: ceil(N/16) * 16 * K bytes (a multiple of 64, since K % 4 == 0). With a 64-byte
 *   aligned buffer every B tile row is exactly one cache line.
 * When gs % 4 != 0 (no K window of a whole number of dwords covers exactly one group) the
 *   packed buffer holds the rows row-major, in tiles of 16 rows each zero-padded to a
 *   multiple of 64 bytes (so it is tile-major like the VNNI layout), and the kernel calls
 *   if_q8_gemm_1x1_scalar on each tile.
 * The activations are not packed: an A tile is read straight from xq with stride K.
 * Scales stay row-major: ws (N, K/gs), xs (M, K/gs).
 *
 * ---------------------------------------------------------------------------------------
 * Group scales (the hard part). Per output, the contract is
 *     acc = 0.0f; for g in order: acc = acc + (((float)isum_g * ws[n][g]) * xs[m][g]);
 * so the int32 dot product of EACH group must be available on its own before it is scaled:
 * a TDPBSSD over a full 64-byte K window would mix up to 64/gs groups into one int32 and
 * lose them. The K windows are therefore cut at group boundaries:
 *   - gs <= 64: one TDPBSSD per group, A tile colsb = gs (rows = activation rows),
 *     B tile rows = gs/4 (colsb 64 = 16 output rows x 4 bytes), C = 16x16 int32.
 *   - gs > 64: gs/64 TDPBSSDs with 64-byte windows, plus one narrower "tail" window of
 *     gs % 64 bytes (its own A/B tiles, tmm6/tmm7), all accumulated into the same C tile:
 *     the integer sum of the group is exact in any order, so this equals isum_g.
 * The C tile is zeroed (TILEZERO) before each group, and after each group it is stored
 * (TILESTORED, 16 rows x 64 bytes) and "read out": every element goes through
 *     acc[m][n] = acc[m][n] + (((float)C[m][n] * ws[n][g]) * xs[m][g])
 * in a 16x16 float accumulator held across the groups (AVX-512: one zmm per activation row,
 * lanes = 16 output rows; ws[n][g] over the 16 lanes is one masked gather, xs[m][g] a
 * broadcast; no FMA, multiplies in the contract's order). Groups are read out in order
 * g = 0, 1, 2, ... so each output sees exactly the scalar kernel's sequence of float ops.
 * To overlap the tile unit with the readout, two C tiles alternate (ping-pong, with their
 * own A/B tiles): group g+1 is issued to the tile unit before group g is read out.
 *
 * Tile registers (one configuration per activation-row count mr, loaded by LDTILECFG at
 * most twice per call: once for full 16-row blocks, once for the M tail):
 *   tmm0, tmm1  C  (even / odd groups)   rows mr,      colsb 64
 *   tmm2, tmm3  A  (even / odd groups)   rows mr,      colsb kt = min(gs, 64)
 *   tmm4, tmm5  B  (even / odd groups)   rows kt/4,    colsb 64
 *   tmm6, tmm7  A, B of the tail window  rows mr, tail/4; colsb tail, 64 (only if gs%64)
 * M tails: the last activation block uses mr = M % 16 rows in the configuration, so no row
 * of xq/xs past M-1 is read. N tails: the packed block is zero-padded, the ws gather is
 * masked to rows [n0, n1), the output store is masked to [n0, n1).
 * Loop order: blocks of output rows in chunks of about AMX_CHUNK_BYTES of packed weights
 * (kept in L2), then activation blocks of 16 rows, then the output blocks of the chunk.
 * n0 is meant to be a multiple of 16 (gemm_n_tile), but any n0 works (lanes below n0 of
 * its block are masked).
 *
 * Cost: K/gs readouts per 16x16 output tile (gs=32, K=576: 18 readouts, 18 half-width
 * TDPBSSDs; gs=64: 9 and 9; gs=256, K=1536: 6 readouts, 24 TDPBSSDs). A readout is one
 * TILESTORED, one gather and 16 x (cvt, mul, mul, add) = 64 512-bit FP uops (~32 cycles on
 * 2 ports) against ~16 cycles per TDPBSSD: small groups are readout-bound, gs >= 128 is
 * tile-bound.
 *
 * GCC note: its _tile_loadd asm declares no memory input, so the compiler would not order
 * it after plain stores; the real kernels take their tile ops from amx_tiles.h, which puts
 * a compiler barrier before each tile load (here xq and the packed weights are never written
 * during a call, but the 4-bit GEMM and the attention stage tiles in scratch buffers).
 *
 * ---------------------------------------------------------------------------------------
 * What the including file provides, before #include:
 *   either AMX_USE_TILE_EMULATION (the plain-C tile machine, amx_emu.h), or the macros
 *     AMX_TILE_STATE            declarations of the per-call tile state (may be empty)
 *     AMX_TILE_CONFIG(cfgp)     LDTILECFG from a 64-byte amx_tilecfg
 *     AMX_TILE_RELEASE()        TILERELEASE
 *     AMX_TILE_ZERO(t)          TILEZERO tmm t
 *     AMX_TILE_LOAD(t, p, s)    TILELOADD tmm t from p, row stride s bytes
 *     AMX_TILE_DPBSSD(c, a, b)  TDPBSSD tmm c += tmm a . tmm b
 *     AMX_TILE_STORE(t, p, s)   TILESTORED tmm t to p, row stride s bytes
 *     (t, c, a, b are literal tile numbers 0..7);
 *   either AMX_USE_PLAIN_C_READOUT (below), or the types amx_acc, amx_wsv and the static
 *   functions amx_acc_zero, amx_ws_load, amx_readout, amx_acc_store (see the plain-C
 *   versions for their exact meaning).
 * It gets the static function amx_q8_gemm_body (IF_GEMM_ARGS) and amx_layout_is_vnni.
 */
#ifndef IF_Q8_GEMM_16X16_AMX_BODY_H
#define IF_Q8_GEMM_16X16_AMX_BODY_H

#include <stdint.h>
#include <string.h>

#include "../kernels.h"
#include "q8_gemm_16x16_amx_layout.h"

/* Packed weights of this many bytes (16 output rows x K each block) are swept for all
 * activation blocks before moving on, so they are re-read from L2, not from memory. */
#ifndef AMX_CHUNK_BYTES
#define AMX_CHUNK_BYTES ((size_t)768 * 1024)
#endif

/* LDTILECFG's 64-byte memory operand, palette 1. */
typedef struct amx_tilecfg {
    uint8_t palette_id;   /* 1 */
    uint8_t start_row;    /* 0: restart row, only non-zero after an interrupted load/store */
    uint8_t reserved[14]; /* must be zero */
    uint16_t colsb[16];   /* bytes per row of tmm0..tmm7; entries 8..15 must be zero */
    uint8_t rows[16];     /* rows of tmm0..tmm7; entries 8..15 must be zero */
} amx_tilecfg;
_Static_assert(sizeof(amx_tilecfg) == 64, "tile configuration must be 64 bytes");


/* The configuration for mr activation rows, main window kt bytes, tail window tail bytes. */
static inline void amx_cfg_build(amx_tilecfg *c, size_t mr, size_t kt, size_t tail) {
    memset(c, 0, sizeof *c);
    c->palette_id = 1;
    for (int t = 0; t < 2; t++) {
        c->rows[0 + t] = (uint8_t)mr; /* C */
        c->colsb[0 + t] = 64;
        c->rows[2 + t] = (uint8_t)mr; /* A */
        c->colsb[2 + t] = (uint16_t)kt;
        c->rows[4 + t] = (uint8_t)(kt / 4); /* B */
        c->colsb[4 + t] = 64;
    }
    if (tail) {
        c->rows[6] = (uint8_t)mr;
        c->colsb[6] = (uint16_t)tail;
        c->rows[7] = (uint8_t)(tail / 4);
        c->colsb[7] = 64;
    }
}

/* The tile machine in plain C (amx_emu.h), for the emulated twin. */
#if defined(AMX_USE_TILE_EMULATION)
#include "../amx_emu.h"
#endif

/* ---------------------------------------------------------------------------------------
 * The 16x16 readout in plain C: the same float operations, in the same order per output,
 * as the AVX-512 version in q8_gemm_16x16_amx.c.
 * ------------------------------------------------------------------------------------- */
#if defined(AMX_USE_PLAIN_C_READOUT)
typedef struct amx_acc {
    float v[16][16]; /* [activation row][output row] */
} amx_acc;
typedef struct amx_wsv {
    float v[16]; /* ws[nb + n][g] for the 16 output rows of the block (0 past n1) */
} amx_wsv;

static inline void amx_acc_zero(amx_acc *a) {
    for (size_t r = 0; r < 16; r++)
        for (size_t n = 0; n < 16; n++) a->v[r][n] = 0.0f;
}

/* ws_g = ws + nb*ng + g: lanes n in [lo, hi) get ws_g[n*ng], the others 0; rows outside
 * [n0, n1) are not read. */
static inline void amx_ws_load(amx_wsv *wv, const float *ws_g, size_t ng, size_t lo,
                               size_t hi) {
    for (size_t n = 0; n < 16; n++) wv->v[n] = n >= lo && n < hi ? ws_g[n * ng] : 0.0f;
}

/* acc[r][n] = acc[r][n] + (((float)C[r][n] * ws[n][g]) * xs[m0+r][g]) for r < rows;
 * cb is the stored C tile (16 int32 per row), xs_g = xs + m0*ng + g. */
static inline void amx_readout(amx_acc *a, const int32_t *cb, const amx_wsv *wv,
                               const float *xs_g, size_t ng, size_t rows) {
    for (size_t r = 0; r < rows; r++) {
        const float x = xs_g[r * ng];
        for (size_t n = 0; n < 16; n++)
            a->v[r][n] = a->v[r][n] + (((float)cb[16 * r + n] * wv->v[n]) * x);
    }
}

/* o = out + m0*ldo + nb: rows r < rows, lanes n in [lo, hi). */
static inline void amx_acc_store(const amx_acc *a, float *o, size_t ldo, size_t rows,
                                 size_t lo, size_t hi) {
    for (size_t r = 0; r < rows; r++)
        for (size_t n = lo; n < hi; n++) o[r * ldo + n] = a->v[r][n];
}
#endif /* AMX_USE_PLAIN_C_READOUT */

/* AMX_TILE_MACHINE_ONLY: an including file wants only the pieces above (the tile
 * configuration, the emulated tile machine, the plain-C readout), not the Q8 body (the 4-bit
 * AMX GEMM, q4_gemm_16x16_amx_body.h). */
#if !defined(AMX_TILE_MACHINE_ONLY)
/* One group g: C tile TC = sum over the group's K windows of A . B, stored to cbuf.
 * Uses the locals of amx_q8_gemm_body (gs, kt, nfull, tail, xa, bw, K). */
#define AMX_BODY_GROUP(TC, TA, TB, gidx, cbuf)                                             \
    do {                                                                                   \
        const size_t k_ = (gidx) * gs;                                                     \
        AMX_TILE_ZERO(TC);                                                                 \
        for (size_t s_ = 0; s_ < nfull; s_++) {                                            \
            AMX_TILE_LOAD(TA, xa + k_ + s_ * kt, K);                                       \
            AMX_TILE_LOAD(TB, bw + 16 * (k_ + s_ * kt), 64);                               \
            AMX_TILE_DPBSSD(TC, TA, TB);                                                   \
        }                                                                                  \
        if (tail) {                                                                        \
            const size_t kt_ = k_ + nfull * kt;                                            \
            AMX_TILE_LOAD(6, xa + kt_, K);                                                 \
            AMX_TILE_LOAD(7, bw + 16 * kt_, 64);                                           \
            AMX_TILE_DPBSSD(TC, 6, 7);                                                     \
        }                                                                                  \
        AMX_TILE_STORE(TC, (cbuf), 64);                                                    \
    } while (0)

/* out[m*ldo + n] for m < M, n in [n0, n1), w = packed buffer of the whole matrix. */
static void amx_q8_gemm_body(float *out, size_t ldo, const int8_t *xq, const float *xs,
                             size_t M, const int8_t *w, const float *ws, size_t n0, size_t n1,
                             size_t K, size_t gs) {
    if (M == 0 || n0 >= n1) return;
    if (!amx_layout_is_vnni(K, gs)) { /* packed = row-major tiles of 16 rows */
        const size_t tb = (16 * K + 63) / 64 * 64, ngs = K / gs;
        for (size_t b = n0 / 16; 16 * b < n1; b++) {
            const size_t nb = 16 * b, lo = n0 > nb ? n0 - nb : 0;
            const size_t hi = n1 - nb < 16 ? n1 - nb : 16;
            if_q8_gemm_1x1_scalar(out + nb, ldo, xq, xs, M, w + b * tb, ws + nb * ngs, lo, hi,
                                  K, gs);
        }
        return;
    }
    const size_t ng = K / gs;
    const size_t kt = gs < 64 ? gs : 64; /* main K window, bytes */
    const size_t nfull = gs / kt;         /* main windows per group */
    const size_t tail = gs - nfull * kt;  /* tail window (gs > 64, gs % 64 != 0), bytes */
    const size_t bstride = 16 * K;        /* packed bytes per block of 16 output rows */
    size_t chunk = AMX_CHUNK_BYTES / bstride;
    if (chunk == 0) chunk = 1;
    const size_t b_first = n0 / 16, b_end = (n1 + 15) / 16;

    _Alignas(64) amx_tilecfg cfg;
    _Alignas(64) int32_t cb0[16 * 16];
    _Alignas(64) int32_t cb1[16 * 16];
    size_t cfg_rows = 0;
    AMX_TILE_STATE;

    for (size_t bc = b_first; bc < b_end; bc += chunk) {
        const size_t bc_end = b_end - bc > chunk ? bc + chunk : b_end;
        for (size_t m0 = 0; m0 < M; m0 += 16) {
            const size_t mr = M - m0 < 16 ? M - m0 : 16;
            if (mr != cfg_rows) {
                amx_cfg_build(&cfg, mr, kt, tail);
                AMX_TILE_CONFIG(&cfg);
                cfg_rows = mr;
            }
            const int8_t *xa = xq + m0 * K;
            const float *xs_m = xs + m0 * ng;
            float *out_m = out + m0 * ldo;
            for (size_t b = bc; b < bc_end; b++) {
                const size_t nb = 16 * b;
                const size_t lo = n0 > nb ? n0 - nb : 0;
                const size_t hi = n1 - nb < 16 ? n1 - nb : 16;
                const int8_t *bw = w + b * bstride;
                const float *ws_b = ws + nb * ng;
                amx_acc acc;
                amx_wsv wv;
                amx_acc_zero(&acc);
                /* software pipeline: the tiles of group g+1 are issued before the readout
                 * of group g; readouts stay in group order. */
                AMX_BODY_GROUP(0, 2, 4, 0, cb0);
                for (size_t g = 0; g < ng; g += 2) {
                    if (g + 1 < ng) AMX_BODY_GROUP(1, 3, 5, g + 1, cb1);
                    amx_ws_load(&wv, ws_b + g, ng, lo, hi);
                    amx_readout(&acc, cb0, &wv, xs_m + g, ng, mr);
                    if (g + 1 >= ng) break;
                    if (g + 2 < ng) AMX_BODY_GROUP(0, 2, 4, g + 2, cb0);
                    amx_ws_load(&wv, ws_b + g + 1, ng, lo, hi);
                    amx_readout(&acc, cb1, &wv, xs_m + g + 1, ng, mr);
                }
                amx_acc_store(&acc, out_m + nb, ldo, mr, lo, hi);
            }
        }
    }
    if (cfg_rows) AMX_TILE_RELEASE();
}
#endif /* !AMX_TILE_MACHINE_ONLY */

#endif /* IF_Q8_GEMM_16X16_AMX_BODY_H */
