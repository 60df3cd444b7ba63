/* q4_gemm_16x16_amx_body.h - the AMX 4-bit codebook GEMM body, written once and compiled
 * twice: with real tile intrinsics and an AVX-512 expansion/readout (q4_gemm_16x16_amx.c,
 * AMX + AVX-512 flags) and with the tile operations, the expansion and the readout in plain C
 * (csrc/testing/q4_gemm_16x16_amx_emulated.c, scalar flags: the test-only "amx_emulated"
 * table). The loops, tile shapes, tile configuration, scratch layout and all address
 * arithmetic are this file. The tile machine, the tile configuration and the plain-C readout
 * are the AMX Q8 GEMM's (q8_gemm_16x16_amx_body.h, included with AMX_TILE_MACHINE_ONLY); read
 * its header comment for the group-scale scheme, which is the same here.
 *
 * ---------------------------------------------------------------------------------------
 * Weights: the row-major nibbles of if_q4_gemv_fn (no pack hooks: one resident 4-bit copy,
 * shared with the tier's GEMV). TDPBSSD wants int8 B tiles in VNNI form, so for each block of
 * 16 output rows and each K chunk of up to AMXQ4_KC values (a whole number of groups) the
 * nibbles are expanded once into an on-stack scratch (16 x AMXQ4_KC bytes = 32 KiB, L1):
 *     scr[(k / 4) * 64 + 4 n + k % 4] = cb[nibble of value kc0 + k of row nb + n]
 * (0 for rows outside [n0, n1), which are not read), i.e. exactly the Q8 AMX packed layout of
 * that chunk, so any group's K window at chunk offset k is one B operand: scr + 16 k, stride 64.
 * The expansion is then reused by every activation block of 16 rows of the call (the model
 * calls with 64 activation rows per task). The nibble layout makes the expansion cheap: in a
 * block of 32 values, byte 4q + i holds value 4q + i (low nibble) and 16 + 4q + i (high), so
 * the dword q of the 16 rows' 16-byte blocks (one 16-lane gather, q = 0..3) gives VNNI rows q
 * (low nibbles) and q + 4 (high nibbles) of the block, one VPSHUFB into the codebook each.
 * Values are the signed codebook entries (TDPBSSD, signed x signed; cb in [-127, 127]), so no
 * offset correction is needed.
 *
 * Arithmetic (per output, as q4_gemm_1x1_scalar): per group one zeroed C tile gets the exact
 * int32 isum (one TDPBSSD for gs <= 64, gs / 64 plus a tail window above), is stored and read
 * out as acc = acc + (((float)isum * ws[n][g]) * xs[m][g]), groups in order, two C tiles
 * ping-ponging as in the Q8 body. When K has more than one chunk, the accumulators of a chunk
 * are stored to out and the next chunk continues each output's float chain from there (the
 * same float, so the same bits).
 *
 * Tails: the last activation block configures mr = M % 16 rows (no xq / xs row past M - 1 is
 * read); lanes of output rows outside [n0, n1) are masked in the gather, the scale load and
 * the store. n0 may be any row (the model passes multiples of 16). Shapes outside the layout
 * (gs % 32, gs not dividing K, gs > AMXQ4_KC, rows too long for 32-bit gather offsets) run
 * q4_gemm_1x1_scalar.
 *
 * Compiler barriers: GCC's tile load / store intrinsics declare no memory operands, so the
 * real kernel's AMX_TILE_LOAD / AMX_TILE_STORE and AMXQ4_BARRIER around the expansion carry
 * memory clobbers (the scratch and C buffers are written and read with plain code).
 *
 * What the including file provides, before #include: the tile macros of the Q8 body (or
 * AMX_USE_TILE_EMULATION), the readout (amx_acc, amx_wsv, amx_acc_zero, amx_ws_load,
 * amx_readout, amx_acc_store; or AMX_USE_PLAIN_C_READOUT), and either AMXQ4_USE_PLAIN_C or
 * the static functions amxq4_acc_load and amxq4_expand and the macro AMXQ4_BARRIER() (see the
 * plain-C versions below for their exact meaning). It gets the static function
 * amx_q4_gemm_body (IF_Q4_GEMM_ARGS).
 */
