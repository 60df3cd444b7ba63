/* q4_native_test.c - the 4-bit codebook kernels (q4_gemv, q4_gemm) and the activation rotation
 * (hadamard) of every compiled tier this CPU runs, against the scalar kernels bit for bit, on
 * the M x N x K x GS grid with tails and guard pages, in C, so it runs under qemu-aarch64 as well as natively
 * (tests/test_q4_arm.py). Prints one line per tier run ("tier NAME: q4_gemv ... cases") and
 * "ok", or "FAIL ..." and exits 1. */
#define _DEFAULT_SOURCE /* mmap's MAP_ANONYMOUS, sysconf under -std=c11 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "isaforge.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 0x2545F4914F6CDD1Dull) >> 32);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        printf("FAIL out of memory\n");
        exit(1);
    }
    return p;
}

static int g_fail;

static void check(const float *got, const float *want, size_t n, const char *what,
                  const char *tier, size_t M, size_t N, size_t K, size_t gs) {
    if (memcmp(got, want, n * sizeof(float)) != 0 && !g_fail) {
        size_t i = 0;
        while (i < n && !memcmp(got + i, want + i, sizeof(float))) i++;
        printf("FAIL %s tier=%s M=%zu N=%zu K=%zu gs=%zu: element %zu is %.9g, scalar %.9g\n",
               what, tier, M, N, K, gs, i, (double)got[i], (double)want[i]);
        g_fail = 1;
    }
}

/* n bytes that end exactly at an inaccessible page (a read past the end faults); freed by
 * guarded_free. */
typedef struct guarded {
    void *base;
    size_t len;
    void *p;
} guarded;

static guarded guarded_alloc(size_t n) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = (n + pg - 1) / pg * pg + pg;
    guarded g = {mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                 len, NULL};
    if (g.base == MAP_FAILED || mprotect((char *)g.base + len - pg, pg, PROT_NONE) != 0) {
        printf("FAIL mmap/mprotect\n");
        exit(1);
    }
    g.p = (char *)g.base + len - pg - n;
    return g;
}

static void guarded_free(guarded g) { munmap(g.base, g.len); }

static const uint32_t SENTINEL = 0x7fc0beefu; /* a NaN no kernel produces */

static void check_sentinel(const float *p, size_t n, const char *what, const char *tier,
                           size_t M, size_t N, size_t K, size_t gs) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(p + i, &SENTINEL, 4) != 0 && !g_fail) {
            printf("FAIL %s tier=%s M=%zu N=%zu K=%zu gs=%zu: wrote past the output\n", what,
                   tier, M, N, K, gs);
            g_fail = 1;
        }
}

/* The packed copy of w (N, K / 2 nibble bytes) for GEMM kernel k, ending at a guard page,
 * after checking it is the layout k declares: unpack gives w back, each tile of nr rows at
 * t * pack_size(nr) unpacks to its rows alone, and q4_gemm_4x4_i8mm's bytes are where its file
 * comment puts them (pairs of rows interleaved per 8-byte lane, the nibbles unchanged). */
