/* dispatch.c - ISA tiers, their priority, and the kernels chosen for each op.
 *
 * Tiers are listed once, lowest priority first, with the CPU features each one needs. The
 * best supported tier is chosen separately for decode (GEMV, M = 1) and prefill (GEMM,
 * M > 1). ISAFORGE_KERNEL=<tier> (or a `tier` argument) forces one tier for every op; a
 * tier this CPU cannot run is an error, never a silent fallback. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/kernels.h"
#include "cpu.h"

typedef struct tier_desc {
    if_kernel_table table;
    uint32_t requires; /* IF_FEAT_* bits */
} tier_desc;

static const tier_desc g_tiers[] = {
    {{"scalar", "q8_gemv_1x1_scalar", "q8_gemm_1x1_scalar", "quantize_q8_scalar",
      "f32_gemv_1x1_scalar", if_q8_gemv_1x1_scalar, if_q8_gemm_1x1_scalar,
      if_quantize_q8_scalar, if_f32_gemv_1x1_scalar},
     0},
};
#define N_TIERS (sizeof g_tiers / sizeof g_tiers[0])

static const if_kernel_table *g_gemv = &g_tiers[0].table;
static const if_kernel_table *g_gemm = &g_tiers[0].table;
static int g_selected;

size_t if_tier_count(void) { return N_TIERS; }

const char *if_tier_name(size_t i) { return i < N_TIERS ? g_tiers[i].table.tier : NULL; }

const if_kernel_table *if_tier_table(size_t i) { return i < N_TIERS ? &g_tiers[i].table : NULL; }

int if_tier_supported(size_t i, char *why, size_t whylen) {
    if (i >= N_TIERS) {
        if (why && whylen) snprintf(why, whylen, "no such tier");
        return 0;
    }
    uint32_t have = if_cpu_detect()->flags;
    uint32_t missing = g_tiers[i].requires & ~have;
    if (missing) {
        if (why && whylen) snprintf(why, whylen, "CPU/OS lacks features (mask 0x%x)", missing);
        return 0;
    }
    if (why && whylen) why[0] = '\0';
    return 1;
}

if_status if_dispatch_select(const char *tier, char *err, size_t errlen) {
    if (tier == NULL) tier = getenv("ISAFORGE_KERNEL");
    if (tier == NULL || tier[0] == '\0' || strcmp(tier, "auto") == 0) {
        size_t best = 0;
        for (size_t i = 0; i < N_TIERS; i++)
            if (if_tier_supported(i, NULL, 0)) best = i;
        g_gemv = g_gemm = &g_tiers[best].table;
        g_selected = 1;
        return IF_OK;
    }
    for (size_t i = 0; i < N_TIERS; i++) {
        if (strcmp(tier, g_tiers[i].table.tier) != 0) continue;
        char why[128];
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

const if_kernel_table *if_dispatch_gemv(void) {
    if (!g_selected) if_dispatch_select(NULL, NULL, 0);
    return g_gemv;
}

const if_kernel_table *if_dispatch_gemm(void) {
    if (!g_selected) if_dispatch_select(NULL, NULL, 0);
    return g_gemm;
}
