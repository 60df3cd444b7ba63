/* peak_int8_avx_vnni.c (-mavx2 -mfma -mavxvnni) - the avx_vnni tier's int8 rate: VPDPBUSD on
 * ymm (32 u8 x s8 multiply-adds into int32) with 12 independent accumulators. */
#include "peak_dpbusd.h"

#define SUM8(s) (_mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7))
IFB_PEAK_DPBUSD(ifb_peak_loop_avx_vnni, __m256i, _mm256, "%{vex%} vpdpbusd",
                _mm256_setzero_si256, 32, "+x", SUM8)