static guarded check_packed(const if_q4_gemm_kernel *k, const uint8_t *w, size_t N, size_t K,
                            size_t gs) {
    const size_t bytes = k->pack_size(N, K, gs), nr = k->nr, rb = K / 2;
    guarded g = guarded_alloc(bytes);
    uint8_t *p = g.p, *back = xmalloc(N * rb);
    k->pack(p, w, N, K, gs);
    memset(back, 0xA5, N * rb);
    k->unpack(back, p, N, K, gs);
    if (memcmp(back, w, N * rb) != 0 && !g_fail) {
        printf("FAIL q4_pack %s N=%zu K=%zu gs=%zu: unpack(pack(w)) != w\n", k->name, N, K, gs);
        g_fail = 1;
    }
    for (size_t t = 0; t * nr < N && !g_fail; t++) {
        const size_t n = N - t * nr < nr ? N - t * nr : nr;
        memset(back, 0xA5, n * rb);
        k->unpack(back, p + t * k->pack_size(nr, K, gs), n, K, gs);
        if (memcmp(back, w + t * nr * rb, n * rb) != 0) {
            printf("FAIL q4_pack %s N=%zu K=%zu gs=%zu: tile %zu does not unpack to its rows\n",
                   k->name, N, K, gs, t);
            g_fail = 1;
        }
    }
    if (strcmp(k->name, "q4_gemm_4x4_i8mm") == 0 && !g_fail) {
        if (bytes != (N + 1) / 2 * K) {
            printf("FAIL q4_pack %s: pack_size %zu, not %zu\n", k->name, bytes, (N + 1) / 2 * K);
            g_fail = 1;
        }
        for (size_t i = 0; i < bytes && !g_fail; i++) { /* pair, block, 8-byte half, row, byte */
            const size_t pr = i / K, b = i % K / 32, h = i % 32 / 16, r = i % 16 / 8, j = i % 8;
            const size_t row = 2 * pr + r;
            const uint8_t want = row < N ? w[row * rb + 16 * b + 8 * h + j] : 0;
            if (p[i] != want) {
                printf("FAIL q4_pack %s N=%zu K=%zu gs=%zu: packed byte %zu is %u, not %u\n",
                       k->name, N, K, gs, i, p[i], want);
                g_fail = 1;
            }
        }
    }
    free(back);
    return g;
}

/* ---- q4gen DUMP N TOKEN...: greedy generation (T = 0) of a 4-bit model on every tier ----
 * DUMP (written by tests/test_q4_arm.py): "IFQ4GEN2", u64 dim hidden_dim n_layers n_heads
 * n_kv_heads vocab_size seq_len, f32 rope_theta norm_eps (a Llama layer), u64 tied (1: the
 * token table is the classifier's matrix, no tok_embeddings array), then arrays each
 * starting at a multiple of 64 bytes: tok_embeddings, rms_final, wcls, per layer rms_att,
 * rms_ffn and the 7 matrices in IF_LAYER_MATRICES order. A matrix: u64 dtype rows cols gs kpad
 * has_signs, then F32 (rows, cols) floats; Q8 (rows, cols) int8 + scales; Q4 codebook (16),
 * nibbles (rows, kpad / 2), scales (rows, kpad / gs), signs (kpad) if has_signs. For each tier
 * this CPU runs: prefill of the prompt (the GEMM) then N decode steps (the GEMV), the argmax
 * (first of equals) each time; prints "gen TIER table=T decode=NAME prefill=NAME: id id ...
 * digest=D" (T: "packed" when the token rows come from the classifier's packed copy, else
 * "rows"),
 * D an FNV-1a digest of the bits of every logit row the tokens were chosen from. */
typedef struct cursor {
    const unsigned char *p, *end;
} cursor;

static const void *take(cursor *c, size_t n, int align) {
    if (align) {
        size_t off = (size_t)((uintptr_t)c->p % 64);
        if (off) c->p += 64 - off;
    }
    if ((size_t)(c->end - c->p) < n) {
        printf("FAIL q4gen: dump truncated\n");
        exit(2);
    }
    const void *r = c->p;
    c->p += n;
    return r;
}

static uint64_t take_u64(cursor *c) {
    uint64_t v;
    memcpy(&v, take(c, 8, 0), 8);
    return v;
}

static if_matrix take_matrix(cursor *c) {
    if_matrix m;
    memset(&m, 0, sizeof m);
    m.dtype = (if_dtype)take_u64(c);
    m.rows = take_u64(c), m.cols = take_u64(c), m.group_size = take_u64(c);
    m.kpad = take_u64(c);
    const uint64_t has_signs = take_u64(c);
    if (m.dtype == IF_F32) {
        m.f32 = take(c, m.rows * m.cols * 4, 1);
    } else if (m.dtype == IF_Q8) {
        m.q = take(c, m.rows * m.cols, 1);
        m.s = take(c, m.rows * (m.cols / m.group_size) * 4, 1);
    } else {
        m.codebook = take(c, 16, 1);
        m.q4 = take(c, m.rows * m.kpad / 2, 1);
        m.s = take(c, m.rows * (m.kpad / m.group_size) * 4, 1);
        if (has_signs) m.signs = take(c, m.kpad * 4, 1);
    }
    return m;
}

