/* detmath.c - deterministic expf, sinf, cosf, powf (glibc's expf/sinf/cosf results, bit for
 * bit); see detmath.h for the algorithms. */
#include "detmath.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static uint32_t f32_bits(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

static uint64_t f64_bits(double x) {
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

static double f64_from(uint64_t b) {
    double x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* bits 20..30 of a float: its biased exponent and the top 3 mantissa bits, sign dropped */
static uint32_t abs_top12(float x) { return (f32_bits(x) >> 20) & 0x7ffu; }

/* ln 2 split so that k * LN2_HI is exact for |k| < 2^20 (fdlibm's constants) */
static const double LN2_HI = 6.93147180369123816490e-01;
static const double LN2_LO = 1.90821492927058770002e-10;
static const double INV_LN2 = 1.44269504088896338700e+00;

/* 2^k as a double, for -1022 <= k <= 1023 (exact) */
static double pow2i(int k) {
    uint64_t bits = (uint64_t)(k + 1023) << 52;
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* round half away from zero, for |x| < 2^31, without libm */
static double round_int(double x) { return (double)(int64_t)(x < 0 ? x - 0.5 : x + 0.5); }

/* exp(y) in double for -745 < y < 709, relative error ~1e-16 */
static double exp_d(double y) {
    double kd = round_int(y * INV_LN2);
    int k = (int)kd;
    double r = (y - kd * LN2_HI) - kd * LN2_LO; /* |r| <= 0.35 */
    /* Taylor series of exp(r) to r^14 (next term < 5e-18 relative) */
    double p = 1.0 / 87178291200.0;
    static const double inv_fact[] = {
        1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
        1.0 / 362880.0,     1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,
        1.0 / 120.0,        1.0 / 24.0,        1.0 / 6.0,        1.0 / 2.0,
        1.0,                1.0};
    for (int i = 0; i < 14; i++) p = p * r + inv_fact[i];
    /* scale by 2^k in two steps so neither factor leaves the normal range */
    int k1 = k / 2, k2 = k - k1;
    return p * pow2i(k1) * pow2i(k2);
}

/* log(x) in double for finite x > 0, relative error ~1e-16 */
static double log_d(double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int k = (int)((bits >> 52) & 0x7ff) - 1023;
    bits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull; /* m in [1, 2) */
    double m;
    memcpy(&m, &bits, sizeof m);
    if (m > 1.4142135623730951) {
        m *= 0.5;
        k += 1;
    }
    double f = m - 1.0, s = f / (2.0 + f), s2 = s * s; /* |s| <= 0.1716 */
    /* log(m) = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), to s^25 */
    double p = 1.0 / 25.0;
    for (int d = 23; d >= 1; d -= 2) p = p * s2 + 1.0 / d;
    return (double)k * LN2_HI + ((double)k * LN2_LO + 2.0 * s * p);
}

float if_powf(float x, float y) {
    if (y == 0.0f) return 1.0f;
    if (!(x > 0.0f)) return 0.0f / 0.0f; /* not needed by the forward pass */
    return (float)exp_d((double)y * log_d((double)x));
}


/* ---- expf ---- */

const uint64_t if_exp2_tab[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};

float if_expf(float x) {
    if (x != x) return x + x;
    if (x > IF_EXPF_OFLOW) return (float)(1e300 * 1e300); /* +inf */
    if (x < IF_EXPF_UFLOW) return 0.0f;
    const double xd = (double)x;
    double kd = fma(IF_EXPF_INVLN2N, xd, IF_EXPF_SHIFT); /* round(x 32/ln2) sits in the low bits */
    const uint64_t ki = f64_bits(kd);
    kd -= IF_EXPF_SHIFT;
    const double r = fma(IF_EXPF_INVLN2N, xd, -kd);                /* |r| <= 1/2 */
    const double s = f64_from(if_exp2_tab[ki & 31] + (ki << 47)); /* 2^(k/32) */
    const double p = fma(IF_EXPF_C0, r, IF_EXPF_C1);
    double y = fma(IF_EXPF_C2, r, 1.0);
    y = fma(p, r * r, y);
    return (float)(y * s);
}

/* ---- sinf, cosf ---- */

/* cos on [-pi/4, pi/4]: 1 + C1 x^2 + ... + C4 x^8; sin: x + S1 x^3 + S2 x^5 + S3 x^7 */
static const double SC_C[5] = {1.0, -0x1.ffffffd0c621cp-2, 0x1.55553e1068f19p-5,
                               -0x1.6c087e89a359dp-10, 0x1.99343027bf8c3p-16};
static const double SC_S[3] = {-0x1.555545995a603p-3, 0x1.1107605230bc4p-7,
                               -0x1.994eb3774cf24p-13};
static const double SC_HPI_INV = 0x1.45f306dc9c883p+23; /* 2/pi * 2^24 */
static const double SC_HPI = 0x1.921fb54442d18p0;       /* pi/2 */
static const double SC_PI63 = 0x1.921fb54442d18p-62;    /* 2 pi * 2^-64 */
/* 4/pi in binary, 8 more bits per entry: entry i = floor(4/pi * 2^(8i + 7)) mod 2^32
 * (scripts/detmath_tables.py prints it) */
static const uint32_t SC_INV_PIO4[24] = {
    0xa2,       0xa2f9,     0xa2f983,   0xa2f9836e, 0xf9836e4e, 0x836e4e44,
    0x6e4e4415, 0x4e441529, 0x441529fc, 0x1529fc27, 0x29fc2757, 0xfc2757d1,
    0x2757d1f5, 0x57d1f534, 0xd1f534dd, 0xf534ddc0, 0x34ddc0db, 0xddc0db62,
    0xc0db6295, 0xdb629599, 0x6295993c, 0x95993c43, 0x993c4390, 0x3c439041,
};

/* sin(x) (cos_poly = 0) or cos(x) (1) for |x| <= pi/4, given x2 = x*x: glibc's order of
 * operations, each a + b*c one fused multiply-add as its FMA build (x86-64 with FMA, aarch64)
 * computes it. (glibc negates the cos coefficients for -cos; negating the result instead gives
 * the same bits, as rounding to nearest is symmetric.) */
static double sc_poly(double x, double x2, int cos_poly) {
    if (!cos_poly) {
        const double x3 = x * x2, s1 = fma(x2, SC_S[2], SC_S[1]);
        return fma(s1, x3 * x2, fma(x3, SC_S[0], x));
    }
    const double x4 = x2 * x2, c2 = fma(x2, SC_C[4], SC_C[3]), c1 = fma(x2, SC_C[1], SC_C[0]);
    return fma(c2, x4 * x2, fma(x4, SC_C[2], c1));
}

/* floor(v / 2^24) for any int32 v (no implementation-defined shift of a negative value) */
static int32_t floor_div24(int32_t v) {
    return v >= 0 ? v >> 24 : -(int32_t)((~(uint32_t)v) >> 24) - 1;
}

/* x - n pi/2 for the nearest n (in *np), |x| < 120: pi/2 in double is good to 55 bits */
static double reduce_small(double x, int *np) {
    const double r = x * SC_HPI_INV;
    const int32_t n = floor_div24((int32_t)r + 0x800000);
    *np = (int)n;
    return fma(-(double)n, SC_HPI, x);
}

/* x - n pi/2 for the nearest n (in *np, mod 4), for |x| >= 2, from x's bits: the 24-bit
 * mantissa (shifted by the exponent's low 3 bits) times a 96-bit window of 4/pi chosen by
 * the exponent's upper bits gives x * 4/pi mod 8 in 2.62 fixed point, exactly */
static double reduce_large(uint32_t xi, int *np) {
    const uint32_t *w = &SC_INV_PIO4[(xi >> 26) & 15];
    const uint32_t m = ((xi & 0xffffffu) | 0x800000u) << ((xi >> 23) & 7);
    const uint64_t hi = (uint64_t)(uint32_t)(m * w[0]) << 32; /* only its low 32 bits stay */
    const uint64_t mid = (uint64_t)m * w[4], lo = (uint64_t)m * w[8];
    uint64_t f = (hi | (lo >> 32)) + mid;
    const uint64_t n = (f + (1ull << 61)) >> 62;
    f -= n << 62;
    *np = (int)n;
    return (double)(int64_t)f * SC_PI63;
}

/* sinf (want_cos = 0) or cosf (1), as glibc's: see detmath.h */
static float sin_or_cos(float y, int want_cos) {
    const uint32_t top = abs_top12(y);
    const double x = (double)y;
    if (top < abs_top12(0.75f)) { /* glibc tests the top bits of (float)(pi/4), 0.75's */
        if (top < abs_top12(0x1p-12f)) return want_cos ? 1.0f : y;
        return (float)sc_poly(x, x * x, want_cos);
    }
    int n, q;
    double r;
    if (top < abs_top12(120.0f)) {
        r = reduce_small(x, &n);
        q = n & 3;
    } else if (top < abs_top12((float)(1e300 * 1e300))) {
        const uint32_t xi = f32_bits(y);
        r = reduce_large(xi, &n);
        q = (int)((unsigned)n + (xi >> 31)) & 3; /* a negative x: sin(-x) = -sin(x) */
    } else if (y != y) {
        return y + y; /* NaN: quieted, as glibc's (y - y) / (y - y) */
    } else {
        /* +-inf: glibc's (y - y) / (y - y) makes the CPU's default NaN, 0xffc00000 on x86-64
         * but 0x7fc00000 on aarch64: these bits on every CPU */
        const uint32_t nan_bits = 0xffc00000u;
        float nan;
        memcpy(&nan, &nan_bits, sizeof nan);
        return nan;
    }
    /* sin in quadrant q: sin r, cos r, -sin r, -cos r (cos: one quadrant on). The sin
     * polynomial gets r negated in quadrants 1 and 2, the cos polynomial's value is negated
     * in quadrants 2 and 3, as glibc's sign and coefficient tables do. */
    const int use_cos = (n ^ want_cos) & 1;
    const double v = sc_poly(use_cos ? r : r * ((q == 1 || q == 2) ? -1.0 : 1.0), r * r, use_cos);
    return (float)(use_cos && (q & 2) ? -v : v);
}

float if_sinf(float x) { return sin_or_cos(x, 0); }
float if_cosf(float x) { return sin_or_cos(x, 1); }
