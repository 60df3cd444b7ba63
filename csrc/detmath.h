/* detmath.h - the project's own expf, sinf, cosf and powf (internal).
 *
 * The C libraries disagree in the last bit (glibc vs musl vs Apple), so a forward pass that
 * must give the same bits on x86 and Arm cannot call them. These compute in double with
 * fixed polynomials (plain IEEE double arithmetic, no FMA: -ffp-contract=off) and round once
 * to float, which makes them correctly rounded except when the exact result lies within
 * ~1e-16 (relative) of a rounding midpoint between two floats. Same bits on every platform. */
#ifndef ISAFORGE_DETMATH_H
#define ISAFORGE_DETMATH_H

float if_expf(float x);
float if_sinf(float x);
float if_cosf(float x);
/* x^y for x > 0 (all the forward pass needs: RoPE's theta^(i/head_size)). */
float if_powf(float x, float y);

#endif