static int cmd_q4gen(int argc, char **argv) {
    if (argc < 3) {
        printf("usage: q4_native_test q4gen DUMP N TOKEN...\n");
        return 2;
    }
    FILE *f = fopen(argv[0], "rb");
    if (!f) {
        printf("FAIL q4gen: cannot open %s\n", argv[0]);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    const size_t len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = aligned_alloc(64, (len + 63) / 64 * 64);
    if (!buf || fread(buf, 1, len, f) != len) {
        printf("FAIL q4gen: cannot read %s\n", argv[0]);
        return 2;
    }
    fclose(f);
    cursor c = {buf, buf + len};
    if (memcmp(take(&c, 8, 0), "IFQ4GEN2", 8) != 0) {
        printf("FAIL q4gen: not a q4gen dump\n");
        return 2;
    }
    if_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.dim = take_u64(&c), cfg.hidden_dim = take_u64(&c), cfg.n_layers = take_u64(&c);
    cfg.n_heads = take_u64(&c), cfg.n_kv_heads = take_u64(&c), cfg.vocab_size = take_u64(&c);
    cfg.seq_len = take_u64(&c);
    memcpy(&cfg.rope_theta, take(&c, 4, 0), 4);
    memcpy(&cfg.norm_eps, take(&c, 4, 0), 4);
    const uint64_t tied = take_u64(&c);
    if_weights w;
    memset(&w, 0, sizeof w);
    if (!tied) w.tok_embeddings = take(&c, cfg.vocab_size * cfg.dim * 4, 1);
    w.rms_final = take(&c, cfg.dim * 4, 1);
    w.wcls = take_matrix(&c);
    if (tied) w.tok = w.wcls;
    if_layer_weights *L = calloc(cfg.n_layers, sizeof *L);
    for (size_t l = 0; l < cfg.n_layers; l++) {
        L[l].rms_att = take(&c, cfg.dim * 4, 1);
        L[l].rms_ffn = take(&c, cfg.dim * 4, 1);
#define TAKE_(name, rows, cols) L[l].name = take_matrix(&c);
        IF_LAYER_MATRICES(TAKE_)
#undef TAKE_
    }
    w.layers = L;
    const size_t n_gen = (size_t)strtoul(argv[1], NULL, 10), n_prompt = (size_t)(argc - 2);
    const size_t vocab = cfg.vocab_size;
    int32_t *toks = xmalloc((n_prompt + n_gen) * sizeof(int32_t));
    for (size_t i = 0; i < n_prompt; i++) toks[i] = (int32_t)strtol(argv[2 + i], NULL, 10);
    float *logits = xmalloc(n_prompt * vocab * sizeof(float));
    for (size_t t = 0; t < if_tier_count(); t++) {
        if (!if_tier_supported(t, 0, NULL, 0)) continue;
        char err[256] = "";
        if_model_opts opts = {.n_threads = 1, .kv_type = IF_KV_F32};
        if_model *m = NULL;
        if (if_kernels_choose(if_tier_name(t), 0, &opts.kernels, err, sizeof err) != IF_OK ||
            if_model_create_opts(&cfg, &w, &opts, &m, err, sizeof err) != IF_OK ||
            if_model_prefill(m, toks, n_prompt, 0, NULL, logits, err, sizeof err) != IF_OK) {
            printf("FAIL q4gen tier %s: %s\n", if_tier_name(t), err);
            return 1;
        }
        /* decode: the GEMV, or the GEMM at M = 1 over its packed copy (decode_packed) */
        int packed_rows = 0;
        (void)if_model_embed_info(m, NULL, &packed_rows);
        printf("gen %s table=%s decode=%s prefill=%s:", if_tier_name(t),
               packed_rows ? "packed" : "rows",
               if_model_q4_decode_packed(m) ? opts.kernels.gemm->q4_gemm->name
                                            : opts.kernels.gemv->q4_gemv->name,
               opts.kernels.gemm->q4_gemm->name);
        const float *row = logits + (n_prompt - 1) * vocab;
        uint64_t dg = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < n_gen; i++) {
            size_t best = 0;
            for (size_t v = 1; v < vocab; v++)
                if (row[v] > row[best]) best = v;
            toks[n_prompt + i] = (int32_t)best;
            for (size_t v = 0; v < vocab; v++) { /* FNV-1a over the logits' bits */
                uint32_t b;
                memcpy(&b, row + v, 4);
                dg = (dg ^ b) * 0x100000001b3ull;
            }
            printf(" %zu", best);
            if (i + 1 < n_gen &&
                if_model_forward(m, (int32_t)best, n_prompt + i, logits, err, sizeof err) != IF_OK) {
                printf("\nFAIL q4gen tier %s: %s\n", if_tier_name(t), err);
                return 1;
            }
            row = logits;
        }
        printf(" digest=%016llx\n", (unsigned long long)dg);
        fflush(stdout);
        if_model_free(m);
    }
    free(L), free(buf), free(toks), free(logits);
    printf("ok\n");
    return 0;
}

