/* AMX Q8 GEMM (-mamx-tile -mamx-int8 -mavx512f -mavx512bw -mavx512vl -mfma): the kernel body
 * of q8_gemm_16x16_amx_body.h with real tile intrinsics (TDPBSSD: signed int8 x signed int8,
 * so no sign trick is needed) and an AVX-512 readout of the 16x16 int32 C tile after each
 * group. Packed layout, group-scale scheme and tile registers: see the body header (its
 * emulated twin, test-only, is csrc/testing/q8_gemm_16x16_amx_emulated.c). */
#define _DEFAULT_SOURCE 1 /* syscall() under -std=c11 */
#include <immintrin.h>
#include <stdint.h>

#include "../kernels.h"

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "../amx_tiles.h" /* the tile ops with the compiler barriers GCC's lack */

#include "amx_readout_avx512.h"

#include "q8_gemm_16x16_amx_body.h"

/* Q8 GEMM on AMX: 16 activation rows x 16 output rows per C tile; per group one TDPBSSD
 * (gs <= 64) or gs/64 (+ a tail window) into a zeroed C tile, then a TILESTORED and an
 * AVX-512 readout that applies ws and xs per group in order. w is the buffer written by
 * if_q8_gemm_pack_amx for the whole matrix (64-byte alignment recommended, not required);
 * n0 is a multiple of 16 (the tier's gemm_n_tile), n1 anything. Loads its tile
 * configuration on entry and releases the tiles on return, so it needs no per-thread state
 * beyond the process's AMX permission (if_amx_thread_init). */
void if_q8_gemm_16x16_amx(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                          const int8_t *w, const float *ws, size_t n0, size_t n1, size_t K,
                          size_t gs) {
    amx_q8_gemm_body(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs);
}

/* AMX tile data needs the process's XTILEDATA permission (Linux, arch_prctl
 * ARCH_REQ_XCOMP_PERM; without it any tile instruction raises SIGILL). Requests it (it is
 * process-wide and idempotent; features.c asks for it too) and checks it with
 * ARCH_GET_XCOMP_PERM. The tile configuration itself is loaded by every kernel call, so
 * nothing else is needed per thread. Returns 0 when tiles are usable, -1 otherwise. */
int if_amx_thread_init(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    unsigned long long perm = 0;
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0)
        return -1;
    if (syscall(SYS_arch_prctl, 0x1022 /* ARCH_GET_XCOMP_PERM */, &perm) != 0) return -1;
    return (perm >> 18) & 1u ? 0 : -1;
#else
    return 0;
#endif
}

const if_q8_gemm_kernel if_k_q8_gemm_16x16_amx = {.name = "q8_gemm_16x16_amx",
    .requires = IF_FEAT_AMX_TILE | IF_FEAT_AMX_INT8 | IF_FEATS_AVX512, .mr = 16, .nr = 16,
    .pack_size = if_q8_gemm_pack_size_amx, .pack = if_q8_gemm_pack_amx,
    .run = if_q8_gemm_16x16_amx};
