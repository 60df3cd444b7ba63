/* q4_amx_simde_test.c - test-only driver (tests/test_q4_amx_simde.py builds it when SIMDe's
 * headers are found; never part of a build): the AMX 4-bit GEMM body (q4_gemm_16x16_amx_body.h)
 * with the emulated tile machine of the Q8 body, but the AVX-512 expansion and readout of
 * q4_gemm_16x16_amx_avx512.h, the same lines the real kernel compiles, here through SIMDe's
 * portable AVX-512 (<simde/x86/avx512.h>, native aliases), so they run on a CPU without
 * AVX-512. The few intrinsics SIMDe 0.7 lacks (the gathers, the int32 -> float conversion, the
 * masked float load / store) are defined below from the Intel intrinsics guide's pseudo-code,
 * lane by lane; they are the part of the real kernel this driver does not check. Compared
 * with q4_gemm_1x1_scalar bit for bit on an M x N x K x GS grid with tails, K above the
 * 2048-value chunk, tail windows (gs 96, 160) and output ranges split at odd rows, with
 * sentinels around every output row. Prints "ok N cases" or "FAIL ..." (exit 1).
 * Build: cc -O2 -std=c11 -ffp-contract=off -I<simde include> -Icsrc/include -I<generated>
 *        tests/native/q4_amx_simde_test.c (from the repository root; <generated> holds
 *        if_kernel_decls.h from csrc/manifest.py --header). */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

/* ---- what SIMDe 0.7.4 does not provide (only if it does not) ---- */
#define __mmask16 simde__mmask16 /* a type, not aliased by SIMDe */
#ifndef _mm512_cvtepi32_ps
static simde__m512 shim_cvtepi32_ps(simde__m512i a) {
    int32_t i[16];
    float f[16];
    simde__m512 r;
    memcpy(i, &a, 64);
    for (int l = 0; l < 16; l++) f[l] = (float)i[l];
    memcpy(&r, f, 64);
    return r;
}
#define _mm512_cvtepi32_ps shim_cvtepi32_ps
#endif
#ifndef _mm512_maskz_loadu_ps
static simde__m512 shim_maskz_loadu_ps(simde__mmask16 k, const void *p) {
    float f[16];
    simde__m512 r;
    for (int l = 0; l < 16; l++) {
        f[l] = 0.0f;
        if ((k >> l) & 1) memcpy(&f[l], (const char *)p + 4 * l, 4);
    }
    memcpy(&r, f, 64);
    return r;
}
#define _mm512_maskz_loadu_ps shim_maskz_loadu_ps
#endif
#ifndef _mm512_mask_storeu_ps
static void shim_mask_storeu_ps(void *p, simde__mmask16 k, simde__m512 a) {
    float f[16];
    memcpy(f, &a, 64);
    for (int l = 0; l < 16; l++)
        if ((k >> l) & 1) memcpy((char *)p + 4 * l, &f[l], 4);
}
#define _mm512_mask_storeu_ps shim_mask_storeu_ps
#endif
/* gathers: lane l = k[l] ? *(base + idx[l] * scale) : src[l] (4 bytes) */
static simde__m512i shim_gather32(simde__m512i src, simde__mmask16 k, simde__m512i idx,
                                  const void *base, int scale) {
    int32_t s[16], ix[16];
    simde__m512i r;
    memcpy(s, &src, 64);
    memcpy(ix, &idx, 64);
    for (int l = 0; l < 16; l++)
        if ((k >> l) & 1)
            memcpy(&s[l], (const char *)base + (ptrdiff_t)ix[l] * scale, 4);
    memcpy(&r, s, 64);
    return r;
}
#ifndef _mm512_mask_i32gather_epi32
#define _mm512_mask_i32gather_epi32(src, k, idx, base, scale)                             \
    shim_gather32((src), (k), (idx), (base), (scale))
#endif
#ifndef _mm512_mask_i32gather_ps
static simde__m512 shim_gather_ps(simde__m512 src, simde__mmask16 k, simde__m512i idx,
                                  const void *base, int scale) {
    simde__m512i s, r;
    simde__m512 f;
    memcpy(&s, &src, 64);
    r = shim_gather32(s, k, idx, base, scale);
    memcpy(&f, &r, 64);
    return f;
}
#define _mm512_mask_i32gather_ps(src, k, idx, base, scale)                                \
    shim_gather_ps((src), (k), (idx), (base), (scale))
#endif

