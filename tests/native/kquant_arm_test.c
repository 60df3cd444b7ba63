/* kquant_arm_test.c - one Arm tier's K-quant and legacy-block GEMVs and GEMMs against the
 * scalar ones, bit for bit, run under qemu-aarch64 by tests/test_kquant_arm.py with the tier as
 * its argument (neon, dotprod, i8mm or sme2): random Q4_K / Q6_K / Q5_K and Q4_0 / Q4_1 / Q5_0 /
 * Q5_1 / Q8_0 blocks and activations, and every value, scale and activation at its largest
 * magnitude (Q8_0's values -128), over row counts (odd ones: the tiles' tails), row lengths and
 * a row range starting past 0; the GEMMs at 1, 2, 5 and 11 activation rows (whole tiles and
 * tails; sme2: 37 rows and N up to 41). Outputs outside the range keep their fill. Prints
 * "runs R bad B" and exits 1 on a difference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

static uint64_t st = 7;
static uint8_t rnd(void) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return (uint8_t)(st >> 24);
}

/* typ 0: Q4_K, 1: Q6_K, 2: Q5_K, 3..7: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (values per block QB) */
#define NT 8
static const size_t BB[NT] = {144, 210, 176, 18, 20, 22, 24, 34};
static const size_t QB[NT] = {256, 256, 256, 32, 32, 32, 32, 32};
static const char *NAME[NT] = {"q4_k", "q6_k", "q5_k", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"};
/* Per tier (0 neon, 1 dotprod, 2 i8mm, 3 sme2: the i8mm and sme2 tiers decode with the dotprod
 * GEMVs; sme2 runs Q8_0's prefill on the dotprod GEMM). */
#define NTIER 4
static const char *TIER[NTIER] = {"neon", "dotprod", "i8mm", "sme2"};
static const if_kq_gemv_kernel *const GV[NTIER][NT] = {
    {&if_k_q4k_gemv_1x1_neon, &if_k_q6k_gemv_1x1_neon, &if_k_q5k_gemv_1x1_neon,
     &if_k_q40_gemv_1x4_neon, &if_k_q41_gemv_1x4_neon, &if_k_q50_gemv_1x4_neon,
     &if_k_q51_gemv_1x4_neon, &if_k_q80_gemv_1x4_neon},
    {&if_k_q4k_gemv_1x1_dotprod, &if_k_q6k_gemv_1x1_dotprod, &if_k_q5k_gemv_1x1_dotprod,
     &if_k_q40_gemv_1x4_dotprod, &if_k_q41_gemv_1x4_dotprod, &if_k_q50_gemv_1x4_dotprod,
     &if_k_q51_gemv_1x4_dotprod, &if_k_q80_gemv_1x4_dotprod},
    {&if_k_q4k_gemv_1x1_dotprod, &if_k_q6k_gemv_1x1_dotprod, &if_k_q5k_gemv_1x1_dotprod,
     &if_k_q40_gemv_1x4_dotprod, &if_k_q41_gemv_1x4_dotprod, &if_k_q50_gemv_1x4_dotprod,
     &if_k_q51_gemv_1x4_dotprod, &if_k_q80_gemv_1x4_dotprod},
    {&if_k_q4k_gemv_1x1_dotprod, &if_k_q6k_gemv_1x1_dotprod, &if_k_q5k_gemv_1x1_dotprod,
     &if_k_q40_gemv_1x4_dotprod, &if_k_q41_gemv_1x4_dotprod, &if_k_q50_gemv_1x4_dotprod,
     &if_k_q51_gemv_1x4_dotprod, &if_k_q80_gemv_1x4_dotprod}};
static const if_kq_gemm_kernel *const GM[NTIER][NT] = {
    {&if_k_q4k_gemm_1x1_neon, &if_k_q6k_gemm_1x1_neon, &if_k_q5k_gemm_1x1_neon,
     &if_k_q40_gemm_4x4_neon, &if_k_q41_gemm_4x4_neon, &if_k_q50_gemm_4x4_neon,
     &if_k_q51_gemm_4x4_neon, &if_k_q80_gemm_4x4_neon},
    {&if_k_q4k_gemm_1x1_dotprod, &if_k_q6k_gemm_1x1_dotprod, &if_k_q5k_gemm_1x1_dotprod,
     &if_k_q40_gemm_1x4_dotprod, &if_k_q41_gemm_1x4_dotprod, &if_k_q50_gemm_1x4_dotprod,
     &if_k_q51_gemm_1x4_dotprod, &if_k_q80_gemm_1x4_dotprod},
    {&if_k_q4k_gemm_2x2_i8mm, &if_k_q6k_gemm_2x2_i8mm, &if_k_q5k_gemm_2x2_i8mm,
     &if_k_q40_gemm_8x2_i8mm, &if_k_q41_gemm_8x2_i8mm, &if_k_q50_gemm_8x2_i8mm,
     &if_k_q51_gemm_8x2_i8mm, &if_k_q80_gemm_8x2_i8mm},
    {&if_k_q4k_gemm_vlxvl_sme2, &if_k_q6k_gemm_vlxvl_sme2, &if_k_q5k_gemm_vlxvl_sme2,
     &if_k_q40_gemm_vlxvl_sme2, &if_k_q41_gemm_vlxvl_sme2, &if_k_q50_gemm_vlxvl_sme2,
     &if_k_q51_gemm_vlxvl_sme2, &if_k_q80_gemm_1x4_dotprod}};
static const if_kq_gemm_kernel *const SCALAR[NT] = {
    &if_k_q4k_gemm_1x1_scalar, &if_k_q6k_gemm_1x1_scalar, &if_k_q5k_gemm_1x1_scalar,
    &if_k_q40_gemm_1x1_scalar, &if_k_q41_gemm_1x1_scalar, &if_k_q50_gemm_1x1_scalar,
    &if_k_q51_gemm_1x1_scalar, &if_k_q80_gemm_1x1_scalar};

int main(int argc, char **argv) {
    int tier = -1;
    for (int i = 0; i < NTIER; i++)
        if (argc == 2 && strcmp(argv[1], TIER[i]) == 0) tier = i;
    if (tier < 0) {
        printf("usage: kquant_arm_test neon|dotprod|i8mm|sme2\n");
        return 2;
    }
    /* the first M = 1 runs the GEMV; sme2's tiles are VL = 4 .. 16 rows, so its largest M and N
     * (37 and 41 - 13) span two 16-row tiles and a tail at 512 bits */
    const int big = tier == 3;
    const size_t NS[] = {1, 2, 10, big ? 41 : 19}, MS[] = {1, 1, 2, 5, big ? 37 : 11};
    int bad = 0, runs = 0;
    for (int typ = 0; typ < NT; typ++)
        for (size_t ni = 0; ni < 4; ni++)
            for (size_t K = QB[typ]; K <= 1024 + QB[typ]; K += 512)
                for (int ext = 0; ext < 2; ext++)
                    for (size_t mi = 0; mi < 5; mi++) {
                        const size_t N = NS[ni], M = MS[mi], n0 = N / 3;
                        const size_t bb = BB[typ], qb = QB[typ], wb = N * K / qb * bb;
                        uint8_t *w = malloc(wb);
                        int8_t *x = malloc(M * K);
                        float *xd = malloc(M * K / qb * sizeof(float));
                        int16_t *xs = malloc(M * K / 16 * sizeof(int16_t));
                        float *a = malloc(M * N * sizeof(float)), *b = malloc(M * N * sizeof(float));
                        if (!w || !x || !xd || !xs || !a || !b) return 2;
                        const uint8_t big = typ == 7 ? 0x80 : 0xFF; /* Q8_0: -128 */
                        for (size_t i = 0; i < wb; i++) w[i] = ext ? big : rnd();
                        for (size_t o = 0; o < wb; o += bb) {
                            if (typ == 1 && ext) memset(w + o + 192, 0x80, 16); /* scales -128 */
                            uint8_t *d = w + o + (typ == 1 ? 208 : 0);
                            d[0] = rnd(), d[1] = 0x1C; /* f16 near 1/256 */
                            if (typ != 1) d[2] = rnd(), d[3] = 0x18;
                        }
                        for (size_t i = 0; i < M * K; i++) x[i] = ext ? -127 : (int8_t)(rnd() % 255 - 127);
                        for (size_t i = 0; i < M * K / qb; i++) xd[i] = 0.01f * (float)(1 + i % 5);
                        if_k8_sums(xs, x, M * K);
                        memset(a, 0x7F, M * N * sizeof(float)); /* a NaN fill outside [n0, N) */
                        memset(b, 0x7F, M * N * sizeof(float));
                        SCALAR[typ]->run(a, N, x, xd, xs, M, w, n0, N, K);
                        if (mi == 0) GV[tier][typ]->run(b, x, xd, xs, w, n0, N, K);
                        else GM[tier][typ]->run(b, N, x, xd, xs, M, w, n0, N, K);
                        runs++;
                        if (memcmp(a, b, M * N * sizeof(float)) != 0) {
                            bad++;
                            printf("differs: %s %s %s M=%zu N=%zu n0=%zu K=%zu extremes=%d\n",
                                   TIER[tier], NAME[typ], mi ? "gemm" : "gemv", M, N, n0, K, ext);
                        }
                        free(w), free(x), free(xd), free(xs), free(a), free(b);
                    }
    printf("runs %d bad %d\n", runs, bad);
    return bad != 0;
}
