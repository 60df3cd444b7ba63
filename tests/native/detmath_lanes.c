/* detmath_lanes.c - the vector copies of if_expf against it, for detmath_test: compiled twice
 * by build.sh, with the avx2 group's flags (LANES 8: exp8 of kernels/detmath_avx2.h) and with
 * the avx512 group's (LANES 16: exp16 of kernels/detmath_avx512.h), like the kernels that
 * include them. */
#include <stdint.h>
#include <string.h>

#if LANES == 8
#include "../../csrc/kernels/detmath_avx2.h"
#define VEC __m256
#define VEXP exp8
#define FN detmath_exp8_mismatches
#elif LANES == 16
#include "../../csrc/kernels/detmath_avx512.h"
#define VEC __m512
#define VEXP exp16
#define FN detmath_exp16_mismatches
#else
#error "build with -DLANES=8 (AVX2 flags) or -DLANES=16 (AVX-512 flags)"
#endif

uint64_t FN(uint64_t first, uint64_t stride, uint64_t *n);

/* Every stride-th float bit pattern from `first`, LANES per call; returns the number of lanes
 * whose bits differ from if_expf's and counts the inputs in *n. */
uint64_t FN(uint64_t first, uint64_t stride, uint64_t *n) {
    uint64_t bad = 0, cnt = 0;
    uint32_t in[LANES], got[LANES];
    for (uint64_t b = first; b < (1ull << 32);) {
        int k = 0;
        for (; k < LANES && b < (1ull << 32); k++, b += stride) in[k] = (uint32_t)b;
        for (int i = k; i < LANES; i++) in[i] = in[0];
        VEC x;
        memcpy(&x, in, sizeof x);
        const VEC e = VEXP(x);
        memcpy(got, &e, sizeof got);
        for (int i = 0; i < k; i++) {
            float xi, want;
            memcpy(&xi, &in[i], 4);
            want = if_expf(xi);
            bad += memcmp(&want, &got[i], 4) != 0;
        }
        cnt += (uint64_t)k;
    }
    *n = cnt;
    return bad;
}
