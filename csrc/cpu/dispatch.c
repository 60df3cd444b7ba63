/* dispatch.c - ISA tiers, their priority, and the kernels chosen for each op.
 *
 * Tiers are listed once, lowest priority first, with the CPU features each one needs. The
 * choice is a value, not process state: if_kernels_choose is a pure function of the CPU's
 * features (detected once), the features the caller hides and the tier it asks for, and each
 * model keeps the kernel set it was created with. The best supported tier is chosen
 * separately for decode (GEMV, M = 1) and prefill (GEMM, M > 1): matrix engines win at M > 1,
 * dot products at M = 1. A forced tier this CPU cannot run is an error, never a silent
 * fallback. Hidden features (names as in if_cpu_features(), like NPY_DISABLE_CPU_FEATURES)
 * count as missing; unknown names are errors. The environment (ISAFORGE_KERNEL,
 * ISAFORGE_DISABLE_FEATURES) is read in one place, if_kernels_from_env, for programs without a
 * settings layer of their own; the Python package passes its settings in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/kernels.h"
#include "cpu.h"

typedef struct tier_desc {
    if_kernel_table table;
    uint32_t requires; /* IF_FEAT_* bits */
    int decode;        /* 1 if this tier's GEMV is a candidate for automatic decode choice */
} tier_desc;

#define SCALAR_OPS                                                                     \
    "q8_gemv_1x1_scalar", "q8_gemm_1x1_scalar", "quantize_q8_scalar",                  \
        "f32_gemv_1x1_scalar", if_q8_gemv_1x1_scalar, if_q8_gemm_1x1_scalar,           \
        if_quantize_q8_scalar, if_f32_gemv_1x1_scalar

/* attention kernels: the fp32 reference, and AVX2 / AVX-512 (bit-identical) where available */
/* ... each followed by the SwiGLU kernel (the same bits everywhere) */
#define SWIGLU_SCALAR "swiglu_scalar", if_swiglu_scalar
#define SWIGLU_AVX2 "swiglu_avx2", if_swiglu_avx2
#define SWIGLU_AVX512 "swiglu_avx512", if_swiglu_avx512
#define ATTN_SCALAR "attn_f32_scalar", if_attn_f32_scalar, NULL, NULL, SWIGLU_SCALAR
#define ATTN_AVX2 "attn_f32_avx2", if_attn_f32_avx2, NULL, NULL, SWIGLU_AVX2
#define ATTN_AVX512 "attn_f32_avx512", if_attn_f32_avx512, NULL, NULL, SWIGLU_AVX512
/* AMX: fp32 AVX-512 attention (exact, as every tier) unless the KV cache is int8 */
#define ATTN_AMX \
    "attn_f32_avx512", if_attn_f32_avx512, "attn_i8_amx", if_attn_i8_amx, SWIGLU_AVX512
/* SME2: fp32 attention (exact) unless the KV cache is int8 */
#define ATTN_SME2 \
    "attn_f32_scalar", if_attn_f32_scalar, "attn_i8_sme2", if_attn_i8_sme2, SWIGLU_SCALAR
#define ATTN_AMX_EMULATED                                                                \
    "attn_f32_scalar", if_attn_f32_scalar, "attn_i8_amx_emulated", if_attn_i8_amx_emulated, \
        SWIGLU_SCALAR

