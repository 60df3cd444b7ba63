/* if_native_test.c - a stand-alone test driver for the isaforge C core (no Python).
 *
 * Built from the same csrc/ sources as the library (tests/native/build.sh), natively or
 * cross-compiled for aarch64 and run under qemu-aarch64 (tests/test_arm_emulated.py).
 *
 *   if_native_test info
 *       CPU features found, compiled tiers and whether this CPU runs them, and the tiers that
 *       dispatch picks for decode (GEMV) and prefill (GEMM). One `key=value` per line.
 *   if_native_test conformance [--quick]
 *       Every compiled tier this CPU supports (and the test-only tables) against the scalar
 *       kernels, float bits compared with memcmp: Q8 GEMV, Q8 GEMM (row and column splits,
 *       writes outside the asked range detected), activation quantization. The scalar kernels
 *       are also checked against a reference written here whose roundings cannot be contracted
 *       into FMAs. Prints "conformance ok N cases digest HEX" (the digest covers the scalar
 *       results only, so it is equal on every tier set and architecture) or the first mismatch
 *       and exits 1. --quick caps the work per shape (for slow emulated CPUs).
 *   if_native_test forward MODEL.bin OUT.f32 [n_tokens]
 *       Reads a llama2.c v0 (fp32) or v2 (Q8) file, runs BOS=1, 403, 407, 261, 378, then
 *       (i * 37) % vocab through if_model_forward one position at a time, and writes all logits
 *       (n_tokens x vocab float32, little-endian) to OUT.f32. Also checks that a prefill over
 *       the same tokens gives the same logits bit for bit.
 *   if_native_test libm OUT.bin
 *       expf, sinf, cosf, powf, sqrtf, roundf on fixed input sets (those the forward pass and
 *       sampler use), written as float32 so two builds' math libraries can be compared.
 *
 * Exit status: 0 ok, 1 a check failed, 2 bad usage or input. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "isaforge.h"
#if defined(IF_X86_TIERS)
#include "isaforge_bench.h" /* ifb_test_table: the test-only amx_emulated table */
#endif

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef AT_HWCAP2
#define AT_HWCAP2 26
#endif
#endif

#include "platform.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

