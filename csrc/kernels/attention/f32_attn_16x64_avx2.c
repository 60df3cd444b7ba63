/* f32_attn_16x64_avx2.c - fp32 attention with AVX2 (-mavx2 -mfma, -ffp-contract=off: no FMA is
 * formed): attn_f32_simd_body.h on 8-lane ymm vectors with VMASKMOVPS tails and exp8
 * (detmath_avx2.h). Equals f32_attn_16x64_scalar.c bit for bit. */
#include <immintrin.h>

#include "attn_common.h"
#include "../kernels.h"
#include "../../detmath.h"
#include "../detmath_avx2.h"
#include "attn_kt8x8_avx.h"

#define ATTN_FN if_f32_attn_16x64_avx2
#define VF __m256
#define VM __m256i
#define W 8
#define VMASK_ALL _mm256_set1_epi32(-1)
#define VMASK_TAIL(n) \
    _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define VZERO() _mm256_setzero_ps()
#define VSET1(x) _mm256_set1_ps(x)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VSUB(a, b) _mm256_sub_ps(a, b)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VDIV(a, b) _mm256_div_ps(a, b)
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#define VMLOAD(p, m) _mm256_maskload_ps(p, m)
#define VMSTORE(p, m, v) _mm256_maskstore_ps(p, m, v)
#define VEXP(v) exp8(v)
#define KT8X8(src, i, dst, ld) attn_kt8x8_avx(src, i, dst, ld)
#include "attn_f32_simd_body.h"

const if_attn_kernel if_k_f32_attn_16x64_avx2 = {.name = "f32_attn_16x64_avx2",
    .requires = IF_FEATS_AVX2, .mr = IF_ATTN_Q_TILE, .nr = IF_ATTN_KEY_BLOCK,
    .run = if_f32_attn_16x64_avx2};
