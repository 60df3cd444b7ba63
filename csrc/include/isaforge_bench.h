/* isaforge_bench.h - the C side of `isaforge bench`: kernel timing loops, the correctness
 * gate, memory bandwidth and peak int8 throughput probes.
 *
 * Timing uses clock_gettime(CLOCK_MONOTONIC) around a whole batch of calls, so the clock's
 * cost is paid once per sample. Everything here is single-purpose measurement code: it never
 * changes dispatch and only reads the kernel tables (if_tier_table, ifb_test_table). Sizes are size_t; failures return an if_status with a one-line reason. */
#ifndef ISAFORGE_BENCH_H
#define ISAFORGE_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "isaforge.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds on the monotonic clock (arbitrary origin). */
double ifb_now(void);

/* Kernel ops that can be timed. */
typedef enum ifb_op {
    IFB_Q8_GEMV = 0,
    IFB_Q8_GEMM = 1,
    IFB_QUANTIZE = 2,
    IFB_Q4_GEMV = 3, /* 4-bit codebook GEMV (if_q4_gemv_fn's nibble layout) */
    IFB_Q4_GEMM = 4,
    IFB_Q4K_GEMV = 5, /* K-quant GEMVs on GGUF Q4_K / Q6_K / Q5_K blocks (gs must be 256) */
    IFB_Q6K_GEMV = 6,
    IFB_Q5K_GEMV = 7,
    IFB_Q4K_GEMM = 8, /* the K-quant GEMMs (M activation rows in one call) */
    IFB_Q5K_GEMM = 9,
    IFB_Q6K_GEMM = 10,
    IFB_Q40_GEMV = 11, /* legacy-block GEMVs on GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 (gs must be 32) */
    IFB_Q41_GEMV = 12,
    IFB_Q50_GEMV = 13,
    IFB_Q51_GEMV = 14,
    IFB_IQ4NL_GEMV = 15, /* IQ4 GEMVs on GGUF IQ4_NL (gs must be 32) / IQ4_XS (256) blocks */
    IFB_IQ4XS_GEMV = 16,
    IFB_Q40_GEMM = 17, /* the legacy-block GEMMs (M activation rows in one call) */
    IFB_Q41_GEMM = 18,
    IFB_Q50_GEMM = 19,
    IFB_Q51_GEMM = 20,
    IFB_Q80_GEMV = 21, /* Q8_0 on the file's blocks (gs must be 32): GEMV, and GEMM (M rows) */
    IFB_Q80_GEMM = 22
} ifb_op;

/* One timing case: an op at one shape with its inputs (deterministic pseudo-random data) and
 * `copies` copies of the weights; successive calls rotate over the copies (cold mode: copies
 * whose total exceeds the last-level cache, so weights come from memory). */
typedef struct ifb_case ifb_case;

/* Create a case for `op`: GEMV (N, K), GEMM (M, N, K), quantize (M rows of K). K must be a
 * multiple of gs; copies >= 1. The 4-bit ops need cb (their 16-entry int8 codebook, which
 * picks a kernel's product mode) and gs a multiple of 32; the other ops ignore cb. */
if_status ifb_case_create(ifb_op op, size_t M, size_t N, size_t K, size_t gs, size_t copies,
                          const int8_t *cb, ifb_case **out, char *err, size_t errlen);
/* Free a case (NULL allowed). */
void ifb_case_free(ifb_case *c);
/* Bytes of weights (int8 values or 4-bit nibbles + float scales) in one copy (0 for
 * quantize). */
size_t ifb_case_weight_bytes(const ifb_case *c);

/* The correctness gate: run table t and the scalar tier on the case's first copy and compare
 * the float bits of every output (and the int8 values for quantize). Returns IF_OK when
 * equal; IF_EINVAL with the first differing index in `err` otherwise. */
if_status ifb_check(ifb_case *c, const if_kernel_table *t, char *err, size_t errlen);

/* Time `iters` back-to-back calls of table t's op over the whole case (rotating the weight
 * copies) and write the elapsed seconds. Packing (for tables that pack GEMM weights) is done
 * before the clock starts. */
if_status ifb_time(ifb_case *c, const if_kernel_table *t, size_t iters, double *seconds,
                   char *err, size_t errlen);

/* Test-only kernel tables: "broken" (the scalar kernels, then one output perturbed by one
 * ulp / one int8 step) and "broken_pack" (a GEMM descriptor whose pack function swaps weight
 * rows), for testing that the gate refuses a disagreeing kernel, and on x86 "amx_emulated"
 * (the AMX GEMM and int8 attention with their tile ops emulated in C, csrc/testing/); NULL
 * for an unknown name. The runtime (_native, if_tier_find) never sees them. */
const if_kernel_table *ifb_test_table(const char *name);

/* Read-only memory bandwidth: `threads` threads each sum their share of a `bytes` buffer,
 * `reps` passes; writes the best GB/s (1e9 bytes/s) over the passes. */
if_status ifb_stream_read(size_t bytes, size_t threads, size_t reps, double *gbps, char *err,
                          size_t errlen);

/* Peak int8 multiply-add throughput of a tier's instruction ("scalar", "avx2" VPMADDUBSW,
 * "avx_vnni" / "avx512_vnni" VPDPBUSD, "amx" TDPBSSD) in a tight loop of independent
 * accumulators on `threads` threads for about `iters` inner iterations each; writes
 * GOP/s (1 multiply-add = 2 ops). IF_ENOTSUP when the tier has no probe or cannot run here. */
if_status ifb_peak_int8(const char *tier, size_t threads, size_t iters, double *gops,
                        char *err, size_t errlen);

/* The ceiling of a GEMM kernel's own instruction mix: its inner loop over L1-resident data
 * (no float epilogue, no cache misses), as ifb_peak_int8 measures the bare instruction.
 * Probes exist for "avx2" (q8_gemm_4x16_avx2's sign-trick loop); IF_ENOTSUP otherwise. */
if_status ifb_mix_int8(const char *tier, size_t threads, size_t iters, double *gops,
                       char *err, size_t errlen);

/* Per-ISA probe loops (csrc/bench/peak_int8_<isa>.c, each compiled with only its flags):
 * run `iters` iterations and return the number of int8 multiply-adds done; *sink receives a
 * value derived from the accumulators so the loop cannot be removed. */
uint64_t ifb_peak_loop_scalar(size_t iters, int64_t *sink);
uint64_t ifb_peak_loop_avx2(size_t iters, int64_t *sink);
uint64_t ifb_mix_loop_avx2(size_t iters, int64_t *sink); /* one iteration: 144 quads */
uint64_t ifb_peak_loop_avx_vnni(size_t iters, int64_t *sink);
uint64_t ifb_peak_loop_avx512_vnni(size_t iters, int64_t *sink);
/* AMX: loads its own tile configuration; needs the XTILEDATA permission (returns 0 without
 * doing anything when the permission cannot be obtained). */
uint64_t ifb_peak_loop_amx(size_t iters, int64_t *sink);

#ifdef __cplusplus
}
#endif
#endif /* ISAFORGE_BENCH_H */