/* Codebook kinds the grid cycles through (each selects different product modes in the
 * vector kernels): 0 random over [-127, 127] with both ends present (span 254), 1 GGUF Q4_0's
 * cb[i] = i - 8, 2 random with span <= 63 and a positive minimum, 3 random with span <= 127
 * and a negative minimum, 4 cb[i] = cb[0] + i from 100 (all positive). */
#define CB_KINDS 5
static void make_cb(int8_t cb[16], int kind) {
    for (int i = 0; i < 16; i++) {
        switch (kind) {
        case 0: cb[i] = (int8_t)((int)(rnd() % 255) - 127); break;
        case 1: cb[i] = (int8_t)(i - 8); break;
        case 2: cb[i] = (int8_t)(20 + (int)(rnd() % 64)); break;
        case 3: cb[i] = (int8_t)(-90 + (int)(rnd() % 128)); break;
        default: cb[i] = (int8_t)(100 + i); break;
        }
    }
    if (kind == 0) {
        cb[0] = -127;
        cb[15] = 127;
    }
}

/* One weight shape (N, K, gs, codebook kind) of tier tt against scalar at every M of Ms:
 * returns the cases run (0 on a failure, g_fail set). */
static size_t run_shape(const if_kernel_table *sc, const if_kernel_table *tt, const size_t *Ms,
                        size_t nM, size_t N, size_t K, size_t gs, int kind, int quick) {
    const size_t ng = K / gs;
    size_t cases = 0;
    guarded gw = guarded_alloc(N * K / 2), gws = guarded_alloc(N * ng * 4);
    uint8_t *w = gw.p;
    float *ws = gws.p;
    int8_t cb[16];
    make_cb(cb, kind);
    for (size_t i = 0; i < N * K / 2; i++) w[i] = (uint8_t)rnd();
    for (size_t i = 0; i < N * ng; i++) ws[i] = ((float)(rnd() % 2001) - 1000.0f) * 1e-3f;
    /* a GEMM with a packed layout runs on its weights packed as at load */
    guarded gp = {NULL, 0, NULL};
    const uint8_t *wg = w;
    if (tt->q4_gemm->pack) {
        gp = check_packed(tt->q4_gemm, w, N, K, gs);
        wg = gp.p;
    }
    for (size_t mi = 0; mi < nM && !g_fail; mi++) {
        const size_t M = Ms[mi];
        if (quick && M * N * K > (1u << 21) && M != 1 && M != 17) continue;
        const size_t ldo = N + 3;
        guarded gx = guarded_alloc(M * K), gxs = guarded_alloc(M * ng * 4);
        int8_t *xq = gx.p;
        float *xs = gxs.p;
        float *want = xmalloc(M * N * sizeof(float));
        float *got = xmalloc(M * ldo * sizeof(float));
        for (size_t i = 0; i < M * K; i++) xq[i] = (int8_t)((int)(rnd() % 255) - 127);
        for (size_t i = 0; i < M * ng; i++) xs[i] = (float)(rnd() % 1000) * 1e-3f;
        sc->q4_gemm->run(want, N, xq, xs, M, w, ws, cb, 0, N, K, gs);
        for (size_t i = 0; i < M * ldo; i++) memcpy(got + i, &SENTINEL, 4);
        /* two column ranges split on the tile */
        const size_t nr = tt->q4_gemm->nr, split = (N / 2) / nr * nr;
        if (split) tt->q4_gemm->run(got, ldo, xq, xs, M, wg, ws, cb, 0, split, K, gs);
        tt->q4_gemm->run(got, ldo, xq, xs, M, wg, ws, cb, split, N, K, gs);
        for (size_t m = 0; m < M; m++) {
            check(got + m * ldo, want + m * N, N, "q4_gemm", tt->tier, M, N, K, gs);
            check_sentinel(got + m * ldo + N, 3, "q4_gemm", tt->tier, M, N, K, gs);
        }
        /* the GEMV on the last row, split at an odd row to test the n0 offset */
        const size_t last = M - 1, gsplit = N / 2 | 1;
        for (size_t i = 0; i < N + 3; i++) memcpy(got + i, &SENTINEL, 4);
        if (gsplit < N)
            tt->q4_gemv->run(got, xq + last * K, xs + last * ng, w, ws, cb, 0, gsplit, K, gs);
        tt->q4_gemv->run(got, xq + last * K, xs + last * ng, w, ws, cb, gsplit < N ? gsplit : 0,
                         N, K, gs);
        check(got, want + last * N, N, "q4_gemv", tt->tier, 1, N, K, gs);
        check_sentinel(got + N, 3, "q4_gemv", tt->tier, 1, N, K, gs);
        if (g_fail) printf("  (codebook kind %d)\n", kind);
        cases++;
        guarded_free(gx), guarded_free(gxs), free(want), free(got);
    }
    guarded_free(gw), guarded_free(gws);
    if (gp.base) guarded_free(gp);
    return g_fail ? 0 : cases;
}

