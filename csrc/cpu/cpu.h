/* cpu.h - CPU feature detection shared by dispatch (internal). */
#ifndef ISAFORGE_CPU_H
#define ISAFORGE_CPU_H

#include <stdint.h>

enum {
    IF_FEAT_SSE2 = 1u << 0,
    IF_FEAT_AVX2 = 1u << 1,
    IF_FEAT_FMA = 1u << 2,
    IF_FEAT_AVX512F = 1u << 3,
    IF_FEAT_AVX512BW = 1u << 4,
    IF_FEAT_AVX512VL = 1u << 5,
    IF_FEAT_AVX512_VNNI = 1u << 6,
    IF_FEAT_AVX_VNNI = 1u << 7,
    IF_FEAT_AMX_TILE = 1u << 8,
    IF_FEAT_AMX_INT8 = 1u << 9,
    IF_FEAT_ASIMD = 1u << 16,
    IF_FEAT_ASIMDDP = 1u << 17,
    IF_FEAT_I8MM = 1u << 18,
    IF_FEAT_SVE2 = 1u << 19,
    IF_FEAT_SME = 1u << 20,
    IF_FEAT_SME2 = 1u << 21,
};

/* Feature sets the kernel descriptors share: AVX2 with FMA; AVX-512 F/BW/VL with FMA. */
#define IF_FEATS_AVX2 (IF_FEAT_AVX2 | IF_FEAT_FMA)
#define IF_FEATS_AVX512 (IF_FEAT_AVX512F | IF_FEAT_AVX512BW | IF_FEAT_AVX512VL | IF_FEAT_FMA)

typedef struct if_cpu_info {
    uint32_t flags;        /* IF_FEAT_* usable here: CPU has it and the OS enabled its state */
    char name[64];         /* CPU model string */
    char features[256];    /* comma-separated names of `flags` */
    char notes[256];       /* why a feature the CPU has is unusable (e.g. AMX permission) */
} if_cpu_info;

/* Name of one IF_FEAT_* bit ("avx2", ...), or "?" */
const char *if_feature_name(uint32_t bit);
/* The IF_FEAT_* bit of a feature name, or 0 if unknown. */
uint32_t if_feature_bit(const char *name);
/* All known feature names, comma-separated. */
const char *if_feature_names(void);

/* Detect once (pthread_once: any thread may call it, the first call detects, the others wait
 * for it) and return the result. */
const if_cpu_info *if_cpu_detect(void);
/* How many times the detection ran (1): for tests/native/detect_test.c. */
int if_cpu_detect_runs(void);

#endif
