/* iq4_arm_test.c - the Arm IQ4 GEMVs and GEMMs (iq4nl_*_1x4_dotprod, iq4xs_*_1x4_dotprod)
 * against the scalar ones, bit for bit, run under qemu-aarch64 by tests/test_iq4_arm.py:
 * random IQ4_NL / IQ4_XS blocks and activations, and every level at -127 (every IQ4_XS scale at
 * -32) against activations at 127, over row counts (tails of the 4-row pass) and row lengths;
 * the GEMMs at several activation rows. Prints "runs R bad B" and exits 1 on a difference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

static uint64_t st = 11;
static uint8_t rnd(void) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return (uint8_t)(st >> 24);
}

/* typ 0: IQ4_NL (blocks of 32), 1: IQ4_XS (256) */
static const size_t BB[2] = {IF_IQ4NL_BLOCK_BYTES, IF_IQ4XS_BLOCK_BYTES};
static const size_t QB[2] = {32, 256};
static const char *NAME[2] = {"iq4_nl", "iq4_xs"};
static const if_kq_gemv_kernel *const GV[2] = {&if_k_iq4nl_gemv_1x4_dotprod,
                                                &if_k_iq4xs_gemv_1x4_dotprod};
static const if_kq_gemm_kernel *const GM[2] = {&if_k_iq4nl_gemm_1x4_dotprod,
                                                &if_k_iq4xs_gemm_1x4_dotprod};
static const if_kq_gemm_kernel *const SCALAR[2] = {&if_k_iq4nl_gemm_1x1_scalar,
                                                    &if_k_iq4xs_gemm_1x1_scalar};

int main(void) {
    int bad = 0, runs = 0;
    for (int typ = 0; typ < 2; typ++)
        for (size_t N = 1; N <= 19; N += 3)
            for (size_t K = QB[typ]; K <= 1024 + QB[typ]; K += 512)
                for (int ext = 0; ext < 2; ext++)
                    for (size_t M = 1; M <= 3; M += 2) {
                        const size_t bb = BB[typ], qb = QB[typ], wb = N * K / qb * bb;
                        uint8_t *w = malloc(wb);
                        int8_t *x = malloc(M * K);
                        float *xd = malloc(M * K / qb * sizeof(float));
                        int16_t *xs = malloc(M * K / 16 * sizeof(int16_t));
                        float *a = malloc(M * N * sizeof(float)), *b = malloc(M * N * sizeof(float));
                        if (!w || !x || !xd || !xs || !a || !b) return 2;
                        for (size_t i = 0; i < wb; i++) w[i] = ext ? 0x00 : rnd();
                        for (size_t o = 0; o < wb; o += bb) w[o] = rnd(), w[o + 1] = 0x1C;
                        for (size_t i = 0; i < M * K; i++)
                            x[i] = ext ? 127 : (int8_t)(rnd() % 255 - 127);
                        for (size_t i = 0; i < M * K / qb; i++) xd[i] = 0.01f * (float)(1 + i % 5);
                        if_k8_sums(xs, x, M * K);
                        SCALAR[typ]->run(a, N, x, xd, xs, M, w, 0, N, K);
                        if (M == 1) GV[typ]->run(b, x, xd, xs, w, 0, N, K);
                        else GM[typ]->run(b, N, x, xd, xs, M, w, 0, N, K);
                        runs++;
                        if (memcmp(a, b, M * N * sizeof(float)) != 0) {
                            bad++;
                            printf("differs: %s M=%zu N=%zu K=%zu extremes=%d\n", NAME[typ], M,
                                   N, K, ext);
                        }
                        free(w), free(x), free(xd), free(xs), free(a), free(b);
                    }
    printf("runs %d bad %d\n", runs, bad);
    return bad != 0;
}
