/* features.c - what this CPU and OS can run.
 *
 * x86: CPUID leaves 1 and 7 for the instructions, XGETBV for the register state the OS
 * saves (YMM, ZMM/opmask, AMX tiles), and on Linux arch_prctl(ARCH_REQ_XCOMP_PERM) to ask
 * for the AMX tile data permission; a refusal makes AMX unusable, with the reason noted.
 * Arm: getauxval(AT_HWCAP/AT_HWCAP2) on Linux, sysctlbyname("hw.optional.arm.FEAT_*") on
 * macOS. */
#include "cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* filled once by detect_once (pthread_once), read-only afterwards */
static if_cpu_info g_info;
static char g_all_names[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_runs; /* times detect_once ran: 1 (for the test that checks it) */

static void add_name(if_cpu_info *ci, uint32_t bit, const char *name) {
    if (!(ci->flags & bit)) return;
    size_t len = strlen(ci->features);
    snprintf(ci->features + len, sizeof ci->features - len, "%s%s", len ? "," : "", name);
}

static void note(if_cpu_info *ci, const char *msg) {
    size_t len = strlen(ci->notes);
    snprintf(ci->notes + len, sizeof ci->notes - len, "%s%s", len ? "; " : "", msg);
}

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void detect(if_cpu_info *ci) {
    unsigned a, b, c, d;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (__get_cpuid_max(0x80000000, NULL) >= 0x80000004) {
        unsigned *p = (unsigned *)ci->name;
        for (unsigned leaf = 0; leaf < 3; leaf++) {
            __cpuid(0x80000002 + leaf, p[4 * leaf], p[4 * leaf + 1], p[4 * leaf + 2],
                    p[4 * leaf + 3]);
        }
        ci->name[48] = '\0';
    }
    if (max_leaf < 1) return;
    __cpuid(1, a, b, c, d);
    if (d & (1u << 26)) ci->flags |= IF_FEAT_SSE2;
    int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1;
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    int ymm_os = (xcr0 & 0x6) == 0x6;            /* XMM and YMM state */
    int zmm_os = ymm_os && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    int tile_os = (xcr0 & 0x60000) == 0x60000;   /* XTILECFG, XTILEDATA */
    if (max_leaf < 7) return;
    unsigned b7, c7, d7, a71 = 0, tmp;
    __cpuid_count(7, 0, a, b7, c7, d7);
    if (a >= 1) __cpuid_count(7, 1, a71, tmp, tmp, tmp);
    if (ymm_os && (b7 & (1u << 5))) ci->flags |= IF_FEAT_AVX2;
    if (ymm_os && fma) ci->flags |= IF_FEAT_FMA;
    if (ymm_os && (a71 & (1u << 4))) ci->flags |= IF_FEAT_AVX_VNNI;
    if (zmm_os) {
        if (b7 & (1u << 16)) ci->flags |= IF_FEAT_AVX512F;
        if (b7 & (1u << 30)) ci->flags |= IF_FEAT_AVX512BW;
        if (b7 & (1u << 31)) ci->flags |= IF_FEAT_AVX512VL;
        if (c7 & (1u << 11)) ci->flags |= IF_FEAT_AVX512_VNNI;
    } else if (b7 & (1u << 16)) {
        note(ci, "AVX-512 present but ZMM state not enabled by the OS");
    }
    int amx_cpu = (d7 & (1u << 24)) && (d7 & (1u << 25)); /* AMX-TILE, AMX-INT8 */
    if (amx_cpu) {
        if (!tile_os) {
            note(ci, "AMX present but tile state not enabled by the OS (XCR0)");
        } else {
#if defined(__linux__)
            /* ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 */
            if (syscall(SYS_arch_prctl, 0x1023, 18) == 0) {
                ci->flags |= IF_FEAT_AMX_TILE | IF_FEAT_AMX_INT8;
            } else {
                note(ci, "AMX present but arch_prctl(ARCH_REQ_XCOMP_PERM) was refused");
            }
#else
            ci->flags |= IF_FEAT_AMX_TILE | IF_FEAT_AMX_INT8;
#endif
        }
    }
}
#elif defined(__aarch64__)
#if defined(__linux__)
#include <sys/auxv.h>
#ifndef AT_HWCAP2
#define AT_HWCAP2 26
#endif
static void detect(if_cpu_info *ci) {
    unsigned long h1 = getauxval(AT_HWCAP), h2 = getauxval(AT_HWCAP2);
    snprintf(ci->name, sizeof ci->name, "aarch64");
    if (h1 & (1ul << 1)) ci->flags |= IF_FEAT_ASIMD;     /* HWCAP_ASIMD */
    if (h1 & (1ul << 20)) ci->flags |= IF_FEAT_ASIMDDP;  /* HWCAP_ASIMDDP */
    if (h2 & (1ul << 1)) ci->flags |= IF_FEAT_SVE2;      /* HWCAP2_SVE2 */
    if (h2 & (1ul << 13)) ci->flags |= IF_FEAT_I8MM;     /* HWCAP2_I8MM */
    if (h2 & (1ul << 23)) ci->flags |= IF_FEAT_SME;      /* HWCAP2_SME */
    if (h2 & (1ul << 37)) ci->flags |= IF_FEAT_SME2;     /* HWCAP2_SME2 */
}
#elif defined(__APPLE__)
#include <sys/sysctl.h>
static int has(const char *name) {
    int v = 0;
    size_t len = sizeof v;
    return sysctlbyname(name, &v, &len, NULL, 0) == 0 && v;
}
static void detect(if_cpu_info *ci) {
    size_t len = sizeof ci->name - 1;
    if (sysctlbyname("machdep.cpu.brand_string", ci->name, &len, NULL, 0) != 0)
        snprintf(ci->name, sizeof ci->name, "arm64");
    ci->flags |= IF_FEAT_ASIMD;
    if (has("hw.optional.arm.FEAT_DotProd")) ci->flags |= IF_FEAT_ASIMDDP;
    if (has("hw.optional.arm.FEAT_I8MM")) ci->flags |= IF_FEAT_I8MM;
    if (has("hw.optional.arm.FEAT_SME")) ci->flags |= IF_FEAT_SME;
    if (has("hw.optional.arm.FEAT_SME2")) ci->flags |= IF_FEAT_SME2;
}
#else
static void detect(if_cpu_info *ci) { (void)ci; }
#endif
#else
static void detect(if_cpu_info *ci) { (void)ci; }
#endif

static const struct {
    uint32_t bit;
    const char *name;
} g_names[] = {
    {IF_FEAT_SSE2, "sse2"},         {IF_FEAT_AVX2, "avx2"},
    {IF_FEAT_FMA, "fma"},           {IF_FEAT_AVX512F, "avx512f"},
    {IF_FEAT_AVX512BW, "avx512bw"}, {IF_FEAT_AVX512VL, "avx512vl"},
    {IF_FEAT_AVX512_VNNI, "avx512_vnni"}, {IF_FEAT_AVX_VNNI, "avx_vnni"},
    {IF_FEAT_AMX_TILE, "amx_tile"}, {IF_FEAT_AMX_INT8, "amx_int8"},
    {IF_FEAT_ASIMD, "asimd"},       {IF_FEAT_ASIMDDP, "asimddp"},
    {IF_FEAT_I8MM, "i8mm"},         {IF_FEAT_SVE2, "sve2"},
    {IF_FEAT_SME, "sme"},           {IF_FEAT_SME2, "sme2"},
};
#define N_NAMES (sizeof g_names / sizeof g_names[0])

const char *if_feature_name(uint32_t bit) {
    for (size_t i = 0; i < N_NAMES; i++)
        if (g_names[i].bit == bit) return g_names[i].name;
    return "?";
}

uint32_t if_feature_bit(const char *name) {
    for (size_t i = 0; i < N_NAMES; i++)
        if (strcmp(g_names[i].name, name) == 0) return g_names[i].bit;
    return 0;
}

const char *if_feature_names(void) {
    if_cpu_detect();
    return g_all_names;
}

static void detect_once(void) {
    g_runs++;
    if_cpu_info ci;
    memset(&ci, 0, sizeof ci);
    detect(&ci);
    /* trim the padding spaces some CPUs put around their brand string */
    char *s = ci.name;
    while (*s == ' ') s++;
    memmove(ci.name, s, strlen(s) + 1);
    for (size_t n = strlen(ci.name); n > 0 && ci.name[n - 1] == ' '; n--) ci.name[n - 1] = '\0';
    if (!ci.name[0]) snprintf(ci.name, sizeof ci.name, "unknown");
    for (size_t i = 0; i < N_NAMES; i++) add_name(&ci, g_names[i].bit, g_names[i].name);
    g_info = ci;
    size_t len = 0;
    for (size_t i = 0; i < N_NAMES && len < sizeof g_all_names; i++)
        len += (size_t)snprintf(g_all_names + len, sizeof g_all_names - len, "%s%s",
                                i ? "," : "", g_names[i].name);
}

const if_cpu_info *if_cpu_detect(void) {
    pthread_once(&g_once, detect_once);
    return &g_info;
}

int if_cpu_detect_runs(void) {
    if_cpu_detect();
    return g_runs;
}

const char *if_cpu_features(void) { return if_cpu_detect()->features; }
const char *if_cpu_name(void) { return if_cpu_detect()->name; }

const char *if_cpu_notes(void) { return if_cpu_detect()->notes; }
