/* peak_int8_avx512_vnni.c (-mavx512f -mavx512bw -mavx512vl -mavx512vnni) - the avx512_vnni
 * tier's int8 rate: VPDPBUSD on zmm (64 u8 x s8 multiply-adds into int32) with 12 independent
 * accumulators. */
#include "peak_dpbusd.h"

IFB_PEAK_DPBUSD(ifb_peak_loop_avx512_vnni, __m512i, _mm512, "vpdpbusd",
                _mm512_setzero_si512, 64, "+v", _mm512_reduce_add_epi32)