/* ---------------------------------------------------------------------------------------------
 * Deterministic data: xorshift64* and FNV-1a.
 * ------------------------------------------------------------------------------------------- */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void) {
    uint64_t x = g_rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    g_rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static uint32_t rnd_below(uint32_t n) { return (uint32_t)((rnd() >> 32) % n); }

/* uniform in [0, 1), 24 bits */
static float rnd_unit(void) { return (float)(rnd() >> 40) * (1.0f / 16777216.0f); }

static int8_t rnd_i8(void) { return (int8_t)((int)rnd_below(255) - 127); }

static uint64_t g_digest = 0xcbf29ce484222325ull;

static void digest(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        g_digest ^= b[i];
        g_digest *= 0x100000001b3ull;
    }
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---------------------------------------------------------------------------------------------
 * info
 * ------------------------------------------------------------------------------------------- */

static int cmd_info(void) {
    char err[256] = "", names[256];
    if_kernel_set ks;
    uint32_t disabled = 0;
    const if_status chosen = if_kernels_from_env(&ks, &disabled, err, sizeof err);
    printf("arch=%s\nlibc=%s\n", ARCH, LIBC);
    printf("cpu=%s\n", if_cpu_name());
    printf("features=%s\n", if_cpu_features());
    printf("disabled=%s\n", if_features_string(disabled, names, sizeof names));
    printf("notes=%s\n", if_cpu_notes());
#if defined(__aarch64__) && defined(__linux__)
    unsigned long hw1 = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    printf("hwcap=0x%lx\nhwcap2=0x%lx\n", hw1, hw2);
    /* vector lengths, read only where the HWCAP says the instruction exists; encoded with
     * .inst so no assembler SVE/SME support is needed */
    if (hw1 & (1ul << 22)) { /* HWCAP_SVE: rdvl x0, #1 */
        unsigned long vl;
        __asm__ volatile(".inst 0x04bf5020\n\tmov %0, x0" : "=r"(vl) : : "x0");
        printf("sve_vl_bytes=%lu\n", vl);
    }
    if (hw2 & (1ul << 23)) { /* HWCAP2_SME: rdsvl x0, #1 */
        unsigned long svl;
        __asm__ volatile(".inst 0x04bf5820\n\tmov %0, x0" : "=r"(svl) : : "x0");
        printf("sme_svl_bytes=%lu\n", svl);
    }
#endif
    for (size_t i = 0; i < if_tier_count(); i++) {
        char why[256] = "";
        int ok = if_tier_supported(i, disabled, why, sizeof why);
        printf("tier.%s=%s%s%s\n", if_tier_name(i), ok ? "supported" : "unsupported",
               why[0] ? ": " : "", why);
    }
    if (chosen != IF_OK) {
        printf("error=%s\n", err);
        return 2;
    }
    const if_kernel_table *d = ks.gemv, *p = ks.gemm;
    printf("decode=%s\ndecode.q8_gemv=%s\ndecode.quantize=%s\n", d->tier, d->q8_gemv->name,
           d->quantize->name);
    printf("prefill=%s\nprefill.q8_gemm=%s\nprefill.quantize=%s\n", p->tier, p->q8_gemm->name,
           p->quantize->name);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * conformance
 * ------------------------------------------------------------------------------------------- */

/* Reference Q8 GEMV with every product and sum rounded to float through volatile stores, so
 * no compiler setting can fuse them: acc += ((float)isum * ws) * xs, groups in order. */
static void ref_gemv(float *out, const int8_t *xq, const float *xs, const int8_t *w,
                     const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    const size_t ng = K / gs;
    for (size_t n = n0; n < n1; n++) {
        volatile float acc = 0.0f;
        for (size_t g = 0; g < ng; g++) {
            int32_t isum = 0;
            for (size_t k = 0; k < gs; k++)
                isum += (int32_t)xq[g * gs + k] * (int32_t)w[n * K + g * gs + k];
            volatile float p = (float)isum * ws[n * ng + g];
            volatile float t = p * xs[g];
            acc = acc + t;
        }
        out[n] = acc;
    }
}

static void ref_quantize(int8_t *q, float *s, const float *x, size_t K, size_t gs) {
    for (size_t g = 0; g < K / gs; g++) {
        float wmax = 0.0f;
        for (size_t i = 0; i < gs; i++) {
            float a = fabsf(x[g * gs + i]);
            if (a > wmax) wmax = a;
        }
        volatile float scale = wmax / 127.0f;
        s[g] = scale;
        for (size_t i = 0; i < gs; i++) {
            if (scale == 0.0f) {
                q[g * gs + i] = 0;
            } else {
                volatile float r = x[g * gs + i] / scale;
                q[g * gs + i] = (int8_t)roundf(r);
            }
        }
    }
}

/* int8 data in [-127, 127] with whole groups set to +127, -127 or 0 now and then, and in
 * fixed places: group 0 of row 0 all +127, the last group of row 1 all -127, group 1 of row 2
 * all 0 (when those rows and groups exist). */
static void fill_q8(int8_t *q, size_t rows, size_t K, size_t gs) {
    const size_t ng = K / gs;
    for (size_t r = 0; r < rows; r++) {
        for (size_t g = 0; g < ng; g++) {
            int8_t *p = q + r * K + g * gs;
            int kind = (int)rnd_below(16);
            if (r == 0 && g == 0) kind = 0;
            if (r == 1 && g == ng - 1) kind = 1;
            if (r == 2 && g == 1 % ng) kind = 2;
            for (size_t i = 0; i < gs; i++)
                p[i] = kind == 0 ? 127 : kind == 1 ? -127 : kind == 2 ? 0 : rnd_i8();
        }
    }
}

/* positive scales spread over several binades, like real per-group scales */
static void fill_scales(float *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float e = (float)(1u << rnd_below(12)); /* 1 .. 2048 */
        s[i] = (rnd_unit() + 0.5f) / (e * 64.0f);
    }
}

typedef struct tier_ref {
    const char *name;
    const if_kernel_table *t;
} tier_ref;

static size_t g_cases;
static int g_quick;

#define FAIL(...)                                 \
    do {                                          \
        fprintf(stderr, "conformance FAILED: ");  \
        fprintf(stderr, __VA_ARGS__);             \
        fprintf(stderr, "\n");                    \
        printf("conformance FAILED\n");           \
        exit(1);                                  \
    } while (0)

static const uint32_t SENTINEL = 0x7fc0beefu; /* a NaN no kernel produces */

static void fill_sentinel(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) memcpy(&p[i], &SENTINEL, 4);
}

