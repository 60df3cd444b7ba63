/* dispatch.c - ISA tiers, their priority, and the kernels chosen for each op.
 *
 * Tiers are listed once, lowest priority first, with the CPU features each one needs. The
 * best supported tier is chosen separately for decode (GEMV, M = 1) and prefill (GEMM,
 * M > 1): matrix engines win at M > 1, dot products at M = 1. ISAFORGE_KERNEL=<tier> (or a
 * `tier` argument) forces one tier for every op; a tier this CPU cannot run is an error,
 * never a silent fallback. ISAFORGE_DISABLE_FEATURES=a,b hides features (names as in
 * if_cpu_features()) from dispatch, like NPY_DISABLE_CPU_FEATURES; unknown names are errors. */
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

static const if_kernel_table *g_gemv = &g_tiers[0].table;
static const if_kernel_table *g_gemm = &g_tiers[0].table;
static int g_selected;
static char g_disabled[256];

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

/* Feature bits named in ISAFORGE_DISABLE_FEATURES; -1 (with err) for an unknown name. */
static int64_t disabled_mask(char *err, size_t errlen) {
    const char *env = getenv("ISAFORGE_DISABLE_FEATURES");
    if (!env || !env[0]) return 0;
    int64_t mask = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", env);
    for (char *tok = strtok(buf, ", "); tok; tok = strtok(NULL, ", ")) {
        uint32_t bit = if_feature_bit(tok);
        if (!bit) {
            if (err && errlen)
                snprintf(err, errlen,
                         "ISAFORGE_DISABLE_FEATURES: unknown feature '%s' (known: %s)", tok,
                         if_feature_names());
            return -1;
        }
        mask |= bit;
    }
    return mask;
}

static uint32_t usable_flags(void) {
    int64_t off = disabled_mask(NULL, 0);
    return if_cpu_detect()->flags & ~(uint32_t)(off < 0 ? 0 : off);
}

int if_tier_supported(size_t i, char *why, size_t whylen) {
    if (i >= N_TIERS) {
        if (why && whylen) snprintf(why, whylen, "no such tier");
        return 0;
    }
    uint32_t missing = g_tiers[i].requires & ~usable_flags();
    if (missing) {
        if (why && whylen) {
            int off = snprintf(why, whylen, "missing");
            uint32_t hw_missing = g_tiers[i].requires & ~if_cpu_detect()->flags;
            for (uint32_t b = 1; b && off > 0 && (size_t)off < whylen; b <<= 1) {
                if (!(missing & b)) continue;
                off += snprintf(why + off, whylen - (size_t)off, " %s%s", if_feature_name(b),
                                (hw_missing & b) ? "" : " (disabled)");
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

if_status if_dispatch_select(const char *tier, char *err, size_t errlen) {
    if (disabled_mask(err, errlen) < 0) return IF_EINVAL;
    if (tier == NULL) tier = getenv("ISAFORGE_KERNEL");
    if (tier == NULL || tier[0] == '\0' || strcmp(tier, "auto") == 0) {
        size_t best = 0, best_decode = 0;
        for (size_t i = 0; i < N_TIERS; i++) {
            if (!if_tier_supported(i, NULL, 0)) continue;
            best = i;
            if (g_tiers[i].decode) best_decode = i;
        }
        g_gemv = &g_tiers[best_decode].table;
        g_gemm = &g_tiers[best].table;
        g_selected = 1;
        return IF_OK;
    }
    for (size_t i = 0; i < N_TIERS; i++) {
        if (strcmp(tier, g_tiers[i].table.tier) != 0) continue;
        char why[200];
        if (!if_tier_supported(i, why, sizeof why)) {
            if (err && errlen)
                snprintf(err, errlen, "kernel tier '%s' is not supported on this CPU: %s", tier,
                         why);
            return IF_ENOTSUP;
        }
        g_gemv = g_gemm = &g_tiers[i].table;
        g_selected = 1;
        return IF_OK;
    }
    if (err && errlen) {
        int off = snprintf(err, errlen, "unknown kernel tier '%s'; compiled tiers:", tier);
        for (size_t i = 0; i < N_TIERS && off > 0 && (size_t)off < errlen; i++)
            off += snprintf(err + off, errlen - (size_t)off, " %s", g_tiers[i].table.tier);
    }
    return IF_EINVAL;
}

if_status if_dispatch_ready(char *err, size_t errlen) {
    return g_selected ? IF_OK : if_dispatch_select(NULL, err, errlen);
}

const if_kernel_table *if_dispatch_gemv(void) {
    if (!g_selected) if_dispatch_select(NULL, NULL, 0);
    return g_gemv;
}

const if_kernel_table *if_dispatch_gemm(void) {
    if (!g_selected) if_dispatch_select(NULL, NULL, 0);
    return g_gemm;
}

const char *if_disabled_features(void) {
    g_disabled[0] = '\0';
    int64_t off = disabled_mask(NULL, 0);
    if (off <= 0) return g_disabled;
    size_t len = 0;
    for (uint32_t b = 1; b; b <<= 1) {
        if (!(off & b) || len >= sizeof g_disabled) continue;
        len += (size_t)snprintf(g_disabled + len, sizeof g_disabled - len, "%s%s",
                                len ? "," : "", if_feature_name(b));
    }
    return g_disabled;
}