#ifdef IF_Q4_SIMDE
/* Test-only (tests/test_q4_avx512_simde.py): the AVX-512 VNNI 4-bit kernels compiled without
 * AVX-512 flags against SIMDe's portable intrinsics, under renamed descriptors, as one more
 * table run by this driver on any x86-64 CPU. */
extern const if_q4_gemv_kernel if_k_q4_gemv_1x16_avx512_vnni_simde;
extern const if_q4_gemm_kernel if_k_q4_gemm_8x16_avx512_vnni_simde;
#endif

/* Arguments: [--quick] (large GEMMs only at M = 1 and 17, as if_native_test's conformance;
 * no extra shapes) [--tier NAME] (only that tier against scalar). The grid is the Q8
 * conformance grid's with gs a multiple of 32: M x N x K x gs with tails, weights, scales and
 * activations ending at an inaccessible page, outputs with ldo > N and sentinels past N, the
 * codebook kinds of make_cb in turn; then (without --quick) long rows and group sizes that are
 * not powers of two. */
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "q4gen") == 0) return cmd_q4gen(argc - 2, argv + 2);
    int quick = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--tier") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else {
            printf("usage: q4_native_test [--quick] [--tier NAME]\n");
            return 2;
        }
    }
    static const size_t Ms[] = {1, 2, 3, 15, 16, 17, 64, 129};
    static const size_t Ns[] = {1, 3, 16, 17, 63, 64, 576, 1536};
    static const size_t GSs[] = {32, 64, 128, 256};
    /* extra shapes (N, K, gs): K up to 8192, rows of 515 groups (more than one pass of the
     * vector kernels' group buffers), gs 96 / 160 / 192 / 384 */
    static const size_t XMs[] = {1, 9, 17};
    static const size_t Xshapes[][3] = {{33, 8192, 32}, {17, 515 * 32, 32}, {19, 515 * 64, 64},
                                        {35, 96 * 5, 96}, {21, 160 * 3, 160}, {18, 192 * 7, 192},
                                        {31, 8192, 256}, {16, 384 * 3, 384}, {47, 4096, 4096}};
    const if_kernel_table *sc = if_tier_table(0);
    size_t ntab = if_tier_count();