/* Compare got[] and want[] over n floats by bits; report the first difference. */
static void expect_bits(const float *got, const float *want, size_t n, const char *what,
                        const char *tier, size_t M, size_t N, size_t K, size_t gs) {
    if (memcmp(got, want, n * sizeof(float)) == 0) return;
    int vs_ref = strstr(what, "reference") != NULL;
    for (size_t i = 0; i < n; i++) {
        if (fbits(got[i]) != fbits(want[i]))
            FAIL("%s tier=%s %s=%zu N=%zu K=%zu gs=%zu: element %zu is %.9g (0x%08x), %s "
                 "gives %.9g (0x%08x)",
                 what, tier, vs_ref ? "row" : "M", M, N, K, gs, i, (double)got[i],
                 (unsigned)fbits(got[i]), vs_ref ? "the reference" : "scalar", (double)want[i],
                 (unsigned)fbits(want[i]));
    }
}

/* One tier's GEMM over M rows of xq against all of w, in two column ranges split on the
 * tier's tile, with ldo > N; checks the gaps between rows were not written. */
static void run_gemm(const tier_ref *tr, float *out, size_t ldo, const int8_t *xq,
                     const float *xs, size_t M, const int8_t *w, const int8_t *wpacked,
                     const float *ws, size_t N, size_t K, size_t gs) {
    const if_kernel_table *t = tr->t;
    size_t tile = t->q8_gemm->nr;
    size_t split = (N / 2) / tile * tile;
    const int8_t *wk = t->q8_gemm->pack ? wpacked : w;
    fill_sentinel(out, M * ldo);
    if (split > 0) t->q8_gemm->run(out, ldo, xq, xs, M, wk, ws, 0, split, K, gs);
    t->q8_gemm->run(out, ldo, xq, xs, M, wk, ws, split, N, K, gs);
    for (size_t m = 0; m < M; m++)
        for (size_t n = N; n < ldo; n++)
            if (fbits(out[m * ldo + n]) != SENTINEL)
                FAIL("q8_gemm tier=%s M=%zu N=%zu K=%zu gs=%zu: wrote out[%zu][%zu] beyond N",
                     tr->name, M, N, K, gs, m, n);
}

