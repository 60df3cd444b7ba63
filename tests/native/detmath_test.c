/* detmath_test.c - the core's expf, sinf and cosf (csrc/detmath.c) against the C library's and
 * against values recorded from glibc (tests/test_detmath.py runs it; built by build.sh).
 *
 *   detmath_test libm [STRIDE]
 *       if_expf, if_sinf, if_cosf against this C library's expf, sinf, cosf on every STRIDE-th
 *       float bit pattern (default 97: 44.3 million inputs, every sign and exponent) and on
 *       RoPE's angles pos * (1 / powf(theta, i / hs)) (pos < 8192; theta 10000, 500000,
 *       1000000; head sizes 8 to 256); also if_powf against powf at those exponents. Prints one
 *       line `libm LIBC ARCH fma=0|1 expf D/N sinf D/N cosf D/N rope_sinf D/N rope_cosf D/N
 *       rope_powf D/N` (D inputs differ of N); fma=1 when the CPU has FMA (glibc's x86-64
 *       builds differ with and without it: see detmath.h). Exit 0.
 *   detmath_test record OUT.bin
 *       The recorded set with this C library's results: records of 4 little-endian uint32 (x,
 *       expf(x), sinf(x), cosf(x) bits) for special values, every 2^20-th bit pattern, RoPE
 *       angles, expf's range and 33 floats around each multiple of pi/2 below 120 (where the
 *       range reduction cancels). tests/data/detmath_glibc.bin was written so on glibc 2.36,
 *       x86-64 with FMA.
 *   detmath_test recorded IN.bin
 *       if_expf, if_sinf, if_cosf against a recorded set: prints `recorded N mismatches D` and
 *       the first few, exits 1 if D > 0.
 *   detmath_test lanes [STRIDE]
 *       x86-64 builds with the tiers: the AVX2 (exp8) and, where the CPU runs AVX-512F, the
 *       AVX-512 (exp16) vector copies against if_expf on every STRIDE-th bit pattern (default
 *       61). Prints `lanes exp8 D/N exp16 D/N|skipped`; exits 1 if any differ.
 *
 * Exit status: 0 ok, 1 a check failed, 2 bad usage or input. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../csrc/cpu/cpu.h"
#include "../../csrc/detmath.h"

#include "platform.h"

#if defined(IF_X86_TIERS)
uint64_t detmath_exp8_mismatches(uint64_t first, uint64_t stride, uint64_t *n);
uint64_t detmath_exp16_mismatches(uint64_t first, uint64_t stride, uint64_t *n);
#endif

static uint32_t bits_of(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    return b;
}

static float from_bits(uint32_t b) {
    float x;
    memcpy(&x, &b, 4);
    return x;
}

/* the C library's functions through volatile inputs, so the compiler cannot fold them */
static float libm_fn(int fn, float x) {
    volatile float v = x;
    return fn == 0 ? expf(v) : fn == 1 ? sinf(v) : cosf(v);
}

static float core_fn(int fn, float x) {
    return fn == 0 ? if_expf(x) : fn == 1 ? if_sinf(x) : if_cosf(x);
}