#ifndef IF_Q4_GEMM_16X16_AMX_BODY_H
#define IF_Q4_GEMM_16X16_AMX_BODY_H

#include <stdint.h>
#include <string.h>

#define AMX_TILE_MACHINE_ONLY 1
#include "../q8_gemm/q8_gemm_16x16_amx_body.h"

/* Values of K expanded per chunk (scratch: 16 x AMXQ4_KC bytes). */
#ifndef AMXQ4_KC
#define AMXQ4_KC ((size_t)2048)
#endif

/* 1 when the kernel's tiled path covers the shape, else it runs the scalar kernel. */
static inline int amxq4_tiled(size_t K, size_t gs) {
    return gs != 0 && gs % 32 == 0 && K % gs == 0 && gs <= AMXQ4_KC &&
           K / 2 <= (size_t)INT32_MAX / 16 - 16;
}

#if defined(AMXQ4_USE_PLAIN_C)
#define AMXQ4_BARRIER() ((void)0)

/* acc[r][n] = o[r * ldo + n] for r < rows and n in [lo, hi), else 0 (a chunk continuing the
 * float chains of the previous one). */
static inline void amxq4_acc_load(amx_acc *a, const float *o, size_t ldo, size_t rows,
                                  size_t lo, size_t hi) {
    for (size_t r = 0; r < 16; r++)
        for (size_t n = 0; n < 16; n++)
            a->v[r][n] = r < rows && n >= lo && n < hi ? o[r * ldo + n] : 0.0f;
}

/* scr[(k / 4) * 64 + 4 n + k % 4] = cb[nibble of value k of row n] for k < kc (a multiple of
 * 32), n < 16; rows n outside [lo, hi) get 0 and are not read. wb: row 0's nibbles of the
 * chunk (its first byte), rb: bytes per row (K / 2). */
static inline void amxq4_expand(int8_t *scr, const uint8_t *wb, size_t rb, size_t kc, size_t lo,
                                size_t hi, const int8_t *cb) {
    for (size_t n = 0; n < 16; n++)
        for (size_t k = 0; k < kc; k++) {
            int8_t v = 0;
            if (n >= lo && n < hi) {
                const uint8_t byte = wb[n * rb + k / 32 * 16 + k % 16];
                v = cb[k % 32 < 16 ? byte & 15 : byte >> 4];
            }
            scr[k / 4 * 64 + 4 * n + k % 4] = v;
        }
}
#endif /* AMXQ4_USE_PLAIN_C */

/* One group at chunk offset kl (values): C tile TC = sum over the group's K windows of A . B
 * (A from xq at absolute K offset kc0 + kl, B from the scratch), stored to cbuf. Uses the
 * locals of amx_q4_gemm_body (kc0, kt, nfull, tail, xa, scr, K). */
#define AMXQ4_GROUP(TC, TA, TB, kl, cbuf)                                                  \
    do {                                                                                   \
        const size_t kl_ = (kl), ka_ = kc0 + kl_;                                          \
        AMX_TILE_ZERO(TC);                                                                 \
        for (size_t s_ = 0; s_ < nfull; s_++) {                                            \
            AMX_TILE_LOAD(TA, xa + ka_ + s_ * kt, K);                                      \
            AMX_TILE_LOAD(TB, scr + 16 * (kl_ + s_ * kt), 64);                             \
            AMX_TILE_DPBSSD(TC, TA, TB);                                                   \
        }                                                                                  \
        if (tail) {                                                                        \
            AMX_TILE_LOAD(6, xa + ka_ + nfull * kt, K);                                    \
            AMX_TILE_LOAD(7, scr + 16 * (kl_ + nfull * kt), 64);                           \
            AMX_TILE_DPBSSD(TC, 6, 7);                                                     \
        }                                                                                  \
        AMX_TILE_STORE(TC, (cbuf), 64);                                                    \
    } while (0)