static void conformance_shape(const tier_ref *tiers, size_t n_tiers, size_t N, size_t K,
                              size_t gs) {
    static const size_t Ms[] = {1, 2, 3, 15, 16, 17, 64, 129};
    const size_t n_ms = sizeof Ms / sizeof Ms[0], ng = K / gs;
    /* --quick: GEMM only at M = 1 and 17 (an M tile edge for 4- and 16-row tiles) where the
     * work is large */
    int use_m[sizeof Ms / sizeof Ms[0]];
    size_t Mmax = 1;
    for (size_t mi = 0; mi < n_ms; mi++) {
        use_m[mi] = !g_quick || Ms[mi] * N * K <= (1u << 21) || Ms[mi] == 1 || Ms[mi] == 17;
        if (use_m[mi] && Ms[mi] > Mmax) Mmax = Ms[mi];
    }
    /* always 129 activation rows, so the data does not depend on --quick */
    int8_t *w = xmalloc(N * K), *xq = xmalloc(129 * K);
    float *ws = xmalloc(N * ng * sizeof(float)), *xs = xmalloc(129 * ng * sizeof(float));
    fill_q8(w, N, K, gs);
    fill_scales(ws, N * ng);
    fill_q8(xq, 129, K, gs);
    fill_scales(xs, 129 * ng);

    /* the scalar tier's results for all Mmax rows, checked against ref_gemv row by row */
    const if_kernel_table *sc = tiers[0].t;
    float *want = xmalloc(Mmax * N * sizeof(float)), *row = xmalloc(N * sizeof(float));
    for (size_t m = 0; m < Mmax; m++) {
        sc->q8_gemv->run(want + m * N, xq + m * K, xs + m * ng, w, ws, 0, N, K, gs);
        ref_gemv(row, xq + m * K, xs + m * ng, w, ws, 0, N, K, gs);
        expect_bits(want + m * N, row, N, "scalar q8_gemv vs reference", "scalar", m, N, K, gs);
        g_cases++;
    }
    /* the same rows whatever Mmax is, so --quick and full runs give the same digest */
    digest(want, N * sizeof(float));
    digest(want + 16 * N, N * sizeof(float));

    const size_t ldo = N + 3;
    float *out = xmalloc(Mmax * ldo * sizeof(float));
    float *got = xmalloc(Mmax * N * sizeof(float));
    for (size_t ti = 0; ti < n_tiers; ti++) {
        const tier_ref *tr = &tiers[ti];
        const if_kernel_table *t = tr->t;
        int8_t *packed = NULL;
        if (t->q8_gemm->pack) {
            size_t bytes = (t->q8_gemm->pack_size(N, K, gs) + 63) / 64 * 64;
            packed = aligned_alloc(64, bytes ? bytes : 64);
            if (!packed) FAIL("out of memory packing for %s", tr->name);
            t->q8_gemm->pack(packed, w, N, K, gs);
        }
        /* GEMV: first, second and last activation rows; two ranges split on a multiple of 4 */
        const size_t gemv_rows[] = {0, 1, Mmax - 1};
        for (size_t r = 0; r < 3; r++) {
            size_t m = gemv_rows[r], split = (N / 2) / 4 * 4;
            fill_sentinel(out, N + 3);
            if (split > 0) t->q8_gemv->run(out, xq + m * K, xs + m * ng, w, ws, 0, split, K, gs);
            t->q8_gemv->run(out, xq + m * K, xs + m * ng, w, ws, split, N, K, gs);
            expect_bits(out, want + m * N, N, "q8_gemv", tr->name, 1, N, K, gs);
            for (size_t n = N; n < N + 3; n++)
                if (fbits(out[n]) != SENTINEL)
                    FAIL("q8_gemv tier=%s N=%zu K=%zu gs=%zu: wrote out[%zu] beyond N",
                         tr->name, N, K, gs, n);
            g_cases++;
        }
        for (size_t mi = 0; mi < n_ms; mi++) {
            size_t M = Ms[mi];
            if (!use_m[mi]) continue;
            run_gemm(tr, out, ldo, xq, xs, M, w, packed, ws, N, K, gs);
            for (size_t m = 0; m < M; m++) memcpy(got + m * N, out + m * ldo, N * sizeof(float));
            expect_bits(got, want, M * N, "q8_gemm", tr->name, M, N, K, gs);
            g_cases++;
        }
        free(packed);
    }
    free(w);
    free(xq);
    free(ws);
    free(xs);
    free(want);
    free(row);
    free(out);
    free(got);
}

/* A Q8 GEMM with an unpack declares its packed layout tile-major: unpack gives w back, and
 * each tile of nr rows at t * pack_size(nr, K, gs) unpacks to its rows alone. Checked for
 * every tier's packing GEMM, including group sizes that are not a multiple of 4 and rows
 * whose tiles are not a multiple of 64 bytes. */
