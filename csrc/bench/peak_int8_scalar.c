/* peak_int8_scalar.c - the scalar tier's int8 dot-product rate, compiled like the scalar
 * kernels (-O3, no -march): an int8 x int8 -> int32 dot product over L1-resident rows, as the
 * scalar GEMV's inner loop does it (the compiler may use the baseline SIMD it is allowed). */
#include "isaforge_bench.h"

#define ROW 256

static int8_t g_a[ROW], g_b[ROW];

uint64_t ifb_peak_loop_scalar(size_t iters, int64_t *sink) {
    for (int i = 0; i < ROW; i++) g_a[i] = (int8_t)(i * 7 - 100), g_b[i] = (int8_t)(50 - i * 3);
    int64_t total = 0;
    for (size_t it = 0; it < iters; it++) {
        __asm__ volatile("" ::: "memory"); /* the rows may have changed: no hoisting */
        int32_t acc = 0;
        for (int i = 0; i < ROW; i++) acc += (int32_t)g_a[i] * (int32_t)g_b[i];
        total += acc;
    }
    *sink = total;
    return (uint64_t)iters * ROW;
}
