/* Q8 GEMM, AVX2 (-mavx2 -mfma) and, compiled with -mavxvnni (q8_gemm_4x16_avx_vnni.c),
 * AVX-VNNI. Tile: 4 activation rows x 16 weight rows per step (8 ymm of int32 / float
 * accumulators, lane = output row). The weights are packed once, at load (pack below), into
 * 16-row tiles of 4-byte quads transposed across 8 rows, and each K block of a tile (up to
 * 2048 bytes / 128 groups) is reused by every activation row: per quad and activation row,
 * one broadcast of the activation's 4 bytes against the packed quad vector adds that quad of
 * 8 rows' dot products to the int32 lanes, so no horizontal reduction is needed.
 *   AVX2: sign trick, u8 = |x| (copied once per 4-row tile and block), VPSIGNB s8 = w * sign(x),
 *   VPMADDUBSW + VPMADDWD.
 *   AVX-VNNI: offset trick, u8 = x + 128 (x ^ 0x80, copied once per 4-row tile and block),
 *   s8 = w, one VPDPBUSD per product vector, and each group's int32 accumulator starts at
 *   -128 * sum(w) (packed at load after the tile's weights): exact integer arithmetic
 *   (VPDPBUSD wraps, never saturates); x = -128 is handled exactly by both.
 * Per group each lane then adds ((float)isum * ws) * xs in group order, exactly as
 * q8_gemv_1x1_scalar; float accumulators live in `out` between K blocks. M and N tails use
 * 3/2/1-row steps, 8-row halves and masked loads/stores. gs % 4 != 0 or a group above one K
 * block keeps the row-major rows (pack copies them) and runs the scalar GEMM / this ISA's GEMV
 * per row. */
#include "../q8_avx2_common.h"

#if defined(__AVXVNNI__)
#define Q8C_GEMM_RUN if_q8_gemm_4x16_avx_vnni
#define Q8C_GEMM_DESC if_k_q8_gemm_4x16_avx_vnni
#define Q8C_GEMM_NAME "q8_gemm_4x16_avx_vnni"
#define Q8C_GEMM_REQUIRES (IF_FEATS_AVX2 | IF_FEAT_AVX_VNNI)
#else
#define Q8C_GEMM_RUN if_q8_gemm_4x16_avx2
#define Q8C_GEMM_DESC if_k_q8_gemm_4x16_avx2
#define Q8C_GEMM_NAME "q8_gemm_4x16_avx2"
#define Q8C_GEMM_REQUIRES IF_FEATS_AVX2
#endif
#if defined(__AVXVNNI__)
#define Q8C_GEMV_RUN if_q8_gemv_1x8_avx_vnni /* the fallback for groups above one K block */
#else
#define Q8C_GEMV_RUN if_q8_gemv_1x8_avx2
#endif

/* K blocking: at most Q8C_KB bytes of K and Q8C_GB groups per block; the stack scratch
 * (q8c_pack: the block's transformed activation rows, Q8C_XB bytes, the transposed scales,
 * 64 * Q8C_GB bytes, and 256 bytes of float accumulators) is about 40 KiB with the defaults. */
#ifndef Q8C_KB
#define Q8C_KB 2048
#endif
#ifndef Q8C_GB
#define Q8C_GB 128
#endif
/* GEMM activation rows per microkernel step (the weight vector is reused this many times). */
#define Q8C_MT 4

#define Q8C_NT 16 /* weight rows per GEMM tile: Q8C_NT / 8 vectors */

/* The packed layout, written once at load (q8c_pack_weights): per tile of 16 weight rows
 * (rows past N are zero), quad q of rows 8v .. 8v+7 at tile + 64 q + 32 v (the rows' 4-byte
 * quads transposed, so one int32 lane is one output row), K / 4 quads; for AVX-VNNI then the
 * offset-trick corrections, -128 * sum(w) of group g of row 8v + r at int32 16 g + 8 v + r.
 * Groups the kernel does not tile (gs % 4 != 0, or a group above Q8C_KB bytes) keep the
 * row-major rows (a copy), which the fallbacks read. */
