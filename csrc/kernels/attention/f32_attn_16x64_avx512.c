/* f32_attn_16x64_avx512.c - fp32 attention with AVX-512F (-mavx512f ..., no FMA: -ffp-contract=off):
 * attn_f32_simd_body.h on 16-lane zmm vectors with __mmask16 tails and exp16
 * (detmath_avx512.h). Equals f32_attn_16x64_scalar.c bit for bit. */
#include <immintrin.h>

#include "attn_common.h"
#include "../kernels.h"
#include "../../detmath.h"
#include "../detmath_avx512.h"
#include "attn_kt8x8_avx.h"

#define ATTN_FN if_f32_attn_16x64_avx512
#define VF __m512
#define VM __mmask16
#define W 16
#define VMASK_ALL ((__mmask16)0xffffu)
#define VMASK_TAIL(n) ((__mmask16)((1u << (n)) - 1))
#define VZERO() _mm512_setzero_ps()
#define VSET1(x) _mm512_set1_ps(x)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VSUB(a, b) _mm512_sub_ps(a, b)
#define VMUL(a, b) _mm512_mul_ps(a, b)
#define VDIV(a, b) _mm512_div_ps(a, b)
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, v) _mm512_storeu_ps(p, v)
#define VMLOAD(p, m) _mm512_maskz_loadu_ps(m, p)
#define VMSTORE(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#define VEXP(v) exp16(v)
#define KT8X8(src, i, dst, ld) attn_kt8x8_avx(src, i, dst, ld)
#include "attn_f32_simd_body.h"

const if_attn_kernel if_k_f32_attn_16x64_avx512 = {.name = "f32_attn_16x64_avx512",
    .requires = IF_FEATS_AVX512, .mr = IF_ATTN_Q_TILE, .nr = IF_ATTN_KEY_BLOCK,
    .run = if_f32_attn_16x64_avx512};
