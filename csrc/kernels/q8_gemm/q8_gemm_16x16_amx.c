/* AMX Q8 GEMM (-mamx-tile -mamx-int8 -mavx512f -mavx512bw -mavx512vl -mfma -mavx512vnni): the
 * kernel body of q8_gemm_16x16_amx_body.h with real tile intrinsics (TDPBSSD: signed int8 x
 * signed int8, so no sign trick is needed) and an AVX-512 readout of the 16x16 int32 C tile
 * after each group. Packed layout, group-scale scheme and tile registers: see the body header
 * (its emulated twin, test-only, is csrc/testing/q8_gemm_16x16_amx_emulated.c). At M = 1
 * (decode) it streams the same packed blocks with AVX-512 VNNI instead (amx_q8_decode), so a
 * model keeps this one copy of its Q8 weights (decode_packed). */
#define _DEFAULT_SOURCE 1 /* syscall() under -std=c11 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "../kernels.h"

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "../amx_tiles.h" /* the tile ops with the compiler barriers GCC's lack */

#include "amx_readout_avx512.h"

#include "q8_gemm_16x16_amx_body.h"

/* Groups per pass of the M = 1 path: their offset corrections live on the stack. */
#define AMX_M1_GB 256
/* Bytes ahead of the line being read that the M = 1 path prefetches (0: none). */
#ifndef AMX_M1_PFD
#define AMX_M1_PFD 9216
#endif

/* M = 1 (decode) over the VNNI blocks with AVX-512 VNNI, no tiles: a 64-byte line of a block
 * is 4 consecutive K bytes of its 16 rows, so one VPDPBUSD against the 4 activation bytes
 * broadcast adds them to 16 row sums (lane = output row; no horizontal reduction). VPDPBUSD
 * takes one unsigned operand: the weights go in as w ^ 0x80 = w + 128 and the group's
 * 128 * sum x is subtracted after (exact: int32 wraps). Then per group, in order,
 * acc = acc + (((float)isum * ws) * xs), ws over the 16 rows a masked gather (stride K/gs),
 * as the scalar kernel; the float lanes pass through out between passes of AMX_M1_GB groups. */
static void amx_q8_decode(float *out, const int8_t *xq, const float *xs, const int8_t *w,
                          const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    const size_t ng = K / gs, qpg = gs / 4, bstride = 16 * K;
    const __m512i c80 = _mm512_set1_epi8((char)0x80);
    const __m512i vidx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int)ng));
    int32_t cx[AMX_M1_GB];
    for (size_t gb = 0; gb < ng; gb += AMX_M1_GB) {
        const size_t gc = ng - gb < AMX_M1_GB ? ng - gb : AMX_M1_GB;
        for (size_t g = 0; g < gc; g++) {
            const int8_t *x = xq + (gb + g) * gs;
            int32_t sx = 0;
            for (size_t k = 0; k < gs; k++) sx += x[k];
            cx[g] = 128 * sx;
        }
        for (size_t b = n0 / 16; 16 * b < n1; b++) {
            const size_t nb = 16 * b, lo = n0 > nb ? n0 - nb : 0;
            const size_t hi = n1 - nb < 16 ? n1 - nb : 16;
            const __mmask16 m = (__mmask16)((0xFFFFu >> (16 - hi)) & (0xFFFFu << lo));
            __m512 acc = gb ? _mm512_maskz_loadu_ps(m, out + nb) : _mm512_setzero_ps();
            const int8_t *p = w + b * bstride + 16 * gb * gs;
            const int8_t *x = xq + gb * gs;
            const float *wsg = ws + nb * ng + gb;
            /* the next block's 16 rows of scales are 64 * ng bytes: one line per group */
            const char *wsn = (const char *)(ws + (nb + 16) * ng);
            for (size_t g = 0; g < gc; g++) {
                if (AMX_M1_PFD) _mm_prefetch(wsn + 64 * g, _MM_HINT_T0);
                __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
                size_t q = 0;
                for (; q + 2 <= qpg; q += 2) {
                    int32_t x0, x1;
                    memcpy(&x0, x + 4 * q, 4);
                    memcpy(&x1, x + 4 * q + 4, 4);
                    if (AMX_M1_PFD) {
                        _mm_prefetch((const char *)p + AMX_M1_PFD, _MM_HINT_T0);
                        _mm_prefetch((const char *)p + AMX_M1_PFD + 64, _MM_HINT_T0);
                    }
                    s0 = _mm512_dpbusd_epi32(s0, _mm512_xor_si512(_mm512_loadu_si512(p), c80),
                                             _mm512_set1_epi32(x0));
                    s1 = _mm512_dpbusd_epi32(
                        s1, _mm512_xor_si512(_mm512_loadu_si512(p + 64), c80),
                        _mm512_set1_epi32(x1));
                    p += 128;
                }
                if (q < qpg) {
                    int32_t x0;
                    memcpy(&x0, x + 4 * q, 4);
                    s0 = _mm512_dpbusd_epi32(s0, _mm512_xor_si512(_mm512_loadu_si512(p), c80),
                                             _mm512_set1_epi32(x0));
                    p += 64;
                }
                x += gs;
                const __m512i is =
                    _mm512_sub_epi32(_mm512_add_epi32(s0, s1), _mm512_set1_epi32(cx[g]));
                const __m512 wsv =
                    _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, vidx, wsg + g, 4);
                acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(is), wsv),
                                                       _mm512_set1_ps(xs[gb + g])));
            }
            _mm512_mask_storeu_ps(out + nb, m, acc);
        }
    }
}

