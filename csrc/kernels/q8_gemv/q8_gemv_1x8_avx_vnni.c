/* Q8 GEMV, AVX-VNNI (-mavx2 -mfma -mavxvnni): q8_gemv_1x8_avx2.c compiled with AVX-VNNI, so
 * its dot product (q8c_dot) is one VPDPBUSD (ymm) instead of VPMADDUBSW + VPMADDWD; the loop,
 * tile (1 activation row x 8 weight rows), sign trick and float order are that file's. The
 * two kernels share one source rather than two copies of the loop; this translation unit
 * exists so the VNNI instructions live only in an object built with -mavxvnni (entered only
 * after the run-time check). */
#include "q8_gemv_1x8_avx2.c"