Q8C_INLINE int q8c_tiled(size_t gs) { return gs != 0 && gs % 4 == 0 && gs <= Q8C_KB; }

Q8C_INLINE size_t q8c_tile_bytes(size_t K, size_t gs) {
#if defined(__AVXVNNI__)
    return Q8C_NT * K + Q8C_NT * (K / gs) * sizeof(int32_t);
#else
    (void)gs;
    return Q8C_NT * K;
#endif
}

Q8C_INLINE size_t q8c_pack_size(size_t N, size_t K, size_t gs) {
    if (!q8c_tiled(gs)) return N * K;
    return (N + Q8C_NT - 1) / Q8C_NT * q8c_tile_bytes(K, gs);
}

Q8C_INLINE void q8c_pack_weights(int8_t *dst, const int8_t *w, size_t N, size_t K, size_t gs) {
    if (!q8c_tiled(gs)) {
        memcpy(dst, w, N * K);
        return;
    }
    const size_t tb = q8c_tile_bytes(K, gs);
    for (size_t n = 0; n < N; n += Q8C_NT) {
        int8_t *t = dst + n / Q8C_NT * tb;
        for (size_t r = 0; r < Q8C_NT; r++) {
            const int8_t *row = n + r < N ? w + (n + r) * K : NULL;
            for (size_t q = 0; q < K / 4; q++)
                for (size_t b = 0; b < 4; b++)
                    t[q * 64 + 32 * (r / 8) + 4 * (r % 8) + b] = row ? row[4 * q + b] : 0;
#if defined(__AVXVNNI__)
            int32_t *corr = (int32_t *)(void *)(t + Q8C_NT * K);
            for (size_t g = 0; g < K / gs; g++) {
                int32_t sum = 0;
                for (size_t k = 0; row && k < gs; k++) sum += row[g * gs + k];
                corr[g * Q8C_NT + r] = -128 * sum;
            }
#endif
        }
    }
}

/* The inverse of q8c_pack_weights (the VNNI corrections are derived data and skipped). */
Q8C_INLINE void q8c_unpack_weights(int8_t *w, const int8_t *src, size_t N, size_t K, size_t gs) {
    if (!q8c_tiled(gs)) {
        memcpy(w, src, N * K);
        return;
    }
    const size_t tb = q8c_tile_bytes(K, gs);
    for (size_t n = 0; n < N; n++) {
        const int8_t *t = src + n / Q8C_NT * tb;
        const size_t r = n % Q8C_NT;
        for (size_t q = 0; q < K / 4; q++)
            for (size_t b = 0; b < 4; b++)
                w[n * K + 4 * q + b] = t[q * 64 + 32 * (r / 8) + 4 * (r % 8) + b];
    }
}

/* Cache blocking of the GEMM when M > Q8C_MT (decode, M = 1, and M <= Q8C_MT take the
 * unblocked path): K blocks of about Q8C_KL1 bytes (whole groups, equal sizes), so a tile's
 * block of weights (16 * Q8C_KL1 bytes) stays in L1 beside the activation rows streaming past
 * it; activation rows in blocks of up to Q8C_MB, transformed once per block (into the scratch
 * q8c_pack.x, Q8C_XB bytes) and reused by every output tile, so they stay in L1/L2. 1536
 * rather than 1024: SmolLM2's w2 (K = 1536) then runs as one block, which is faster even with
 * a 32 KiB L1d (docs/performance.md). */
#ifndef Q8C_KL1
#define Q8C_KL1 1536
#endif
#ifndef Q8C_MB
#define Q8C_MB 32
#endif
#define Q8C_XB (Q8C_MB * Q8C_KL1 > 4 * Q8C_KB ? Q8C_MB * Q8C_KL1 : 4 * Q8C_KB)

