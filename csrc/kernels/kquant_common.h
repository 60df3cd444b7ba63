/* kquant_common.h - the GGUF K-quant block fields as the K-quant kernels read them (see
 * isaforge.h, "K-quants read as stored"), in plain C for every tier: the f16 scales, Q4_K's
 * packed 6-bit scales and mins, and Q6_K's 6-bit values. */
#ifndef IF_KQUANT_COMMON_H
#define IF_KQUANT_COMMON_H

#include <stdint.h>
#include <string.h>

#include "kernels.h"

/* The SME2 bodies (kquant_sme2_body.h, legacy_sme2_body.h) call ifk_f16 in streaming mode:
 * in units built for SME it is streaming-compatible (no mode switch) and always inlined (the
 * streaming bodies make no calls); elsewhere it is plain C. */
#ifdef __ARM_FEATURE_SME
#define IFK_F16_INLINE static inline __attribute__((always_inline))
#define IFK_F16_STREAMING __arm_streaming_compatible
#else
#define IFK_F16_INLINE static inline
#define IFK_F16_STREAMING
#endif

/* IEEE binary16 bits -> float, exactly (every f16 value is a float). */
IFK_F16_INLINE float ifk_f16(const uint8_t *p) IFK_F16_STREAMING {
    const uint32_t h = (uint32_t)p[0] | (uint32_t)p[1] << 8;
    const uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 31, m = h & 0x3FFu;
    uint32_t bits;
    if (e == 31) {
        bits = sign | 0x7F800000u | m << 13;
    } else if (e) {
        bits = sign | (e + 112) << 23 | m << 13;
    } else if (m) { /* subnormal: normalise */
        uint32_t ee = 113;
        uint32_t mm = m;
        while (!(mm & 0x400u)) {
            mm <<= 1;
            ee--;
        }
        bits = sign | ee << 23 | (mm & 0x3FFu) << 13;
    } else {
        bits = sign;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Q4_K's 12 scale bytes s -> sc[8] and m[8] (6 bits each): j < 4 from the low 6 bits of
 * bytes j and j + 4; j >= 4 from byte j + 4's nibbles and the top 2 bits of bytes j - 4, j. */
static inline void ifk_q4k_scales(const uint8_t *s, uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        m[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 0x0F) | ((s[j] >> 6) << 4));
        m[j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

/* Q6_K's unsigned 6-bit value i (0..255) of a block (u = q + 32, 0..63). Half h = i / 128
 * has ql[64 h ..], qh[32 h ..]; within it quarter t = (i % 128) / 32, lane l = i % 32: the
 * low 4 bits are ql[l + 32 (t & 1)]'s low (t < 2) or high nibble, the top 2 bits are bits
 * 2t, 2t + 1 of qh[l]. */
static inline int32_t ifk_q6k_u(const uint8_t *blk, size_t i) {
    const size_t h = i / 128, t = (i % 128) / 32, l = i % 32;
    const uint8_t ql = blk[64 * h + l + 32 * (t & 1)], qh = blk[128 + 32 * h + l];
    const int32_t lo = t < 2 ? (ql & 15) : (ql >> 4);
    return lo | (((qh >> (2 * t)) & 3) << 4);
}

#endif
