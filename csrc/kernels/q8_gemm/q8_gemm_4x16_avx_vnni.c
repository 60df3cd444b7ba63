/* Q8 GEMM, AVX-VNNI (-mavx2 -mfma -mavxvnni): q8_gemm_4x16_avx2.c compiled with AVX-VNNI, so
 * its dot product is one VPDPBUSD (ymm) with the offset trick and its packed layout carries
 * the -128 * sum(w) corrections (see that file); tile, loop, packing and float order are
 * that file's. The two kernels share one source rather than two copies of the loop; this
 * translation unit exists so the VNNI instructions live only in an object built with
 * -mavxvnni (entered only after the run-time check). */
#include "q8_gemm_4x16_avx2.c"