static const tier_desc g_tiers[] = {
    {{"scalar", SCALAR_OPS, NULL, NULL, 4, 64, ATTN_SCALAR}, 0, 1},
#if defined(IF_X86_TIERS)
    {{"avx2", "q8_gemv_1x8_avx2", "q8_gemm_4x16_avx2", "quantize_q8_avx2", "f32_gemv_1x1_scalar",
      if_q8_gemv_1x8_avx2, if_q8_gemm_4x16_avx2, if_quantize_q8_avx2, if_f32_gemv_1x1_scalar,
      NULL, NULL, 16, 64, ATTN_AVX2},
     IF_FEAT_AVX2 | IF_FEAT_FMA, 1},
    {{"avx_vnni", "q8_gemv_1x8_avx_vnni", "q8_gemm_4x16_avx_vnni", "quantize_q8_avx2",
      "f32_gemv_1x1_scalar", if_q8_gemv_1x8_avx_vnni, if_q8_gemm_4x16_avx_vnni,
      if_quantize_q8_avx2, if_f32_gemv_1x1_scalar, NULL, NULL, 16, 64, ATTN_AVX2},
     IF_FEAT_AVX2 | IF_FEAT_FMA | IF_FEAT_AVX_VNNI, 1},
    {{"avx512_vnni", "q8_gemv_1x16_avx512_vnni", "q8_gemm_4x32_avx512_vnni", "quantize_q8_avx512",
      "f32_gemv_1x1_scalar", if_q8_gemv_1x16_avx512_vnni, if_q8_gemm_4x32_avx512_vnni,
      if_quantize_q8_avx512, if_f32_gemv_1x1_scalar, NULL, NULL, 32, 64, ATTN_AVX512},
     IF_FEAT_AVX512F | IF_FEAT_AVX512BW | IF_FEAT_AVX512VL | IF_FEAT_AVX512_VNNI | IF_FEAT_FMA,
     1},
    /* AMX is a GEMM engine; its tier decodes (M = 1) with the AVX-512 VNNI GEMV. */
    {{"amx", "q8_gemv_1x16_avx512_vnni", "q8_gemm_16x16_amx", "quantize_q8_avx512",
      "f32_gemv_1x1_scalar", if_q8_gemv_1x16_avx512_vnni, if_q8_gemm_16x16_amx,
      if_quantize_q8_avx512, if_f32_gemv_1x1_scalar, if_q8_gemm_pack_size_amx,
      if_q8_gemm_pack_amx, 16, 64, ATTN_AMX},
     IF_FEAT_AMX_TILE | IF_FEAT_AMX_INT8 | IF_FEAT_AVX512F | IF_FEAT_AVX512BW |
         IF_FEAT_AVX512VL | IF_FEAT_AVX512_VNNI | IF_FEAT_FMA,
     0},
#endif
#if defined(IF_ARM_TIERS)
    {{"neon", "q8_gemv_1x4_neon", "q8_gemm_4x4_neon", "quantize_q8_neon", "f32_gemv_1x1_scalar",
      if_q8_gemv_1x4_neon, if_q8_gemm_4x4_neon, if_quantize_q8_neon, if_f32_gemv_1x1_scalar,
      NULL, NULL, 4, 64, ATTN_SCALAR},
     IF_FEAT_ASIMD, 1},
    {{"dotprod", "q8_gemv_1x4_dotprod", "q8_gemm_4x4_dotprod", "quantize_q8_neon",
      "f32_gemv_1x1_scalar", if_q8_gemv_1x4_dotprod, if_q8_gemm_4x4_dotprod, if_quantize_q8_neon,
      if_f32_gemv_1x1_scalar, NULL, NULL, 4, 64, ATTN_SCALAR},
     IF_FEAT_ASIMD | IF_FEAT_ASIMDDP, 1},
    /* i8mm is the prefill tier; it decodes with the dotprod GEMV (SMMLA wastes half its work
     * at M = 1) */
    {{"i8mm", "q8_gemv_1x4_dotprod", "q8_gemm_2x4_i8mm", "quantize_q8_neon",
      "f32_gemv_1x1_scalar", if_q8_gemv_1x4_dotprod, if_q8_gemm_2x4_i8mm, if_quantize_q8_neon,
      if_f32_gemv_1x1_scalar, NULL, NULL, 4, 64, ATTN_SCALAR},
     IF_FEAT_ASIMD | IF_FEAT_ASIMDDP | IF_FEAT_I8MM, 1},
    {{"sme2", "q8_gemv_1xvl_sme2", "q8_gemm_vlxvl_sme2", "quantize_q8_neon",
      "f32_gemv_1x1_scalar", if_q8_gemv_1xvl_sme2, if_q8_gemm_vlxvl_sme2, if_quantize_q8_neon,
      if_f32_gemv_1x1_scalar, NULL, NULL, 4, 64, ATTN_SME2},
     IF_FEAT_ASIMD | IF_FEAT_SME | IF_FEAT_SME2, 1},
#endif
};
#define N_TIERS (sizeof g_tiers / sizeof g_tiers[0])

#if defined(IF_X86_TIERS)
/* Test-only: the AMX packed layout with tile ops emulated in C (runs anywhere). */
static const if_kernel_table g_amx_emulated = {
    "amx_emulated", "q8_gemv_1x1_scalar", "q8_gemm_16x16_amx_emulated", "quantize_q8_scalar",
    "f32_gemv_1x1_scalar", if_q8_gemv_1x1_scalar, if_q8_gemm_16x16_amx_emulated,
    if_quantize_q8_scalar, if_f32_gemv_1x1_scalar, if_q8_gemm_pack_size_amx,
    if_q8_gemm_pack_amx, 16, 16, ATTN_AMX_EMULATED};
#endif

size_t if_tier_count(void) { return N_TIERS; }

const char *if_tier_name(size_t i) { return i < N_TIERS ? g_tiers[i].table.tier : NULL; }

const if_kernel_table *if_tier_table(size_t i) { return i < N_TIERS ? &g_tiers[i].table : NULL; }