/* out[m * ldo + n] for m < M, n in [n0, n1); w: the row-major nibbles of the whole matrix. */
static void amx_q4_gemm_body(float *out, size_t ldo, const int8_t *xq, const float *xs,
                             size_t M, const uint8_t *w, const float *ws, const int8_t *cb,
                             size_t n0, size_t n1, size_t K, size_t gs) {
    if (M == 0 || n0 >= n1) return;
    if (!amxq4_tiled(K, gs)) {
        if_q4_gemm_1x1_scalar(out, ldo, xq, xs, M, w, ws, cb, n0, n1, K, gs);
        return;
    }
    const size_t ng = K / gs, rb = K / 2;
    const size_t kt = gs < 64 ? gs : 64;    /* main K window, bytes */
    const size_t nfull = gs / kt;           /* main windows per group */
    const size_t tail = gs - nfull * kt;    /* tail window (gs > 64, gs % 64 != 0), bytes */
    const size_t kcmax = AMXQ4_KC / gs * gs; /* values per chunk: whole groups */
    const size_t b_first = n0 / 16, b_end = (n1 + 15) / 16;

    _Alignas(64) amx_tilecfg cfg;
    _Alignas(64) int32_t cb0[16 * 16];
    _Alignas(64) int32_t cb1[16 * 16];
    _Alignas(64) int8_t scr[16 * AMXQ4_KC];
    size_t cfg_rows = 0;
    AMX_TILE_STATE;

    for (size_t b = b_first; b < b_end; b++) {
        const size_t nb = 16 * b;
        const size_t lo = n0 > nb ? n0 - nb : 0;
        const size_t hi = n1 - nb < 16 ? n1 - nb : 16;
        const float *ws_b = ws + nb * ng;
        for (size_t kc0 = 0; kc0 < K; kc0 += kcmax) {
            const size_t kc = K - kc0 < kcmax ? K - kc0 : kcmax;
            const size_t g0 = kc0 / gs, g1 = (kc0 + kc) / gs;
            AMXQ4_BARRIER(); /* earlier tile loads of scr stay before the new expansion */
            amxq4_expand(scr, w + nb * rb + kc0 / 2, rb, kc, lo, hi, cb);
            AMXQ4_BARRIER(); /* and the expansion before the tile loads that read it */
            for (size_t m0 = 0; m0 < M; m0 += 16) {
                const size_t mr = M - m0 < 16 ? M - m0 : 16;
                if (mr != cfg_rows) {
                    amx_cfg_build(&cfg, mr, kt, tail);
                    AMX_TILE_CONFIG(&cfg);
                    cfg_rows = mr;
                }
                const int8_t *xa = xq + m0 * K;
                const float *xs_m = xs + m0 * ng;
                float *out_b = out + m0 * ldo + nb;
                amx_acc acc;
                amx_wsv wv;
                if (kc0 == 0)
                    amx_acc_zero(&acc);
                else
                    amxq4_acc_load(&acc, out_b, ldo, mr, lo, hi);
                /* software pipeline: group g+1 goes to the tile unit before the readout of
                 * group g; readouts stay in group order */
                AMXQ4_GROUP(0, 2, 4, 0, cb0);
                for (size_t g = g0; g < g1; g += 2) {
                    if (g + 1 < g1) AMXQ4_GROUP(1, 3, 5, (g + 1) * gs - kc0, cb1);
                    amx_ws_load(&wv, ws_b + g, ng, lo, hi);
                    amx_readout(&acc, cb0, &wv, xs_m + g, ng, mr);
                    if (g + 1 >= g1) break;
                    if (g + 2 < g1) AMXQ4_GROUP(0, 2, 4, (g + 2) * gs - kc0, cb0);
                    amx_ws_load(&wv, ws_b + g + 1, ng, lo, hi);
                    amx_readout(&acc, cb1, &wv, xs_m + g + 1, ng, mr);
                }
                amx_acc_store(&acc, out_b, ldo, mr, lo, hi);
            }
        }
    }
    if (cfg_rows) AMX_TILE_RELEASE();
}

#endif /* IF_Q4_GEMM_16X16_AMX_BODY_H */