static void check_q8_unpack(const tier_ref *tiers, size_t n_tiers) {
    static const size_t cases[][3] = {{17, 576, 32}, {40, 30, 3}, {33, 18, 6}, {5, 64, 4},
                                      {49, 1536, 256}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const size_t N = cases[c][0], K = cases[c][1], gs = cases[c][2];
        int8_t *w = xmalloc(N * K), *back = xmalloc(N * K);
        fill_q8(w, N, K, gs);
        for (size_t ti = 0; ti < n_tiers; ti++) {
            const if_q8_gemm_kernel *k = tiers[ti].t->q8_gemm;
            if (!k->pack || !k->unpack) continue;
            const size_t bytes = (k->pack_size(N, K, gs) + 63) / 64 * 64, nr = k->nr;
            int8_t *p = aligned_alloc(64, bytes);
            if (!p) FAIL("out of memory packing for %s", tiers[ti].name);
            k->pack(p, w, N, K, gs);
            memset(back, 0xA5, N * K);
            k->unpack(back, p, N, K, gs);
            if (memcmp(back, w, N * K) != 0)
                FAIL("q8_unpack %s N=%zu K=%zu gs=%zu: unpack(pack(w)) != w", k->name, N, K, gs);
            for (size_t t = 0; t * nr < N; t++) {
                const size_t n = N - t * nr < nr ? N - t * nr : nr;
                memset(back, 0xA5, n * K);
                k->unpack(back, p + t * k->pack_size(nr, K, gs), n, K, gs);
                if (memcmp(back, w + t * nr * K, n * K) != 0)
                    FAIL("q8_unpack %s N=%zu K=%zu gs=%zu: tile %zu does not unpack to its rows",
                         k->name, N, K, gs, t);
            }
            g_cases++;
            free(p);
        }
        free(w);
        free(back);
    }
}

/* Activation rows meant to hit every branch of the quantizer: zero groups (scale 0), -0.0,
 * exact halves (rounding away from zero), subnormals, huge values, one outlier per group. */
static void fill_activations(float *x, size_t K, size_t gs) {
    for (size_t g = 0; g < K / gs; g++) {
        float *p = x + g * gs;
        int kind = (int)rnd_below(8);
        if (g == 0) kind = 0;
        if (g == 1) kind = 1;
        for (size_t i = 0; i < gs; i++) {
            float u = rnd_unit() * 2.0f - 1.0f;
            switch (kind) {
            case 0: p[i] = (i & 1) ? -0.0f : 0.0f; break;              /* zero group */
            case 1: {                                                 /* exact ties */
                float c = (float)(1u << rnd_below(8)) / 256.0f;
                p[i] = i == 0 ? 127.0f * c : ((float)rnd_below(126) + 0.5f) * c;
                if (rnd() & 1) p[i] = -p[i];
                break;
            }
            case 2: p[i] = u * 1e-39f; break;                          /* subnormal */
            case 3: p[i] = u * 3e37f; break;                           /* huge */
            case 4: p[i] = i == gs / 2 ? 1000.0f * u : u * 0.01f; break; /* outlier */
            default: p[i] = u * (float)(1u << rnd_below(10)); break;
            }
        }
    }
}

