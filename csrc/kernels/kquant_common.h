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

/* Block b (of nb) of a 16-row group (if_kq_pack_x16): the offsets of its 64-byte dword rows
 * (dword k of row r at *dw + 64 ifk_x16_row(bb, k) + 4 r) and of its bytes past them (Q6_K's
 * d, row r at *tl + 2 r). Q4_K's 2304-byte blocks follow each other, dwords in order. Q6_K's
 * (3328 + 32 bytes) go in pairs, both d's first, then each block's dwords in the order its GEMV
 * reads them (6720 bytes, every load aligned, read front to back: the hardware prefetcher
 * follows a stream that only moves forward); an odd last block alone, d after its dwords. */
static inline void ifk_x16_block(size_t b, size_t nb, size_t bb, size_t *dw, size_t *tl) {
    if (bb % 4 == 0) {
        *dw = *tl = 16 * bb * b;
        return;
    }
    const size_t pair = 32 * bb * (b / 2), e = b % 2, nd = 64 * (bb / 4);
    if (b + 1 == nb && e == 0) {
        *dw = pair;
        *tl = pair + nd;
        return;
    }
    *tl = pair + 32 * e;
    *dw = pair + 64 + nd * e;
}
/* Q6_K's dword k at this row of its block: the 4 scale dwords (48..51) first, then per half h
 * and q < 8 the ql dwords 16h + q and 16h + 8 + q and the qh dword 32 + 8h + q, as the GEMV
 * uses them; Q4_K's in order. */
static inline size_t ifk_x16_row(size_t bb, size_t k) {
    if (bb % 4 == 0) return k;
    if (k >= 48) return k - 48;
    if (k >= 32) return 4 + 24 * ((k - 32) / 8) + 3 * ((k - 32) % 8) + 2;
    return 4 + 24 * (k / 16) + 3 * (k % 8) + (k % 16) / 8;
}

#endif