/* ---- the kernel: emulated tiles, AVX-512 expansion and readout (via SIMDe) ---- */
#define AMX_USE_TILE_EMULATION 1
#define AMXQ4_SIMDE 1
#define AMXQ4_BARRIER() ((void)0)
#include "../../csrc/kernels/q4_gemm/q4_gemm_16x16_amx_avx512.h"
#include "../../csrc/kernels/q4_gemm/q4_gemm_16x16_amx_body.h"

/* the scalar reference, compiled into this driver */
#include "../../csrc/kernels/q4_gemv/q4_gemv_1x1_scalar.c"
#include "../../csrc/kernels/q4_gemm/q4_gemm_1x1_scalar.c"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 0x2545F4914F6CDD1Dull) >> 32);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        printf("FAIL out of memory\n");
        exit(1);
    }
    return p;
}

static const uint32_t SENTINEL = 0x7fc0dead; /* a NaN no kernel writes */

int main(void) {
    static const size_t Ms[] = {1, 2, 3, 15, 16, 17, 33, 64};
    static const size_t Ns[] = {1, 3, 16, 17, 40, 63};
    static const size_t GSs[] = {32, 64, 96, 128, 160, 256};
    size_t cases = 0;
    for (size_t gi = 0; gi < sizeof GSs / sizeof *GSs; gi++) {
        const size_t gs = GSs[gi];
        const size_t Ks[] = {gs, 3 * gs, 576, 1536, (4800 + gs - 1) / gs * gs};
        for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
            const size_t K = Ks[ki], ng = K / gs;
            if (K % gs) continue;
            for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++) {
                const size_t N = Ns[ni], ldo = N + 3;
                uint8_t *w = xmalloc(N * K / 2);
                float *ws = xmalloc(N * ng * sizeof(float));
                int8_t cb[16];
                for (int i = 0; i < 16; i++) cb[i] = (int8_t)((int)(rnd() % 255) - 127);
                cb[0] = -127;
                cb[15] = 127;
                for (size_t i = 0; i < N * K / 2; i++) w[i] = (uint8_t)rnd();
                for (size_t i = 0; i < N * ng; i++)
                    ws[i] = ((float)(rnd() % 2001) - 1000.0f) * 1e-3f;
                for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++) {
                    const size_t M = Ms[mi];
                    if (K > 2048 && M > 17) continue; /* the long rows: a few M only */
                    int8_t *xq = xmalloc(M * K);
                    float *xs = xmalloc(M * ng * sizeof(float));
                    float *want = xmalloc(M * N * sizeof(float));
                    float *got = xmalloc(M * ldo * sizeof(float));
                    for (size_t i = 0; i < M * K; i++) xq[i] = (int8_t)((int)(rnd() % 255) - 127);
                    for (size_t i = 0; i < M * ng; i++) xs[i] = (float)(rnd() % 1000) * 1e-3f;
                    if_q4_gemm_1x1_scalar(want, N, xq, xs, M, w, ws, cb, 0, N, K, gs);
                    /* whole range, then split at a multiple of 16, then at an odd row */
                    const size_t splits[3] = {0, N / 2 / 16 * 16, N / 2 | 1};
                    for (int si = 0; si < 3; si++) {
                        const size_t s = splits[si] < N ? splits[si] : 0;
                        for (size_t i = 0; i < M * ldo; i++) memcpy(got + i, &SENTINEL, 4);
                        if (s) amx_q4_gemm_body(got, ldo, xq, xs, M, w, ws, cb, 0, s, K, gs);
                        amx_q4_gemm_body(got, ldo, xq, xs, M, w, ws, cb, s, N, K, gs);
                        for (size_t m = 0; m < M; m++) {
                            if (memcmp(got + m * ldo, want + m * N, N * sizeof(float)) != 0) {
                                printf("FAIL q4_gemm_amx_simde M=%zu N=%zu K=%zu gs=%zu split=%zu "
                                       "row %zu\n", M, N, K, gs, s, m);
                                return 1;
                            }
                            for (size_t i = N; i < ldo; i++)
                                if (memcmp(got + m * ldo + i, &SENTINEL, 4) != 0) {
                                    printf("FAIL q4_gemm_amx_simde M=%zu N=%zu K=%zu gs=%zu: "
                                           "wrote past n1 in row %zu\n", M, N, K, gs, m);
                                    return 1;
                                }
                        }
                        cases++;
                    }
                    free(xq), free(xs), free(want), free(got);
                }
                free(w), free(ws);
            }
        }
    }
    printf("ok %zu cases\n", cases);
    return 0;
}