const if_kernel_table *if_test_table(const char *name) {
#if defined(IF_X86_TIERS)
    if (strcmp(name, "amx_emulated") == 0) return &g_amx_emulated;
#endif
    (void)name;
    return NULL;
}

if_status if_features_mask(const char *names, uint32_t *mask, char *err, size_t errlen) {
    *mask = 0;
    for (const char *p = names; p && *p;) {
        while (*p == ',' || *p == ' ') p++;
        size_t n = strcspn(p, ", ");
        if (n == 0) break;
        char tok[32];
        uint32_t bit = 0;
        if (n < sizeof tok) {
            memcpy(tok, p, n);
            tok[n] = '\0';
            bit = if_feature_bit(tok);
        }
        if (!bit) {
            if (err && errlen)
                snprintf(err, errlen,
                         "ISAFORGE_DISABLE_FEATURES: unknown feature '%.*s' (known: %s)",
                         (int)(n < 64 ? n : 64), p, if_feature_names());
            return IF_EINVAL;
        }
        *mask |= bit;
        p += n;
    }
    return IF_OK;
}

const char *if_features_string(uint32_t mask, char *buf, size_t n) {
    size_t len = 0;
    if (n) buf[0] = '\0';
    for (uint32_t b = 1; b && len < n; b <<= 1)
        if (mask & b)
            len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? "," : "", if_feature_name(b));
    return buf;
}

int if_tier_supported(size_t i, uint32_t disabled, char *why, size_t whylen) {
    if (i >= N_TIERS) {
        if (why && whylen) snprintf(why, whylen, "no such tier");
        return 0;
    }
    const uint32_t have = if_cpu_detect()->flags;
    const uint32_t missing = g_tiers[i].requires & ~(have & ~disabled);
    if (missing) {
        if (why && whylen) {
            int off = snprintf(why, whylen, "missing");
            for (uint32_t b = 1; b && off > 0 && (size_t)off < whylen; b <<= 1) {
                if (!(missing & b)) continue;
                off += snprintf(why + off, whylen - (size_t)off, " %s%s", if_feature_name(b),
                                (have & b) ? " (disabled)" : "");
            }
            const char *notes = if_cpu_detect()->notes;
            if (notes[0] && (size_t)off < whylen)
                snprintf(why + off, whylen - (size_t)off, "; %s", notes);
        }
        return 0;
    }
    if (why && whylen) why[0] = '\0';
    return 1;
}

if_status if_tier_find(const char *name, uint32_t disabled, const if_kernel_table **out,
                       char *err, size_t errlen) {
    *out = if_test_table(name);
    if (*out) return IF_OK;
    for (size_t i = 0; i < N_TIERS; i++) {
        if (strcmp(name, g_tiers[i].table.tier) != 0) continue;
        char why[200];
        if (!if_tier_supported(i, disabled, why, sizeof why)) {
            if (err && errlen)
                snprintf(err, errlen, "kernel tier '%s' is not supported on this CPU: %s", name,
                         why);
            return IF_ENOTSUP;
        }
        *out = &g_tiers[i].table;
        return IF_OK;
    }
    if (err && errlen) {
        int off = snprintf(err, errlen, "unknown kernel tier '%s'; compiled tiers:", name);
        for (size_t i = 0; i < N_TIERS && off > 0 && (size_t)off < errlen; i++)
            off += snprintf(err + off, errlen - (size_t)off, " %s", g_tiers[i].table.tier);
    }
    return IF_EINVAL;
}

if_status if_kernels_choose(const char *tier, uint32_t disabled, if_kernel_set *out, char *err,
                            size_t errlen) {
    if (tier == NULL || tier[0] == '\0' || strcmp(tier, "auto") == 0) {
        size_t best = 0, best_decode = 0;
        for (size_t i = 0; i < N_TIERS; i++) {
            if (!if_tier_supported(i, disabled, NULL, 0)) continue;
            best = i;
            if (g_tiers[i].decode) best_decode = i;
        }
        out->gemv = &g_tiers[best_decode].table;
        out->gemm = &g_tiers[best].table;
        return IF_OK;
    }
    const if_kernel_table *t;
    if_status st = if_tier_find(tier, disabled, &t, err, errlen);
    if (st != IF_OK) return st;
    out->gemv = out->gemm = t;
    return IF_OK;
}

if_status if_kernels_from_env(if_kernel_set *out, uint32_t *disabled, char *err,
                              size_t errlen) {
    uint32_t mask;
    if_status st = if_features_mask(getenv("ISAFORGE_DISABLE_FEATURES"), &mask, err, errlen);
    if (st != IF_OK) return st;
    if (disabled) *disabled = mask;
    return if_kernels_choose(getenv("ISAFORGE_KERNEL"), mask, out, err, errlen);
}