static void conformance_quantize(const tier_ref *tiers, size_t n_tiers, size_t K, size_t gs) {
    const size_t rows = 4, ng = K / gs;
    float *x = xmalloc(rows * K * sizeof(float));
    int8_t *q0 = xmalloc(K), *q1 = xmalloc(K + 8);
    float *s0 = xmalloc(ng * sizeof(float)), *s1 = xmalloc((ng + 2) * sizeof(float));
    for (size_t r = 0; r < rows; r++) fill_activations(x + r * K, K, gs);
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * K;
        tiers[0].t->quantize->run(q0, s0, xr, K, gs);
        ref_quantize(q1, s1, xr, K, gs);
        if (memcmp(q0, q1, K) || memcmp(s0, s1, ng * sizeof(float)))
            FAIL("scalar quantize vs reference K=%zu gs=%zu row %zu differ", K, gs, r);
        digest(q0, K);
        digest(s0, ng * sizeof(float));
        g_cases++;
        for (size_t ti = 0; ti < n_tiers; ti++) {
            memset(q1, 0x5a, K + 8);
            fill_sentinel(s1, ng + 2);
            tiers[ti].t->quantize->run(q1, s1, xr, K, gs);
            for (size_t i = 0; i < K; i++)
                if (q1[i] != q0[i])
                    FAIL("quantize tier=%s K=%zu gs=%zu row %zu: q[%zu]=%d, scalar gives %d",
                         tiers[ti].name, K, gs, r, i, q1[i], q0[i]);
            expect_bits(s1, s0, ng, "quantize scales", tiers[ti].name, 1, 0, K, gs);
            for (size_t i = K; i < K + 8; i++)
                if ((unsigned char)q1[i] != 0x5a)
                    FAIL("quantize tier=%s K=%zu gs=%zu wrote q[%zu] beyond K", tiers[ti].name,
                         K, gs, i);
            for (size_t i = ng; i < ng + 2; i++)
                if (fbits(s1[i]) != SENTINEL)
                    FAIL("quantize tier=%s K=%zu gs=%zu wrote s[%zu] beyond K/gs",
                         tiers[ti].name, K, gs, i);
            g_cases++;
        }
    }
    free(x);
    free(q0);
    free(q1);
    free(s0);
    free(s1);
}

