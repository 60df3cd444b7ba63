/* attn_native_test.c - run one attention kernel call from a file, for cross-architecture
 * tests (tests/test_attention.py runs it under qemu-aarch64 for the SME2 kernel).
 *
 *   attn_native_test TIER IN OUT
 *
 * IN: 9 little-endian uint64 (n_heads, n_kv_heads, head_size, pos0, n, window, n_sinks, cap,
 * kv_type; 3: float32 with the keys block-transposed, if_kv_layer.keys_t, cap a multiple of
 * IF_ATTN_KEY_BLOCK), then q (n, n_heads*head_size), k and v (pos0 + n, n_kv_heads*head_size)
 * float32.
 * The k/v rows of positions 0 .. pos0+n-1 are stored in order into a cache of `cap` slots of
 * kv_type, then TIER's kernel runs (its matrix-engine one for an int8 cache, as a model
 * would). OUT: (n, n_heads*head_size) float32. Prints the kernel's name; exits 2 on bad input
 * or a tier this CPU lacks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isaforge.h"

static int fail(const char *msg) {
    fprintf(stderr, "attn_native_test: %s\n", msg);
    return 2;
}

int main(int argc, char **argv) {
    if (argc != 4) return fail("usage: attn_native_test TIER IN OUT");
    const if_kernel_table *t = NULL;
    char why[256] = "";
    if (if_tier_find(argv[1], 0, &t, why, sizeof why) != IF_OK) return fail(why);
    FILE *f = fopen(argv[2], "rb");
    if (!f) return fail("cannot open input");
    uint64_t h[9];
    if (fread(h, sizeof h, 1, f) != 1) return fail("short header");
    size_t nh = h[0], nkv = h[1], hs = h[2], pos0 = h[3], n = h[4], window = h[5];
    size_t sinks = h[6], cap = h[7], kv_type = h[8];
    const int keys_t = kv_type == 3;
    if (keys_t && cap % IF_ATTN_KEY_BLOCK) return fail("keys_t: cap not a multiple of the block");
    if (keys_t) kv_type = IF_KV_F32;
    if (!nh || !nkv || nh % nkv || !hs || hs % 2 || !n || !cap || kv_type > 2 || nh > 4096 ||
        hs > 4096 || n > (1u << 20) || pos0 > (1u << 20) || cap > (1u << 21))
        return fail("bad header");
    size_t kv_dim = nkv * hs, T = pos0 + n, qn = n * nh * hs;
    if (cap < T && cap < sinks + window + n - 1) return fail("cap too small");
    float *q = malloc(qn * sizeof(float)), *k = malloc(T * kv_dim * sizeof(float));
    float *v = malloc(T * kv_dim * sizeof(float)), *out = calloc(qn, sizeof(float));
    if (!q || !k || !v || !out) return fail("out of memory");
    if (fread(q, sizeof(float), qn, f) != qn ||
        fread(k, sizeof(float), T * kv_dim, f) != T * kv_dim ||
        fread(v, sizeof(float), T * kv_dim, f) != T * kv_dim)
        return fail("short input");
    fclose(f);
    size_t el = kv_type == 0 ? 4 : kv_type == 1 ? 2 : 1, group = 0;
    if (kv_type == IF_KV_I8)
        for (group = 32; hs % group;) group /= 2;
    void *kc = calloc(cap * kv_dim, el), *vc = calloc(cap * kv_dim, el);
    float *ks = group ? calloc(cap * kv_dim / group, sizeof(float)) : NULL;
    float *vs = group ? calloc(cap * kv_dim / group, sizeof(float)) : NULL;
    float *scratch = malloc(if_attn_scratch_floats(hs, nh, nh / nkv, cap) * sizeof(float));
    if (!kc || !vc || !scratch || (group && (!ks || !vs))) return fail("out of memory");
    if_kv_layer kv = {(if_kv_type)kv_type, kc, vc, ks, vs, cap, kv_dim, group,
                      window ? sinks : 0, keys_t};
    if_attn_job j = {q, out, nh * hs, nh * hs, pos0, nh, nkv, hs, window, sinks, &kv};
    for (size_t p = 0; p < T; p++) {
        if_kv_store(&kv, 0, p, k + p * kv_dim);
        if_kv_store(&kv, 1, p, v + p * kv_dim);
    }
    const if_attn_kernel *ak = kv_type == IF_KV_I8 ? t->attn_i8 : t->attn;
    ak->run(&j, 0, n, 0, nh, scratch);
    printf("kernel %s\n", ak->name);
    f = fopen(argv[3], "wb");
    if (!f || fwrite(out, sizeof(float), qn, f) != qn || fclose(f) != 0)
        return fail("cannot write output");
    free(q);
    free(k);
    free(v);
    free(out);
    free(kc);
    free(vc);
    free(ks);
    free(vs);
    free(scratch);
    return 0;
}
