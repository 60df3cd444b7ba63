/* detmath.h - the project's own expf, sinf, cosf and powf (internal).
 *
 * llama2.c's run.c and runq.c call glibc's expf, sinf and cosf; for their logits to be
 * reproducible bit for bit, these give glibc's results bit for bit (glibc >= 2.28 on x86-64:
 * the table-driven algorithms of Arm's optimized-routines, which glibc adopted). They are
 * written here as plain IEEE double arithmetic (no FMA: -ffp-contract=off; integer bit
 * manipulation for the table lookups and the large-argument range reduction), so they also
 * give the same bits on every other C library and CPU (musl on aarch64 included).
 *
 * expf(x): x/ln2 = k/32 + r/32, k integer (rounded to nearest even by adding 1.5 * 2^52),
 *   |r| <= 1/2; exp(x) = 2^(k/32) * 2^(r/32) with 2^(k/32) from a table of 2^(i/32) (the
 *   exponent added as integer bits) and 2^(r/32) ~ 1 + C2 r + C1 r^2 + C0 r^3 in double,
 *   rounded once to float. Results for x > 0x1.62e42ep6 are +inf, for x < -0x1.9fe368p6 0.
 * sinf/cosf(x): |x| < 0.75 directly; |x| < 120 reduced by the nearest multiple of pi/2 in
 *   double (one multiply-subtract); larger x by a 32 x 96-bit fixed-point product with 4/pi
 *   (exact to 62 fraction bits); then an odd (sin) or even (cos) polynomial in double chosen
 *   by the quadrant, rounded once to float.
 * powf(x, y) for x > 0 (RoPE's theta^(i/head_size)): exp(y log x) in double, nearly
 *   correctly rounded; equals glibc's powf at every exponent i/head_size for theta = 10000
 *   and the head sizes llama2.c models use (tests/native/detmath_test.c). */
#ifndef ISAFORGE_DETMATH_H
#define ISAFORGE_DETMATH_H

#include <stdint.h>

float if_expf(float x);
float if_sinf(float x);
float if_cosf(float x);
/* x^y for x > 0 (all the forward pass needs: RoPE's theta^(i/head_size)). */
float if_powf(float x, float y);

/* if_expf's constants and table, shared with its vector copies (kernels/detmath_avx2.h,
 * kernels/detmath_avx512.h), which do the same double operations lane by lane. */
#define IF_EXPF_INVLN2N (0x1.71547652b82fep+0 * 32) /* 32 / ln 2 */
#define IF_EXPF_SHIFT 0x1.8p52                      /* z + SHIFT rounds z to an integer */
#define IF_EXPF_C0 (0x1.c6af84b912394p-5 / 32768)   /* 2^(r/32) - 1 ~ C2 r + C1 r^2 + C0 r^3 */
#define IF_EXPF_C1 (0x1.ebfce50fac4f3p-3 / 1024)
#define IF_EXPF_C2 (0x1.62e42ff0c52d6p-1 / 32)
#define IF_EXPF_OFLOW 0x1.62e42ep6f  /* above: +inf */
#define IF_EXPF_UFLOW -0x1.9fe368p6f /* below: 0 */
/* bits of 2^(i/32) rounded to nearest double, minus i << 47, so that adding k << 47 for
 * k = 32 e + i gives the bits of 2^(k/32) (scripts/detmath_tables.py prints it) */
extern const uint64_t if_exp2_tab[32];

#endif
