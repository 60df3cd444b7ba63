/* simde_avx512_shim.h - test-only: force-included (-include) when tests/native/build_q4_simde.sh
 * compiles an AVX-512 kernel file WITHOUT AVX-512 flags, so its intrinsics run as SIMDe's
 * portable C (SIMDe's native aliases map _mm512_* to simde_mm512_*). <immintrin.h> comes first
 * (its own declarations, unused), then SIMDe. The few intrinsics this SIMDe release (Debian
 * bookworm's 0.7.4) lacks are defined here in plain C, element by element, from the
 * instruction descriptions: masked loads read only the selected elements (the drivers' guard
 * pages would catch any other read). */
#ifndef IF_SIMDE_AVX512_SHIM_H
#define IF_SIMDE_AVX512_SHIM_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

static inline simde__m512 ifshim_cvtepi32_ps(simde__m512i a) {
    int32_t i[16];
    float f[16];
    simde__m512 r;
    memcpy(i, &a, 64);
    for (int k = 0; k < 16; k++) f[k] = (float)i[k]; /* round to nearest, as VCVTDQ2PS */
    memcpy(&r, f, 64);
    return r;
}

static inline simde__m512i ifshim_maskz_loadu_epi8(uint64_t k, const void *p) {
    int8_t b[64];
    simde__m512i r;
    for (int i = 0; i < 64; i++) b[i] = (k >> i) & 1 ? ((const int8_t *)p)[i] : 0;
    memcpy(&r, b, 64);
    return r;
}

static inline simde__m512 ifshim_maskz_loadu_ps(uint16_t k, const void *p) {
    float f[16];
    simde__m512 r;
    for (int i = 0; i < 16; i++) {
        f[i] = 0.0f;
        if ((k >> i) & 1) memcpy(f + i, (const char *)p + 4 * i, 4);
    }
    memcpy(&r, f, 64);
    return r;
}

static inline void ifshim_mask_storeu_ps(void *p, uint16_t k, simde__m512 a) {
    float f[16];
    memcpy(f, &a, 64);
    for (int i = 0; i < 16; i++)
        if ((k >> i) & 1) memcpy((char *)p + 4 * i, f + i, 4);
}

/* 128-bit blocks: result 0, 1 from a (imm bits 1:0, 3:2), 2, 3 from b (5:4, 7:6) */
static inline simde__m512i ifshim_shuffle_i64x2(simde__m512i a, simde__m512i b, int imm) {
    unsigned char x[64], y[64], r[64];
    simde__m512i o;
    memcpy(x, &a, 64);
    memcpy(y, &b, 64);
    for (int j = 0; j < 4; j++)
        memcpy(r + 16 * j, (j < 2 ? x : y) + 16 * ((imm >> (2 * j)) & 3), 16);
    memcpy(&o, r, 64);
    return o;
}

#undef _mm512_cvtepi32_ps
#undef _mm512_maskz_loadu_epi8
#undef _mm512_maskz_loadu_ps
#undef _mm512_mask_storeu_ps
#undef _mm512_shuffle_i64x2
#define _mm512_cvtepi32_ps(a) ifshim_cvtepi32_ps(a)
#define _mm512_maskz_loadu_epi8(k, p) ifshim_maskz_loadu_epi8(k, p)
#define _mm512_maskz_loadu_ps(k, p) ifshim_maskz_loadu_ps(k, p)
#define _mm512_mask_storeu_ps(p, k, a) ifshim_mask_storeu_ps(p, k, a)
#define _mm512_shuffle_i64x2(a, b, imm) ifshim_shuffle_i64x2(a, b, imm)

#endif