static int cmd_conformance(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            g_quick = 1;
        } else {
            fprintf(stderr, "conformance: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    tier_ref tiers[32];
    size_t n_tiers = 0;
    if_kernel_set ks;
    uint32_t disabled = 0;
    char err[256] = "";
    if (if_kernels_from_env(&ks, &disabled, err, sizeof err) != IF_OK) {
        fprintf(stderr, "conformance: %s\n", err);
        return 2;
    }
    for (size_t i = 0; i < if_tier_count() && n_tiers < 30; i++) {
        char why[256];
        if (!if_tier_supported(i, disabled, why, sizeof why)) {
            printf("skip tier %s: %s\n", if_tier_name(i), why);
            continue;
        }
        tiers[n_tiers].name = if_tier_name(i);
        tiers[n_tiers++].t = if_tier_table(i);
    }
    if (n_tiers == 0 || strcmp(tiers[0].name, "scalar") != 0) {
        printf("conformance FAILED: the scalar tier is not first or not supported\n");
        return 1;
    }
#if defined(IF_X86_TIERS)
    const if_kernel_table *emu = ifb_test_table("amx_emulated");
    tiers[n_tiers].name = emu->tier;
    tiers[n_tiers++].t = emu;
#endif
    printf("tiers:");
    for (size_t i = 0; i < n_tiers; i++) printf(" %s", tiers[i].name);
    printf("\n");
    fflush(stdout);

    static const size_t gss[] = {4, 8, 16, 32, 64, 128, 256};
    static const size_t Ns[] = {1, 3, 16, 17, 63, 64, 576, 1536};
    double t0 = now_s();
    for (size_t gi = 0; gi < sizeof gss / sizeof gss[0]; gi++) {
        size_t gs = gss[gi];
        size_t Ks[] = {gs, 3 * gs, 576, 1536};
        for (size_t ki = 0; ki < 4; ki++) {
            size_t K = Ks[ki];
            if (K % gs) continue;
            int dup = 0;
            for (size_t j = 0; j < ki; j++) dup |= Ks[j] == K;
            if (dup) continue;
            conformance_quantize(tiers, n_tiers, K, gs);
            for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
                conformance_shape(tiers, n_tiers, Ns[ni], K, gs);
        }
    }
    check_q8_unpack(tiers, n_tiers); /* after the digested cases: it draws from the same rng */
    printf("conformance ok %zu cases digest %016llx (%.1f s)\n", g_cases,
           (unsigned long long)g_digest, now_s() - t0);
    return 0;
}

#include "if_native_model.h" /* load_model, model_file_free: the llama2.c reader */

static int cmd_forward(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: if_native_test forward MODEL.bin OUT.f32 [n_tokens]\n");
        return 2;
    }
    model_file mf;
    if (!load_model(argv[0], &mf)) return 2;
    const size_t vocab = mf.cfg.vocab_size;
    size_t n = 64;
    if (argc == 3) {
        char *end;
        long v = strtol(argv[2], &end, 10);
        if (*end || v <= 0) {
            fprintf(stderr, "forward: n_tokens must be a positive integer\n");
            model_file_free(&mf);
            return 2;
        }
        n = (size_t)v;
    }
    if (n > mf.cfg.seq_len) n = mf.cfg.seq_len;
    int32_t *tokens = xmalloc(n * sizeof(int32_t));
    static const int32_t fixed[] = {1, 403, 407, 261, 378};
    for (size_t i = 0; i < n; i++)
        tokens[i] = (int32_t)((i < 5 ? (size_t)fixed[i] : i * 37) % vocab);

    char err[256] = "";
    if_model_opts opts = {1, 0, IF_KV_F32, {NULL, NULL}};
    if (if_kernels_from_env(&opts.kernels, NULL, err, sizeof err) != IF_OK) {
        fprintf(stderr, "forward: %s\n", err);
        return 2;
    }
    /* test-only settings (the Python package passes them in): threads, the SME2 hybrid split's
     * streaming workers, and par_min_work (1: split even stories260K's tiny matmuls) */
    static const char *const knobs[] = {"IF_TEST_THREADS", "IF_TEST_SME2_WORKERS",
                                        "IF_TEST_PAR_MIN_WORK"};
    size_t *dsts[] = {&opts.n_threads, &opts.sme2_workers, &opts.par_min_work};
    for (size_t i = 0; i < 3; i++) {
        const char *v = getenv(knobs[i]);
        if (!v || !*v) continue;
        char *end;
        long x = strtol(v, &end, 10);
        if (*end || x < 0 || (i == 0 && x == 0)) {
            fprintf(stderr, "forward: %s=%s is not a valid count\n", knobs[i], v);
            model_file_free(&mf);
            return 2;
        }
        *dsts[i] = (size_t)x;
    }
    if_model *m = NULL;
    if (if_model_create_opts(&mf.cfg, &mf.w, &opts, &m, err, sizeof err) != IF_OK) {
        fprintf(stderr, "forward: if_model_create: %s\n", err);
        model_file_free(&mf);
        return 2;
    }
    float *logits = xmalloc(n * vocab * sizeof(float));
    double t0 = now_s();
    for (size_t i = 0; i < n; i++) {
        if (if_model_forward(m, tokens[i], i, logits + i * vocab, err, sizeof err) != IF_OK) {
            fprintf(stderr, "forward: position %zu: %s\n", i, err);
            return 1;
        }
    }
    double t1 = now_s();
    FILE *f = fopen(argv[1], "wb");
    if (!f || fwrite(logits, sizeof(float), n * vocab, f) != n * vocab || fclose(f) != 0) {
        fprintf(stderr, "forward: cannot write %s\n", argv[1]);
        return 2;
    }
    /* prefill over the same tokens must give the decode logits bit for bit */
    if_model *m2 = NULL;
    float *all = xmalloc(n * vocab * sizeof(float));
    if (if_model_create_opts(&mf.cfg, &mf.w, &opts, &m2, err, sizeof err) != IF_OK ||
        if_model_prefill(m2, tokens, n, 0, NULL, all, err, sizeof err) != IF_OK) {
        fprintf(stderr, "forward: prefill: %s\n", err);
        return 1;
    }
    int prefill_same = memcmp(all, logits, n * vocab * sizeof(float)) == 0;
    uint64_t dg = g_digest;
    g_digest = 0xcbf29ce484222325ull;
    digest(logits, n * vocab * sizeof(float));
    printf("forward ok v%d n_tokens=%zu vocab=%zu decode=%s prefill=%s prefill_equal=%s "
           "digest=%016llx (%.2f s)\n",
           mf.version, n, vocab, if_model_gemv(m)->tier, if_model_gemm(m)->tier,
           prefill_same ? "yes" : "NO", (unsigned long long)g_digest, t1 - t0);
    g_digest = dg;
    if_model_free(m);
    if_model_free(m2);
    free(all);
    free(logits);
    free(tokens);
    model_file_free(&mf);
    return prefill_same ? 0 : 1;
}

