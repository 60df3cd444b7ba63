/* q4_native_test.c - the 4-bit codebook kernels (q4_gemv, q4_gemm) and the activation rotation
 * (hadamard) of every compiled tier this CPU runs, against the scalar kernels bit for bit, on
 * the M x N x K x GS grid with tails, in C, so it runs under qemu-aarch64 as well as natively
 * (tests/test_q4_arm.py). Prints one line per tier run ("tier NAME: q4_gemv ... cases") and
 * "ok", or "FAIL ..." and exits 1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isaforge.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
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

static int g_fail;

static void check(const float *got, const float *want, size_t n, const char *what,
                  const char *tier, size_t M, size_t N, size_t K, size_t gs) {
    if (memcmp(got, want, n * sizeof(float)) != 0 && !g_fail) {
        printf("FAIL %s tier=%s M=%zu N=%zu K=%zu gs=%zu\n", what, tier, M, N, K, gs);
        g_fail = 1;
    }
}

int main(void) {
    static const size_t Ms[] = {1, 2, 3, 5, 17}, Ns[] = {1, 3, 4, 5, 8, 17, 64};
    static const size_t GSs[] = {32, 64, 128, 256};
    const if_kernel_table *sc = if_tier_table(0);
    for (size_t t = 1; t < if_tier_count(); t++) {
        if (!if_tier_supported(t, 0, NULL, 0)) continue;
        const if_kernel_table *tt = if_tier_table(t);
        size_t cases = 0;
        for (size_t gi = 0; gi < sizeof GSs / sizeof *GSs; gi++) {
            const size_t gs = GSs[gi];
            const size_t Ks[] = {gs, 3 * gs, 576 / gs * gs};
            for (size_t ki = 0; ki < 3; ki++) {
                const size_t K = Ks[ki], ng = K / gs;
                if (!K) continue;
                for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++) {
                    const size_t N = Ns[ni];
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
                        int8_t *xq = xmalloc(M * K);
                        float *xs = xmalloc(M * ng * sizeof(float));
                        float *want = xmalloc(M * N * sizeof(float));
                        float *got = xmalloc(M * N * sizeof(float));
                        for (size_t i = 0; i < M * K; i++) xq[i] = (int8_t)((int)(rnd() % 255) - 127);
                        for (size_t i = 0; i < M * ng; i++) xs[i] = (float)(rnd() % 1000) * 1e-3f;
                        sc->q4_gemm->run(want, N, xq, xs, M, w, ws, cb, 0, N, K, gs);
                        tt->q4_gemm->run(got, N, xq, xs, M, w, ws, cb, 0, N, K, gs);
                        check(got, want, M * N, "q4_gemm", tt->tier, M, N, K, gs);
                        /* the GEMV on row 0, split at an odd row to test the n0 offset */
                        const size_t split = N / 2 | 1;
                        if (split < N) tt->q4_gemv->run(got, xq, xs, w, ws, cb, 0, split, K, gs);
                        tt->q4_gemv->run(got, xq, xs, w, ws, cb,
                                         split < N ? split : 0, N, K, gs);
                        check(got, want, N, "q4_gemv", tt->tier, 1, N, K, gs);
                        cases++;
                        free(xq), free(xs), free(want), free(got);
                    }
                    free(w), free(ws);
                }
                /* the rotation of a row of K - 3 values padded to K */
                float *x = xmalloc(K * sizeof(float)), *sg = xmalloc(K * sizeof(float));
                float *a = xmalloc(K * sizeof(float)), *b = xmalloc(K * sizeof(float));
                for (size_t i = 0; i < K; i++) {
                    x[i] = ((float)(rnd() % 20001) - 10000.0f) * 1e-4f;
                    sg[i] = (rnd() & 1) ? 1.0f : -1.0f;
                }
                sc->hadamard->run(a, x, sg, K - 3, K, gs);
                tt->hadamard->run(b, x, sg, K - 3, K, gs);
                check(b, a, K, "hadamard", tt->tier, 1, 1, K, gs);
                free(x), free(sg), free(a), free(b);
            }
        }
        printf("tier %s: %s %s %s: %zu cases\n", tt->tier, tt->q4_gemv->name, tt->q4_gemm->name,
               tt->hadamard->name, cases);
        if (g_fail) return 1;
    }
    printf("ok\n");
    return 0;
}
