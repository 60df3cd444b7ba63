/* peak_dpbusd.h - the int8 rate loop of the VPDPBUSD tiers (avx_vnni on ymm, avx512_vnni on
 * zmm): 12 independent accumulators, operands in registers. IFB_PEAK_DPBUSD(NAME, V, P, INSN,
 * ZERO, BYTES, REG, SUM) defines uint64_t NAME(size_t iters, int64_t *sink) for vector type V
 * with intrinsic prefix P (_mm256 / _mm512), the dot-product instruction INSN (AT&T mnemonic:
 * "%{vex%} vpdpbusd" or "vpdpbusd"; u8 x s8 into int32), zero ZERO(), BYTES
 * multiply-adds per instruction, asm register constraint REG and SUM(s), the int32 lanes'
 * total (kept in *sink so nothing is optimized away). */
#ifndef IFB_PEAK_DPBUSD_H
#define IFB_PEAK_DPBUSD_H

#include <immintrin.h>

#include "isaforge_bench.h"

#define IFB_PEAK_DPBUSD(NAME, V, P, INSN, ZERO, BYTES, REG, SUM)                                  \
    uint64_t NAME(size_t iters, int64_t *sink) {                                               \
        V a = P##_set1_epi8(3), b = P##_set1_epi8(-2);                                          \
        /* named accumulators (not an array) so they all live in registers, each starting    \
         * from its own value: equal ones would be one computation to the compiler (CSE) */     \
        V c0 = ZERO(), c1 = P##_set1_epi32(1), c2 = P##_set1_epi32(2), c3 = P##_set1_epi32(3), \
          c4 = P##_set1_epi32(4), c5 = P##_set1_epi32(5), c6 = P##_set1_epi32(6),              \
          c7 = P##_set1_epi32(7), c8 = P##_set1_epi32(8), c9 = P##_set1_epi32(9),              \
          c10 = P##_set1_epi32(10), c11 = P##_set1_epi32(11);                                   \
        for (size_t it = 0; it < iters; it++) {                                                 \
            __asm__ volatile("" : REG(a), REG(b)); /* opaque operands: nothing is hoisted */   \
            /* the 12 instructions in asm: on ymm (16 registers) the compiler spilled the     \
             * accumulators around intrinsics, stores the probe would then be timing */        \
            __asm__(INSN " %[b], %[a], %[d0]\n\t" INSN " %[b], %[a], %[d1]\n\t"                 \
                    INSN " %[b], %[a], %[d2]\n\t" INSN " %[b], %[a], %[d3]\n\t"                 \
                    INSN " %[b], %[a], %[d4]\n\t" INSN " %[b], %[a], %[d5]\n\t"                 \
                    INSN " %[b], %[a], %[d6]\n\t" INSN " %[b], %[a], %[d7]\n\t"                 \
                    INSN " %[b], %[a], %[d8]\n\t" INSN " %[b], %[a], %[d9]\n\t"                 \
                    INSN " %[b], %[a], %[d10]\n\t" INSN " %[b], %[a], %[d11]"                   \
                    : [d0] REG(c0), [d1] REG(c1), [d2] REG(c2), [d3] REG(c3), [d4] REG(c4),     \
                      [d5] REG(c5), [d6] REG(c6), [d7] REG(c7), [d8] REG(c8), [d9] REG(c9),     \
                      [d10] REG(c10), [d11] REG(c11)                                            \
                    : [a] "x"(a), [b] "x"(b));                                                  \
        }                                                                                       \
        V s = P##_add_epi32(P##_add_epi32(P##_add_epi32(c0, c1), P##_add_epi32(c2, c3)),       \
                            P##_add_epi32(P##_add_epi32(c4, c5), P##_add_epi32(c6, c7)));      \
        s = P##_add_epi32(s, P##_add_epi32(P##_add_epi32(c8, c9), P##_add_epi32(c10, c11)));   \
        *sink = SUM(s);                                                                         \
        return (uint64_t)iters * 12 * (BYTES);                                                  \
    }

#endif