typedef struct q8c_pack {
    const int8_t *w;  /* the block's packed quads: quad q of rows 8v..8v+7 at w + 64 q + 32 v */
#if defined(__AVXVNNI__)
    const int32_t *corr; /* the block's corrections: group g, row 8v + r at corr + 16 g + 8 v + r */
#endif
    _Alignas(32) float st[Q8C_NT * Q8C_GB];  /* scale of group g, rows: st + 16 g + 8 v */
    _Alignas(32) float acc[Q8C_MT * Q8C_NT]; /* float accumulators of the widest steps */
    _Alignas(32) int8_t x[Q8C_XB]; /* the block's activation rows: x ^ 0x80 (VNNI) or |x| (AVX2) */
} q8c_pack;

/* Point pk at groups [gb0, gb0 + gc) of packed tile t and transpose the scales of its 8 * V
 * rows (sr) for them. */
Q8C_INLINE void q8c_pack_block(q8c_pack *pk, const int8_t *t, const float *const sr[Q8C_NT],
                               size_t V, size_t gb0, size_t gc, size_t gs, size_t K) {
    pk->w = t + gb0 * gs / 4 * 64;
#if defined(__AVXVNNI__)
    pk->corr = (const int32_t *)(const void *)(t + Q8C_NT * K) + gb0 * Q8C_NT;
#else
    (void)K;
#endif
    for (size_t v = 0; v < V; v++) {
        for (size_t g = 0; g < gc; g += 8) {
            const size_t cnt = gc - g < 8 ? gc - g : 8;
            __m256 st[8];
            q8c_load_scales(st, sr + 8 * v, gb0 + g, cnt);
            for (size_t j = 0; j < cnt; j++) _mm256_store_ps(pk->st + (g + j) * 16 + 8 * v, st[j]);
        }
    }
}

/* Rows [0, rows) of xq (stride K), bytes [k0, k0 + kb), transformed for the dot product into u
 * (stride su, a multiple of 32 >= kb): |x| (AVX2) or x ^ 0x80 (VNNI). */
Q8C_INLINE void q8c_prep_rows(int8_t *u, size_t su, const int8_t *xq, size_t K, size_t k0,
                              size_t kb, size_t rows) {
    for (size_t i = 0; i < rows; i++) {
        for (size_t k = 0; k < kb; k += 32) {
            const size_t nq = (kb - k) / 4 < 8 ? (kb - k) / 4 : 8;
            const __m256i x = q8c_load_bytes(xq + i * K + k0 + k, nq);
#if defined(__AVXVNNI__)
            const __m256i t = _mm256_xor_si256(x, _mm256_set1_epi8((char)0x80));
#else
            const __m256i t = _mm256_abs_epi8(x);
#endif
            _mm256_store_si256((__m256i *)(u + i * su + k), t);
        }
    }
}

#if !defined(__AVXVNNI__)
/* The blocked path's scratch holds each block's activation rows twice: |x| at x + i * su and
 * x itself at x + Q8C_XOFF + i * su, so the whole-block loop below addresses both from one
 * pointer (a constant displacement) and needs no registers for xq's stride. */
#define Q8C_XOFF (Q8C_XB / 2)

/* The blocked path's 4 x 16 step over one K block, group loop and per-group float epilogue in
 * one asm block: per group the 8 int32 accumulators of q8c_group_4x16's loop (same
 * instructions), then per accumulator vector, in the scalar kernel's order,
 * acc = acc + (((float)isum * ws) * xs) with the transposed scales st (16 floats per group)
 * and xs of row i at xs[i * ng + g]; acc: 4 rows x 16 floats (row i at acc + 16 i), in memory.
 * In C, GCC kept the group loop's pointers and counters on the stack around the asm, reloading
 * them every group (docs/performance.md). u: |x| rows (stride su)
 * with x at u + Q8C_XOFF; w: the block's packed quads; qpg, gc >= 1. */
