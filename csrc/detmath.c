/* detmath.c - deterministic expf, sinf, cosf, powf; see detmath.h. */
#include "detmath.h"

#include <stdint.h>
#include <string.h>

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

float if_expf(float x) {
    if (x != x) return x;
    if (x > 88.8f) return (float)(1e300 * 1e300); /* +inf */
    if (x < -104.0f) return 0.0f;
    return (float)exp_d((double)x);
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

/* pi/2 split in three (fdlibm's pio2_1, pio2_2, pio2_2t): n * each part exact for n < 2^20 */
static const double PIO2_1 = 1.57079632673412561417e+00;
static const double PIO2_2 = 6.07710050630396597660e-11;
static const double PIO2_2T = 2.02226624879595063154e-21;
static const double INV_PIO2 = 6.36619772367581382433e-01;

/* sin(r), cos(r) for |r| <= pi/4 by their Taylor series to r^19 / r^18 (truncation error
 * below 1e-20), Horner in double. */
static double sin_poly(double r) {
    static const double c[] = {1.0 / 355687428096000.0,  /*  1/17! */
                               -1.0 / 1307674368000.0,   /* -1/15! */
                               1.0 / 6227020800.0,       /*  1/13! */
                               -1.0 / 39916800.0,        /* -1/11! */
                               1.0 / 362880.0,           /*  1/9!  */
                               -1.0 / 5040.0,            /* -1/7!  */
                               1.0 / 120.0,              /*  1/5!  */
                               -1.0 / 6.0};              /* -1/3!  */
    double r2 = r * r, p = -1.0 / 121645100408832000.0;  /* -1/19! */
    for (int i = 0; i < 8; i++) p = p * r2 + c[i];
    return r + r * r2 * p;
}

static double cos_poly(double r) {
    static const double c[] = {1.0 / 20922789888000.0,   /*  1/16! */
                               -1.0 / 87178291200.0,     /* -1/14! */
                               1.0 / 479001600.0,        /*  1/12! */
                               -1.0 / 3628800.0,         /* -1/10! */
                               1.0 / 40320.0,            /*  1/8!  */
                               -1.0 / 720.0,             /* -1/6!  */
                               1.0 / 24.0,               /*  1/4!  */
                               -1.0 / 2.0,               /* -1/2!  */
                               1.0};
    double r2 = r * r, p = -1.0 / 6402373705728000.0;    /* -1/18! */
    for (int i = 0; i < 9; i++) p = p * r2 + c[i];
    return p;
}

/* Reduce x to r in [-pi/4, pi/4] and quadrant n mod 4; valid for |x| < 2^20 * pi/2. */
static double reduce(float x, int *quadrant) {
    double xd = (double)x, nd = round_int(xd * INV_PIO2);
    *quadrant = (int)((int64_t)nd & 3);
    return ((xd - nd * PIO2_1) - nd * PIO2_2) - nd * PIO2_2T;
}

float if_sinf(float x) {
    int q;
    double r = reduce(x, &q);
    double v = (q & 1) ? cos_poly(r) : sin_poly(r);
    return (float)((q & 2) ? -v : v);
}

float if_cosf(float x) {
    int q;
    double r = reduce(x, &q);
    double v = (q & 1) ? sin_poly(r) : cos_poly(r);
    return (float)((q == 1 || q == 2) ? -v : v);
}