static int cpu_has(const char *feature) {
    const char *f = if_cpu_detect()->features;
    size_t n = strlen(feature);
    for (const char *p = f; (p = strstr(p, feature)) != NULL; p += n)
        if ((p == f || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
    return 0;
}

/* the RoPE angles: calls fn(angle, ctx) for pos < 8192 and every (theta, head size, i) */
static void rope_angles(void (*fn)(float angle, float theta, float e, void *ctx), void *ctx) {
    static const float thetas[] = {10000.0f, 500000.0f, 1000000.0f};
    static const int sizes[] = {8, 16, 32, 48, 64, 80, 96, 128, 256};
    for (size_t a = 0; a < sizeof thetas / sizeof *thetas; a++)
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
            for (int i = 0; i < sizes[s]; i += 2) {
                const float e = (float)i / (float)sizes[s];
                volatile float th = thetas[a];
                const float freq = 1.0f / powf(th, e);
                for (int pos = 0; pos < 8192; pos++) fn((float)pos * freq, thetas[a], e, ctx);
            }
}

typedef struct rope_count {
    uint64_t n, sin_bad, cos_bad, pow_n, pow_bad;
    float last_theta, last_e;
} rope_count;

static void rope_check(float angle, float theta, float e, void *ctx) {
    rope_count *c = ctx;
    c->n++;
    c->sin_bad += bits_of(if_sinf(angle)) != bits_of(libm_fn(1, angle));
    c->cos_bad += bits_of(if_cosf(angle)) != bits_of(libm_fn(2, angle));
    if (theta != c->last_theta || e != c->last_e) { /* once per exponent */
        volatile float th = theta;
        c->pow_n++;
        c->pow_bad += bits_of(if_powf(theta, e)) != bits_of(powf(th, e));
        c->last_theta = theta;
        c->last_e = e;
    }
}

static int cmd_libm(int argc, char **argv) {
    const uint64_t stride = argc > 0 ? strtoull(argv[0], NULL, 0) : 97;
    if (stride == 0) return 2;
    uint64_t n = 0, bad[3] = {0, 0, 0};
    for (uint64_t b = 0; b < (1ull << 32); b += stride, n++) {
        const float x = from_bits((uint32_t)b);
        for (int fn = 0; fn < 3; fn++) bad[fn] += bits_of(core_fn(fn, x)) != bits_of(libm_fn(fn, x));
    }
    rope_count rc = {0};
    rope_angles(rope_check, &rc);
    printf("libm %s %s fma=%d expf %llu/%llu sinf %llu/%llu cosf %llu/%llu rope_sinf %llu/%llu "
           "rope_cosf %llu/%llu rope_powf %llu/%llu\n",
           LIBC, ARCH, cpu_has("fma") || !strcmp(ARCH, "aarch64"), (unsigned long long)bad[0],
           (unsigned long long)n, (unsigned long long)bad[1], (unsigned long long)n,
           (unsigned long long)bad[2], (unsigned long long)n, (unsigned long long)rc.sin_bad,
           (unsigned long long)rc.n, (unsigned long long)rc.cos_bad, (unsigned long long)rc.n,
           (unsigned long long)rc.pow_bad, (unsigned long long)rc.pow_n);
    return 0;
}

/* ---- the recorded set ---- */

typedef struct inputs {
    uint32_t *x;
    size_t n, cap;
} inputs;

static void push(inputs *in, float x) {
    if (in->n == in->cap) {
        in->cap = in->cap ? 2 * in->cap : 1 << 14;
        in->x = realloc(in->x, in->cap * sizeof *in->x);
        if (!in->x) {
            fputs("out of memory\n", stderr);
            exit(2);
        }
    }
    in->x[in->n++] = bits_of(x);
}

static void rope_push(float angle, float theta, float e, void *ctx) {
    (void)theta;
    (void)e;
    static uint32_t k = 0;
    if (k++ % 2999 == 0) push(ctx, angle);
}

static inputs record_inputs(void) {
    inputs in = {0};
    static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 0x1p-149f, -0x1p-149f, 0x1p-126f,
                                    0x1p-12f, 0x1.fffffep-13f, 0.75f, 0x1.7ffffep-1f, 120.0f,
                                    0x1.dffffep6f, 88.0f, 0x1.62e42ep6f, 0x1.62e430p6f,
                                    -0x1.9fe368p6f, -0x1.9fe36ap6f, -87.33655f, -103.0f,
                                    0x1.fffffep127f, -0x1.fffffep127f};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++) push(&in, special[i]);
    push(&in, from_bits(0x7f800000u));
    push(&in, from_bits(0xff800000u));
    for (uint64_t b = 0; b < (1ull << 32); b += 1u << 20) push(&in, from_bits((uint32_t)b));
    rope_angles(rope_push, &in);
    uint64_t s = 0x9e3779b97f4a7c15ull; /* expf's finite range, uniformly */
    for (int i = 0; i < 4096; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        push(&in, -104.0f + 193.0f * (float)(s >> 40) / 16777216.0f);
    }
    for (int k = 1; (double)k * 1.5707963267948966 < 120.0; k++) { /* around k pi/2 */
        const uint32_t c = bits_of((float)(k * 1.5707963267948966));
        for (int d = -16; d <= 16; d++) {
            push(&in, from_bits(c + (uint32_t)d));
            push(&in, -from_bits(c + (uint32_t)d));
        }
    }
    return in;
}