#define Q8C_ASM_EPI(XS, AA, AB, OFF)                                                         \
    "vbroadcastss " XS ", %%ymm10\n\t"                                                       \
    "vcvtdq2ps %%" AA ", %%" AA "\n\t"                                                       \
    "vcvtdq2ps %%" AB ", %%" AB "\n\t"                                                       \
    "vmulps (%[pst]), %%" AA ", %%" AA "\n\t"                                                \
    "vmulps 32(%[pst]), %%" AB ", %%" AB "\n\t"                                              \
    "vmulps %%ymm10, %%" AA ", %%" AA "\n\t"                                                 \
    "vmulps %%ymm10, %%" AB ", %%" AB "\n\t"                                                 \
    "vaddps " #OFF "(%[pacc]), %%" AA ", %%" AA "\n\t"                                       \
    "vmovaps %%" AA ", " #OFF "(%[pacc])\n\t"                                                \
    "vaddps " #OFF "+32(%[pacc]), %%" AB ", %%" AB "\n\t"                                    \
    "vmovaps %%" AB ", " #OFF "+32(%[pacc])\n\t"

/* Q8C_ASM_ROW's instructions with fixed registers (the operand count of one asm statement is
 * limited to 30): accumulators ymm0-7, weights ymm8/9, |x| ymm10, x ymm11, ymm12/13
 * temporaries, the 16-bit ones ymm14. */
#define Q8C_ASM_ROWR(UA, XA, AA, AB)                                                         \
    "vpbroadcastd " UA ", %%ymm10\n\t"                                                       \
    "vpbroadcastd " XA ", %%ymm11\n\t"                                                       \
    "vpsignb %%ymm11, %%ymm8, %%ymm12\n\t"                                                   \
    "vpsignb %%ymm11, %%ymm9, %%ymm13\n\t"                                                   \
    "vpmaddubsw %%ymm12, %%ymm10, %%ymm12\n\t"                                               \
    "vpmaddubsw %%ymm13, %%ymm10, %%ymm13\n\t"                                               \
    "vpmaddwd %%ymm14, %%ymm12, %%ymm12\n\t"                                                 \
    "vpmaddwd %%ymm14, %%ymm13, %%ymm13\n\t"                                                 \
    "vpaddd %%ymm12, %%" AA ", %%" AA "\n\t"                                                 \
    "vpaddd %%ymm13, %%" AB ", %%" AB "\n\t"

Q8C_INLINE void q8c_kblock_4x16(float *acc, const int8_t *w, const int8_t *u, size_t su,
                                const float *st, const float *xs, size_t ng, size_t qpg,
                                size_t gc) {
    const size_t su3 = 3 * su, ngb = ng * sizeof(float);
    size_t n;
    __asm__ volatile(
        "vpcmpeqw %%ymm14, %%ymm14, %%ymm14\n\t"
        "vpsrlw $15, %%ymm14, %%ymm14\n\t"
        "2:\n\t"
        "vpxor %%ymm0, %%ymm0, %%ymm0\n\t"
        "vpxor %%ymm1, %%ymm1, %%ymm1\n\t"
        "vpxor %%ymm2, %%ymm2, %%ymm2\n\t"
        "vpxor %%ymm3, %%ymm3, %%ymm3\n\t"
        "vpxor %%ymm4, %%ymm4, %%ymm4\n\t"
        "vpxor %%ymm5, %%ymm5, %%ymm5\n\t"
        "vpxor %%ymm6, %%ymm6, %%ymm6\n\t"
        "vpxor %%ymm7, %%ymm7, %%ymm7\n\t"
        "mov %[qpg], %[n]\n\t"
        "1:\n\t"
        "vmovdqa (%[pw]), %%ymm8\n\t"
        "vmovdqa 32(%[pw]), %%ymm9\n\t"
        Q8C_ASM_ROWR("(%[pu])", "%c[xo](%[pu])", "ymm0", "ymm1")
        Q8C_ASM_ROWR("(%[pu],%[su],1)", "%c[xo](%[pu],%[su],1)", "ymm2", "ymm3")
        Q8C_ASM_ROWR("(%[pu],%[su],2)", "%c[xo](%[pu],%[su],2)", "ymm4", "ymm5")
        Q8C_ASM_ROWR("(%[pu],%[su3],1)", "%c[xo](%[pu],%[su3],1)", "ymm6", "ymm7")
        "add $64, %[pw]\n\t"
        "add $4, %[pu]\n\t"
        "dec %[n]\n\t"
        "jnz 1b\n\t"
        Q8C_ASM_EPI("(%[pxs])", "ymm0", "ymm1", 0)
        Q8C_ASM_EPI("(%[pxs],%[ngb],1)", "ymm2", "ymm3", 64)
        "lea (%[pxs],%[ngb],2), %[n]\n\t"
        Q8C_ASM_EPI("(%[pxs],%[ngb],2)", "ymm4", "ymm5", 128)
        Q8C_ASM_EPI("(%[n],%[ngb],1)", "ymm6", "ymm7", 192)
        "add $64, %[pst]\n\t"
        "add $4, %[pxs]\n\t"
        "dec %[gc]\n\t"
        "jnz 2b\n\t"
        : [n] "=&r"(n), [pw] "+r"(w), [pu] "+r"(u), [pst] "+r"(st), [pxs] "+r"(xs),
          [gc] "+r"(gc)
        : [su] "r"(su), [su3] "r"(su3), [ngb] "r"(ngb), [pacc] "r"(acc), [qpg] "rm"(qpg),
          [xo] "i"(Q8C_XOFF)
        : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
          "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14");
}
#endif