/* Q8 GEMM on AMX: 16 activation rows x 16 output rows per C tile; per group one TDPBSSD
 * (gs <= 64) or gs/64 (+ a tail window) into a zeroed C tile, then a TILESTORED and an
 * AVX-512 readout that applies ws and xs per group in order. w is the buffer written by
 * if_q8_gemm_pack_amx for the whole matrix (64-byte alignment recommended, not required);
 * n0 is a multiple of 16 (the tier's gemm_n_tile), n1 anything. Loads its tile
 * configuration on entry and releases the tiles on return, so it needs no per-thread state
 * beyond the process's AMX permission (if_amx_thread_init). */
void if_q8_gemm_16x16_amx(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                          const int8_t *w, const float *ws, size_t n0, size_t n1, size_t K,
                          size_t gs) {
    if (M == 1 && n0 < n1 && amx_layout_is_vnni(K, gs)) {
        amx_q8_decode(out, xq, xs, w, ws, n0, n1, K, gs);
        return;
    }
    amx_q8_gemm_body(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs);
}

/* AMX tile data needs the process's XTILEDATA permission (Linux, arch_prctl
 * ARCH_REQ_XCOMP_PERM; without it any tile instruction raises SIGILL). Requests it (it is
 * process-wide and idempotent; features.c asks for it too) and checks it with
 * ARCH_GET_XCOMP_PERM. The tile configuration itself is loaded by every kernel call, so
 * nothing else is needed per thread. Returns 0 when tiles are usable, -1 otherwise. */
int if_amx_thread_init(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    unsigned long long perm = 0;
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0)
        return -1;
    if (syscall(SYS_arch_prctl, 0x1022 /* ARCH_GET_XCOMP_PERM */, &perm) != 0) return -1;
    return (perm >> 18) & 1u ? 0 : -1;
#else
    return 0;
#endif
}

const if_q8_gemm_kernel if_k_q8_gemm_16x16_amx = {.name = "q8_gemm_16x16_amx",
    .requires = IF_FEAT_AMX_TILE | IF_FEAT_AMX_INT8 | IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI,
    .mr = 16, .nr = 16, .pack_size = if_q8_gemm_pack_size_amx, .pack = if_q8_gemm_pack_amx,
    .run = if_q8_gemm_16x16_amx, .decode_packed = 1, .unpack = if_q8_gemm_unpack_amx};