/* ---------------------------------------------------------------------------------------------
 * libm: the math functions the forward pass uses, on fixed inputs
 * ------------------------------------------------------------------------------------------- */

/* Layout of the output: for each function a uint32 count n, then n input floats, then n
 * output floats (pairs for powf inputs). Functions in order: expf, sinf, cosf, powf, sqrtf,
 * roundf. The inputs are generated from bit patterns, so they are equal on every platform. */
static int cmd_libm(int argc, char **argv) {
    if (argc != 1) {
        fprintf(stderr, "usage: if_native_test libm OUT.bin\n");
        return 2;
    }
    FILE *f = fopen(argv[0], "wb");
    if (!f) {
        fprintf(stderr, "libm: cannot write %s\n", argv[0]);
        return 2;
    }
    const size_t n = 1u << 18;
    float *in = xmalloc(2 * n * sizeof(float)), *out = xmalloc(n * sizeof(float));
    for (int fn = 0; fn < 6; fn++) {
        g_rng = 0x1234567ull + (uint64_t)fn;
        for (size_t i = 0; i < n; i++) {
            float u = rnd_unit();
            switch (fn) {
            case 0: in[i] = -104.0f * u * u + (i % 7 == 0 ? 2.0f * u : 0.0f); break; /* softmax, silu */
            case 1:
            case 2: { /* RoPE angles pos * freq: pos < 8192, freq in (0, 1] */
                float freq = 1.0f / (float)(1u << rnd_below(14)) * (0.5f + 0.5f * u);
                in[i] = (float)rnd_below(8192) * freq;
                break;
            }
            case 3: /* powf(theta, head_dim / head_size) */
                in[2 * i] = i & 1 ? 10000.0f : (float)(1000u * (1u + rnd_below(1000)));
                in[2 * i + 1] = (float)(2 * rnd_below(64)) / (float)(2 * (1u + rnd_below(128)));
                if (in[2 * i + 1] >= 1.0f) in[2 * i + 1] = u;
                break;
            case 4: in[i] = u * 1000.0f + 1e-5f; break;
            default: in[i] = (u - 0.5f) * 300.0f; break;
            }
        }
        for (size_t i = 0; i < n; i++) {
            switch (fn) {
            case 0: out[i] = expf(in[i]); break;
            case 1: out[i] = sinf(in[i]); break;
            case 2: out[i] = cosf(in[i]); break;
            case 3: out[i] = powf(in[2 * i], in[2 * i + 1]); break;
            case 4: out[i] = sqrtf(in[i]); break;
            default: out[i] = roundf(in[i]); break;
            }
        }
        uint32_t cnt = (uint32_t)n;
        size_t nin = fn == 3 ? 2 * n : n;
        fwrite(&cnt, 4, 1, f);
        fwrite(in, sizeof(float), nin, f);
        fwrite(out, sizeof(float), n, f);
    }
    free(in);
    free(out);
    if (fclose(f) != 0) return 2;
    printf("libm ok %s %s\n", ARCH, LIBC);
    return 0;
}

int main(int argc, char **argv) {
    const char *usage =
        "usage: if_native_test info | conformance [--quick] | forward MODEL.bin OUT.f32 "
        "[n_tokens] | libm OUT.bin\n";
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    if (strcmp(argv[1], "info") == 0) return cmd_info();
    if (strcmp(argv[1], "conformance") == 0) return cmd_conformance(argc - 2, argv + 2);
    if (strcmp(argv[1], "forward") == 0) return cmd_forward(argc - 2, argv + 2);
    if (strcmp(argv[1], "libm") == 0) return cmd_libm(argc - 2, argv + 2);
    fputs(usage, stderr);
    return 2;
}