/* Bytes ahead of the group being read that a decode step (M <= 4, each tile read once from
 * memory) prefetches: the packed tiles are contiguous, so this runs on into the next tiles.
 * AVX2: 2048, the fastest distance for SmolLM2 Q8 decode (docs/performance.md); AVX-VNNI:
 * 4096, its distance not tuned. */
#ifndef Q8C_GPFD
#if defined(__AVXVNNI__)
#define Q8C_GPFD 4096
#else
#define Q8C_GPFD 2048
#endif
#endif

/* MT activation rows x 8 * V packed rows (both compile-time) over one K block; u: the rows
 * transformed by q8c_prep_rows (stride su). */
Q8C_INLINE void q8c_gemm_mk(const size_t MT, const size_t V, q8c_pack *pk, float *out,
                            size_t ldo, const int8_t *xq, const float *xs, const int8_t *u,
                            size_t su, size_t K, size_t ng, size_t gb0, size_t gc, size_t gs,
                            int first, size_t nr, const int blk) {
    const size_t qpg = gs / 4, k0 = gb0 * gs;
    const size_t nv[2] = {nr < 8 ? nr : 8, nr > 8 ? nr - 8 : 0};
#if !defined(__AVXVNNI__)
    if (blk && MT == 4 && V == 2) { /* the blocked path's rows: u has x at u + Q8C_XOFF */
        for (size_t i = 0; i < 4; i++)
            for (size_t v = 0; v < 2; v++)
                _mm256_store_ps(pk->acc + i * Q8C_NT + 8 * v,
                                first ? _mm256_setzero_ps()
                                      : q8c_load_out(out + i * ldo + 8 * v, nv[v]));
        q8c_kblock_4x16(pk->acc, pk->w, u, su, pk->st, xs + gb0, ng, qpg, gc);
        for (size_t i = 0; i < 4; i++)
            for (size_t v = 0; v < 2; v++)
                q8c_store_out(out + i * ldo + 8 * v, _mm256_load_ps(pk->acc + i * Q8C_NT + 8 * v),
                              nv[v]);
        return;
    }
#else
    (void)blk;
#endif
    /* 2 * MT * V int32 and float accumulators and 5 operands fit the 16 ymm registers only
     * for MT * V < 6: the wider steps keep the float ones in pk->acc (one load and store per
     * group and vector) */
    const int fmem = MT * V >= 6;
    __m256 acc[Q8C_MT][2];
    for (size_t i = 0; i < MT; i++)
        for (size_t v = 0; v < V; v++) {
            acc[i][v] = first ? _mm256_setzero_ps() : q8c_load_out(out + i * ldo + 8 * v, nv[v]);
            if (fmem) _mm256_store_ps(pk->acc + i * Q8C_NT + 8 * v, acc[i][v]);
        }
    for (size_t g = 0; g < gc; g++) {
        const int8_t *wq = pk->w + g * qpg * 64;
        const size_t kg = g * gs;
        if (!blk) /* decode: the packed tiles are one stream, read once; run Q8C_GPFD ahead */
            for (size_t b = 0; b < qpg * 64; b += 64)
                q8c_prefetch(q8c_addr(wq, Q8C_GPFD + b));
        __m256i a[Q8C_MT][2];
#if !defined(__AVXVNNI__)
        if (MT == 4 && V == 2) {
            q8c_group_4x16(a, wq, u + kg, su, xq + k0 + kg, K, qpg);
        } else
#endif
        {
            for (size_t i = 0; i < MT; i++)
                for (size_t v = 0; v < V; v++) {
#if defined(__AVXVNNI__)
                    a[i][v] = _mm256_loadu_si256((const __m256i *)(pk->corr + g * 16 + 8 * v));
#else
                    a[i][v] = _mm256_setzero_si256();
#endif
                }
            _Pragma("GCC unroll 2") for (size_t q = 0; q < qpg; q++) {
                __m256i wv[2];
                for (size_t v = 0; v < V; v++)
                    wv[v] = _mm256_load_si256((const __m256i *)(wq + q * 64 + 32 * v));
                for (size_t i = 0; i < MT; i++) {
                    const __m256i bu = q8c_bcast4(u + i * su + kg + 4 * q);
#if defined(__AVXVNNI__)
                    for (size_t v = 0; v < V; v++) a[i][v] = q8c_dot(a[i][v], bu, wv[v]);
#else
                    const __m256i bx = q8c_bcast4(xq + i * K + k0 + kg + 4 * q);
                    for (size_t v = 0; v < V; v++)
                        a[i][v] = q8c_dot(a[i][v], bu, _mm256_sign_epi8(wv[v], bx));
#endif
                }
            }
        }
        for (size_t i = 0; i < MT; i++) {
            const __m256 xsg = _mm256_set1_ps(xs[i * ng + gb0 + g]);
            for (size_t v = 0; v < V; v++) {
                const __m256 sg = _mm256_load_ps(pk->st + g * 16 + 8 * v);
                const __m256 p = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(a[i][v]), sg), xsg);
                if (fmem) {
                    float *am = pk->acc + i * Q8C_NT + 8 * v;
                    _mm256_store_ps(am, _mm256_add_ps(_mm256_load_ps(am), p));
                } else {
                    acc[i][v] = _mm256_add_ps(acc[i][v], p);
                }
            }
        }
        /* pk->acc stays in memory (no store motion into registers across the group loop) */
        if (fmem) __asm__("" : "+m"(pk->acc));
    }
    for (size_t i = 0; i < MT; i++)
        for (size_t v = 0; v < V; v++)
            q8c_store_out(out + i * ldo + 8 * v,
                          fmem ? _mm256_load_ps(pk->acc + i * Q8C_NT + 8 * v) : acc[i][v], nv[v]);
}