static int cmd_record(int argc, char **argv) {
    if (argc != 1) return 2;
    FILE *f = fopen(argv[0], "wb");
    if (!f) return 2;
    inputs in = record_inputs();
    for (size_t i = 0; i < in.n; i++) {
        const float x = from_bits(in.x[i]);
        const uint32_t rec[4] = {in.x[i], bits_of(libm_fn(0, x)), bits_of(libm_fn(1, x)),
                                 bits_of(libm_fn(2, x))};
        unsigned char b[16];
        for (int k = 0; k < 16; k++) b[k] = (unsigned char)(rec[k / 4] >> (8 * (k % 4)));
        if (fwrite(b, 1, 16, f) != 16) return 2;
    }
    if (fclose(f) != 0) return 2;
    printf("recorded %zu inputs (%s %s)\n", in.n, LIBC, ARCH);
    free(in.x);
    return 0;
}

static int cmd_recorded(int argc, char **argv) {
    if (argc != 1) return 2;
    FILE *f = fopen(argv[0], "rb");
    if (!f) {
        fprintf(stderr, "recorded: cannot read %s\n", argv[0]);
        return 2;
    }
    unsigned char b[16];
    size_t n = 0, bad = 0;
    static const char *names[3] = {"expf", "sinf", "cosf"};
    while (fread(b, 1, 16, f) == 16) {
        uint32_t rec[4] = {0, 0, 0, 0};
        for (int k = 0; k < 16; k++) rec[k / 4] |= (uint32_t)b[k] << (8 * (k % 4));
        const float x = from_bits(rec[0]);
        for (int fn = 0; fn < 3; fn++) {
            const uint32_t got = bits_of(core_fn(fn, x));
            if (got != rec[1 + fn]) {
                if (bad < 5)
                    printf("%s(%a): %a, recorded %a\n", names[fn], x, from_bits(got),
                           from_bits(rec[1 + fn]));
                bad++;
            }
        }
        n++;
    }
    fclose(f);
    printf("recorded %zu mismatches %zu (%s %s)\n", n, bad, LIBC, ARCH);
    return n == 0 ? 2 : bad ? 1 : 0;
}

static int cmd_lanes(int argc, char **argv) {
#if defined(IF_X86_TIERS)
    const uint64_t stride = argc > 0 ? strtoull(argv[0], NULL, 0) : 61;
    if (stride == 0) return 2;
    uint64_t n8 = 0, n16 = 0, bad8 = 0, bad16 = 0;
    int avx2 = cpu_has("avx2") && cpu_has("fma"), avx512 = cpu_has("avx512f");
    if (avx2) bad8 = detmath_exp8_mismatches(0, stride, &n8);
    if (avx512) bad16 = detmath_exp16_mismatches(0, stride, &n16);
    printf("lanes exp8 ");
    avx2 ? printf("%llu/%llu", (unsigned long long)bad8, (unsigned long long)n8)
         : printf("skipped");
    printf(" exp16 ");
    avx512 ? printf("%llu/%llu\n", (unsigned long long)bad16, (unsigned long long)n16)
           : printf("skipped\n");
    return bad8 || bad16 ? 1 : 0;
#else
    (void)argc;
    (void)argv;
    printf("lanes exp8 skipped exp16 skipped\n");
    return 0;
#endif
}

int main(int argc, char **argv) {
    const char *usage = "usage: detmath_test libm [STRIDE] | record OUT.bin | recorded IN.bin | "
                        "lanes [STRIDE]\n";
    int rc = 2;
    if (argc >= 2 && !strcmp(argv[1], "libm")) rc = cmd_libm(argc - 2, argv + 2);
    else if (argc >= 2 && !strcmp(argv[1], "record")) rc = cmd_record(argc - 2, argv + 2);
    else if (argc >= 2 && !strcmp(argv[1], "recorded")) rc = cmd_recorded(argc - 2, argv + 2);
    else if (argc >= 2 && !strcmp(argv[1], "lanes")) rc = cmd_lanes(argc - 2, argv + 2);
    if (rc == 2) fputs(usage, stderr);
    return rc;
}
