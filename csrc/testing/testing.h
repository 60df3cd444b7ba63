/* testing.h - test-only kernels (csrc/testing/, built into the _bench module and the test
 * drivers, never into the runtime): the AMX kernels with their tile operations emulated in
 * plain C (amx_emu.h), for the "amx_emulated" table (isaforge_bench.h, ifb_test_table). */
#ifndef ISAFORGE_TESTING_H
#define ISAFORGE_TESTING_H

#include "../kernels/kernels.h"

#if defined(IF_X86_TIERS)
extern const if_q8_gemm_kernel if_k_q8_gemm_16x16_amx_emulated;
extern const if_q4_gemm_kernel if_k_q4_gemm_16x16_amx_emulated;
extern const if_attn_kernel if_k_i8_attn_16x64_amx_emulated;
/* the AMX K-quant GEMMs with emulated tiles: AVX-512 expansion and readout (avx512 flags) */
extern const if_kq_gemm_kernel if_k_q4k_gemm_16x16_amx_emulated;
extern const if_kq_gemm_kernel if_k_q5k_gemm_16x16_amx_emulated;
extern const if_kq_gemm_kernel if_k_q6k_gemm_16x16_amx_emulated;
extern const if_kq_gemm_kernel if_k_q4kx16_gemm_16x16_amx_emulated; /* on 16-row groups */
extern const if_kq_gemm_kernel if_k_q6kx16_gemm_16x16_amx_emulated;
void if_i8_attn_16x64_amx_emulated(IF_ATTN_ARGS);
#endif

#endif