/* Activation rows [0, M) against one packed block of 8 * V weight rows. u == NULL: each step
 * transforms its own rows into pk->x first (the unblocked path); else u holds all M rows
 * transformed (stride su). */
Q8C_INLINE void q8c_gemm_block(const size_t V, q8c_pack *pk, float *out, size_t ldo,
                               const int8_t *xq, const float *xs, const int8_t *u, size_t su,
                               size_t M, size_t K, size_t ng, size_t gb0, size_t gc, size_t gs,
                               size_t nr) {
    const int first = gb0 == 0;
    const int own = u == NULL, blk = !own;
    if (own) su = Q8C_KB;
    size_t m = 0;
    for (; m + Q8C_MT <= M; m += Q8C_MT) {
        if (own) q8c_prep_rows(pk->x, su, xq + m * K, K, gb0 * gs, gc * gs, Q8C_MT);
        q8c_gemm_mk(Q8C_MT, V, pk, out + m * ldo, ldo, xq + m * K, xs + m * ng,
                    own ? pk->x : u + m * su, su, K, ng, gb0, gc, gs, first, nr, blk);
    }
    if (m == M) return;
    float *o = out + m * ldo;
    const int8_t *x = xq + m * K;
    const float *s = xs + m * ng;
    if (own) q8c_prep_rows(pk->x, su, x, K, gb0 * gs, gc * gs, M - m);
    const int8_t *um = own ? pk->x : u + m * su;
    switch (M - m) {
    case 3: q8c_gemm_mk(3, V, pk, o, ldo, x, s, um, su, K, ng, gb0, gc, gs, first, nr,
                          blk);
        break;
    case 2: q8c_gemm_mk(2, V, pk, o, ldo, x, s, um, su, K, ng, gb0, gc, gs, first, nr,
                          blk);
        break;
    case 1: q8c_gemm_mk(1, V, pk, o, ldo, x, s, um, su, K, ng, gb0, gc, gs, first, nr,
                          blk);
        break;
    default: break;
    }
}