#ifdef IF_Q4_SIMDE
    if_kernel_table simde = *sc;
    simde.tier = "avx512_vnni_simde";
    simde.q4_gemv = &if_k_q4_gemv_1x16_avx512_vnni_simde;
    simde.q4_gemm = &if_k_q4_gemm_8x16_avx512_vnni_simde;
    ntab++;
#endif
    for (size_t t = 1; t < ntab; t++) {
        const if_kernel_table *tt;
#ifdef IF_Q4_SIMDE
        if (t == ntab - 1) {
            tt = &simde;
        } else
#endif
        {
            if (!if_tier_supported(t, 0, NULL, 0)) continue;
            tt = if_tier_table(t);
        }
        if (only && strcmp(only, tt->tier) != 0) continue;
        size_t cases = 0;
        int kind = 0;
        for (size_t gi = 0; gi < sizeof GSs / sizeof *GSs; gi++) {
            const size_t gs = GSs[gi];
            const size_t Ks[] = {gs, 3 * gs, 576, 1536};
            for (size_t ki = 0; ki < 4; ki++) {
                const size_t K = Ks[ki];
                int dup = K % gs != 0;
                for (size_t j = 0; j < ki; j++) dup |= Ks[j] == K;
                if (dup) continue;
                for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++) {
                    cases += run_shape(sc, tt, Ms, sizeof Ms / sizeof *Ms, Ns[ni], K, gs, kind,
                                       quick);
                    kind = (kind + 1) % CB_KINDS;
                    if (g_fail) return 1;
                }
                /* the rotation of a row of K - 3 values padded to K */
                float *x = xmalloc(K * sizeof(float)), *sg = xmalloc(K * sizeof(float));
                float *a = xmalloc(K * sizeof(float)), *b = xmalloc(K * sizeof(float));
                for (size_t i = 0; i < K; i++) {
                    x[i] = ((float)(rnd() % 20001) - 10000.0f) * 1e-4f;
                    sg[i] = (rnd() & 1) ? 1.0f : -1.0f;
                }
                sc->hadamard->run(a, x, sg, K - 3, K, gs);
                tt->hadamard->run(b, x, sg, K - 3, K, gs);
                check(b, a, K, "hadamard", tt->tier, 1, 1, K, gs);
                free(x), free(sg), free(a), free(b);
            }
        }
        for (size_t xi = 0; !quick && xi < sizeof Xshapes / sizeof *Xshapes; xi++)
            for (int kd = 0; kd < CB_KINDS; kd += xi % 2 ? 1 : 2) {
                cases += run_shape(sc, tt, XMs, sizeof XMs / sizeof *XMs, Xshapes[xi][0],
                                   Xshapes[xi][1], Xshapes[xi][2], kd, 0);
                if (g_fail) return 1;
            }
        printf("tier %s: %s %s %s: %zu cases\n", tt->tier, tt->q4_gemv->name, tt->q4_gemm->name,
               tt->hadamard->name, cases);
        fflush(stdout);
        if (g_fail) return 1;
    }
    printf("ok\n");
    return 0;
}
