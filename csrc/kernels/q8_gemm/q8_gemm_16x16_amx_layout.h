/* q8_gemm_16x16_amx_layout.h - which layout the AMX GEMM's packed buffer has (shared by the
 * load-time packing, q8_gemm_16x16_amx_pack.c, and the kernel body). */
#ifndef IF_Q8_GEMM_16X16_AMX_LAYOUT_H
#define IF_Q8_GEMM_16X16_AMX_LAYOUT_H

#include <stddef.h>

/* 1 when the packed buffer has the VNNI block layout; 0 when it is a row-major copy. */
static inline int amx_layout_is_vnni(size_t K, size_t gs) {
    return gs != 0 && gs % 4 == 0 && K % gs == 0;
}

#endif