/* Output rows [n0, n1) of activation rows [0, M) over groups [gb0, gb0 + gc) (u as in
 * q8c_gemm_block). */
Q8C_INLINE void q8c_gemm_tiles(q8c_pack *pk, float *out, size_t ldo, const int8_t *xq,
                               const float *xs, const int8_t *u, size_t su, size_t M,
                               const int8_t *wp, const float *ws, size_t n0, size_t n1, size_t K,
                               size_t gs, size_t gb0, size_t gc) {
    const size_t ng = K / gs, tb = q8c_tile_bytes(K, gs);
    for (size_t n = n0; n < n1; n += Q8C_NT) {
        const size_t nr = n1 - n < Q8C_NT ? n1 - n : Q8C_NT;
        const int8_t *t = wp + n / Q8C_NT * tb, *wr[Q8C_NT];
        const float *sr[Q8C_NT];
        q8c_rows(wr, sr, wp, ws, n, nr < 8 ? nr : 8, 0, ng); /* scales only */
        if (nr > 8) q8c_rows(wr + 8, sr + 8, wp, ws, n + 8, nr - 8, 0, ng);
        if (nr > 8) {
            q8c_pack_block(pk, t, sr, 2, gb0, gc, gs, K);
            q8c_gemm_block(2, pk, out + n, ldo, xq, xs, u, su, M, K, ng, gb0, gc, gs, nr);
        } else {
            q8c_pack_block(pk, t, sr, 1, gb0, gc, gs, K);
            q8c_gemm_block(1, pk, out + n, ldo, xq, xs, u, su, M, K, ng, gb0, gc, gs, nr);
        }
    }
}

/* q8c_gemm for M <= Q8C_MT (decode, M = 1): output tile outer, K blocks inner, each step
 * transforming its own rows. A function of its own: inlined into the blocked path's function,
 * the same loops ran slower at M = 1 (docs/performance.md). */
static __attribute__((noinline)) void q8c_gemm_small(float *out, size_t ldo, const int8_t *xq,
                                                     const float *xs, size_t M,
                                                     const int8_t *wp, const float *ws,
                                                     size_t n0, size_t n1, size_t K,
                                                     size_t gs) {
    const size_t ng = K / gs;
    size_t gpb = Q8C_KB / gs;
    if (gpb > Q8C_GB) gpb = Q8C_GB;
    q8c_pack pk;
    for (size_t n = n0; n < n1; n += Q8C_NT) {
        const size_t ne = n1 - n < Q8C_NT ? n1 : n + Q8C_NT;
        for (size_t gb0 = 0; gb0 < ng; gb0 += gpb)
            q8c_gemm_tiles(&pk, out, ldo, xq, xs, NULL, 0, M, wp, ws, n, ne, K, gs, gb0,
                           ng - gb0 < gpb ? ng - gb0 : gpb);
    }
}

/* out[m * ldo + n] for m in [0, M), n in [n0, n1) (n0 a multiple of Q8C_NT) from the weights
 * q8c_pack_weights wrote to wp; q8c_tiled(gs). */
Q8C_INLINE void q8c_gemm(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                         const int8_t *wp, const float *ws, size_t n0, size_t n1, size_t K,
                         size_t gs) {
    if (M <= Q8C_MT) {
        q8c_gemm_small(out, ldo, xq, xs, M, wp, ws, n0, n1, K, gs);
        return;
    }
    const size_t ng = K / gs;
    size_t gpb = Q8C_KB / gs;
    if (gpb > Q8C_GB) gpb = Q8C_GB;
    q8c_pack pk;
    if (K > Q8C_KL1) { /* equal K blocks of about Q8C_KL1 bytes */
        const size_t nb = (K + Q8C_KL1 - 1) / Q8C_KL1, g1 = (ng + nb - 1) / nb;
        if (g1 < gpb) gpb = g1;
    }
    for (size_t gb0 = 0; gb0 < ng; gb0 += gpb) {
        const size_t gc = ng - gb0 < gpb ? ng - gb0 : gpb;
        const size_t su = (gc * gs + 31) / 32 * 32;
#if defined(__AVXVNNI__)
        size_t mb = Q8C_XB / su / Q8C_MT * Q8C_MT; /* >= 4 rows: su <= Q8C_KB */
#else
        size_t mb = Q8C_XOFF / su / Q8C_MT * Q8C_MT; /* >= 4 rows: su <= Q8C_KB */
#endif
        if (mb > Q8C_MB) mb = Q8C_MB;
        for (size_t m = 0; m < M; m += mb) {
            const size_t rows = M - m < mb ? M - m : mb;
            q8c_prep_rows(pk.x, su, xq + m * K, K, gb0 * gs, gc * gs, rows);
#if !defined(__AVXVNNI__)
            for (size_t i = 0; i < rows; i++) /* x beside |x| (q8c_kblock_4x16) */
                memcpy(pk.x + Q8C_XOFF + i * su, xq + (m + i) * K + gb0 * gs, gc * gs);
#endif
            q8c_gemm_tiles(&pk, out + m * ldo, ldo, xq + m * K, xs + m * ng, pk.x, su, rows,
                           wp, ws, n0, n1, K, gs, gb0, gc);
        }
    }
}

static size_t pack_size(size_t N, size_t K, size_t gs) { return q8c_pack_size(N, K, gs); }

static void pack(int8_t *dst, const int8_t *w, size_t N, size_t K, size_t gs) {
    q8c_pack_weights(dst, w, N, K, gs);
}

static void unpack(int8_t *w, const int8_t *src, size_t N, size_t K, size_t gs) {
    q8c_unpack_weights(w, src, N, K, gs);
}

/* w: what pack wrote; n0 a multiple of 16. */
void Q8C_GEMM_RUN(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                  const int8_t *w, const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    if (q8c_tiled(gs)) {
        q8c_gemm(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs);
    } else if (gs % 4 == 0) { /* groups above one K block: w is row-major, GEMV per row */
        for (size_t m = 0; m < M; m++)
            Q8C_GEMV_RUN(out + m * ldo, xq + m * K, xs + m * (K / gs), w, ws, n0, n1, K, gs);
    } else {
        if_q8_gemm_1x1_scalar(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs);
    }
}

const if_q8_gemm_kernel Q8C_GEMM_DESC = {.name = Q8C_GEMM_NAME, .requires = Q8C_GEMM_REQUIRES,
    .mr = 4, .nr = 16, .pack_size = pack_size, .pack = pack, .run = Q8C_GEMM_RUN,
    .decode_packed = 1, .unpack = unpack};
