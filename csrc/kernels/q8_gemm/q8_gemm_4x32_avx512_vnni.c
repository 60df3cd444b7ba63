/* Q8 GEMM, AVX-512 VNNI (VPDPBUSD on zmm). Main tile: 4 activation rows x 32 weight rows
 * per step (two zmm of 16 output rows).
 *
 * Lanes are output rows n. The weights are packed once, at load (pack below): per tile of 32
 * weight rows, dword d (4 bytes of K) of the 32 rows is one 128-byte line wt[d][n], so a
 * K-step is one aligned zmm per 16 rows, reused by every activation row; the activation side
 * is a broadcast dword. VPDPBUSD is u8 x s8, so the offset trick is used: a = x ^ 0x80 =
 * x + 128 (u8, prepared once per 4 rows and K block), b = w (s8), and the exact int32
 * sum_k x*w = dpbusd - 128 * sum_k w, with 128 * sum_k w per (group, row) packed after the
 * tile's weights. One int32 accumulator per (activation row, 16 weight rows) holds a group's
 * sums; then, in group order, acc += ((float)isum * ws[n][g]) * xs[m][g] with the weight
 * scales transposed per K block (whole groups, <= 1 KiB of K): per lane the scalar kernel's
 * two roundings and add order, never fused, so the result is bit-exact.
 *
 * Group sizes not a multiple of 4 or above 1 KiB keep the row-major rows (pack copies them)
 * and take the AVX-512 GEMV (q8_gemv_1x1_avx512_vnni) per activation row. Tails: packed
 * rows past N are zero and not stored; 1..3 leftover activation rows and a last 16-row half
 * are separate specialisations; K tails inside a block are masked loads of the activations.
 * Stack use: about 12 KiB. Its efficiency against the tier's int8 peak probe: see
 * docs/performance.md. */
#include <string.h>

#include "../kernels.h"
#include "../q8_avx512_common.h"

#ifndef GM_MT
#define GM_MT 4 /* activation rows per step */
#endif
#ifndef GM_NV
#define GM_NV 2 /* zmm (16 weight rows each) per step */
#endif
#ifndef GM_KLEN
#define GM_KLEN (2048 / GM_NV / 64 * 64) /* max bytes of K per block (weights block <= 32 KiB) */
#endif
#define GM_GMAX 64   /* max groups per block */

/* The packed layout: per tile of GM_NV * 16 weight rows (rows past N zero), dword d of row
 * 16 v + s at int32 d * GM_NV * 16 + 16 v + s of the tile (K / 4 dwords), then 128 * sum(w)
 * of group g of that row at int32 (K / 4 + g) * GM_NV * 16 + 16 v + s. Only for
 * gm_tiled(gs); otherwise the row-major rows. */
IFZ_INLINE int gm_tiled(size_t gs) { return gs != 0 && gs % 4 == 0 && gs <= GM_KLEN; }

IFZ_INLINE size_t gm_tile_ints(size_t K, size_t gs) { return (K / 4 + K / gs) * GM_NV * 16; }

static size_t pack_size(size_t N, size_t K, size_t gs) {
    if (!gm_tiled(gs)) return N * K;
    return (N + GM_NV * 16 - 1) / (GM_NV * 16) * gm_tile_ints(K, gs) * sizeof(int32_t);
}

static void pack(int8_t *dst, const int8_t *w, size_t N, size_t K, size_t gs) {
    if (!gm_tiled(gs)) {
        memcpy(dst, w, N * K);
        return;
    }
    const size_t T = GM_NV * 16, ti = gm_tile_ints(K, gs);
    for (size_t n = 0; n < N; n += T) {
        int32_t *t = (int32_t *)(void *)dst + n / T * ti;
        for (size_t r = 0; r < T; r++) {
            const int8_t *row = n + r < N ? w + (n + r) * K : NULL;
            for (size_t d = 0; d < K / 4; d++) {
                int8_t b[4] = {0, 0, 0, 0};
                if (row) memcpy(b, row + 4 * d, 4);
                memcpy(t + d * T + r, b, 4);
            }
            for (size_t g = 0; g < K / gs; g++) {
                int32_t sum = 0;
                for (size_t k = 0; row && k < gs; k++) sum += row[g * gs + k];
                t[(K / 4 + g) * T + r] = 128 * sum;
            }
        }
    }
}

/* The inverse of pack for the N rows of src (a whole matrix, or one tile of up to 32 rows at
 * t * pack_size(32, K, gs)); the offset corrections are derived data and skipped. */
static void unpack(int8_t *w, const int8_t *src, size_t N, size_t K, size_t gs) {
    if (!gm_tiled(gs)) {
        memcpy(w, src, N * K);
        return;
    }
    const size_t T = GM_NV * 16, ti = gm_tile_ints(K, gs);
    for (size_t n = 0; n < N; n++) {
        const int32_t *t = (const int32_t *)(const void *)src + n / T * ti;
        for (size_t d = 0; d < K / 4; d++) memcpy(w + n * K + 4 * d, t + d * T + n % T, 4);
    }
}

/* Bytes ahead of the line being read that the M = 1 path prefetches (0: none). */
#ifndef GM_M1_PFD
#define GM_M1_PFD 9216
#endif

/* M = 1: each tile's K dwords streamed once, in order, with no K blocking and no
 * scratch (the blocked path's transposed scales and prepared activations pay off only when
 * several activation rows reuse them): per dword d, one VPDPBUSD per 16 rows against
 * x ^ 0x80 broadcast, the packed correction subtracted per group, ws over the 16 rows a
 * masked gather (stride K / gs); then acc += ((float)isum * ws) * xs in group order. */
/* Not declared decode_packed: against the row-major GEMV it measured 5-10 % slower (cold,
 * 1 thread, docs/performance.md), so the tier's decode keeps reading row-major rows. */
static void gm_decode(float *out, const int8_t *xq, const float *xs, const int32_t *w,
                      const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    const size_t T = GM_NV * 16, ng = K / gs, L = gs / 4, ti = gm_tile_ints(K, gs);
    const __m512i vidx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int)ng));
    for (size_t nb = n0; nb < n1; nb += T) {
        const size_t nr = n1 - nb < T ? n1 - nb : T;
        const __mmask16 m0 = nr >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nr) - 1);
        const __mmask16 m1 = nr >= 32 ? (__mmask16)0xFFFF
                             : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : (__mmask16)0;
        const int32_t *t = w + nb / T * ti, *cw = t + K / 4 * T;
        const float *ws0 = ws + nb * ng, *ws1 = ws + (nb + 16) * ng;
        /* the next tile's 32 rows of scales are 128 * ng bytes: two lines per group */
        const char *wsn = (const char *)(ws + (nb + T) * ng);
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        const int32_t *p = t;
        const uint32_t *x = (const uint32_t *)(const void *)xq;
        for (size_t g = 0; g < ng; g++) {
            if (GM_M1_PFD) {
                _mm_prefetch(wsn + 128 * g, _MM_HINT_T0);
                _mm_prefetch(wsn + 128 * g + 64, _MM_HINT_T0);
            }
            __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
            for (size_t j = 0; j < L; j++) {
                uint32_t xd;
                memcpy(&xd, x + j, 4);
                const __m512i xb = _mm512_set1_epi32((int)(xd ^ 0x80808080u));
                if (GM_M1_PFD) {
                    _mm_prefetch((const char *)p + GM_M1_PFD, _MM_HINT_T0);
                    _mm_prefetch((const char *)p + GM_M1_PFD + 64, _MM_HINT_T0);
                }
                s0 = _mm512_dpbusd_epi32(s0, xb, _mm512_load_si512(p));
                s1 = _mm512_dpbusd_epi32(s1, xb, _mm512_load_si512(p + 16));
                p += T;
            }
            x += L;
            const __m512 xsv = _mm512_set1_ps(xs[g]);
            const __m512 w0 = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m0, vidx, ws0 + g, 4);
            const __m512 p0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(s0, _mm512_load_si512(cw + g * T)));
            a0 = _mm512_add_ps(a0, _mm512_mul_ps(_mm512_mul_ps(p0, w0), xsv));
            if (m1) {
                const __m512 w1 =
                    _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m1, vidx, ws1 + g, 4);
                const __m512 p1 =
                    _mm512_cvtepi32_ps(_mm512_sub_epi32(s1, _mm512_load_si512(cw + g * T + 16)));
                a1 = _mm512_add_ps(a1, _mm512_mul_ps(_mm512_mul_ps(p1, w1), xsv));
            }
        }
        _mm512_mask_storeu_ps(out + nb, m0, a0);
        if (m1) _mm512_mask_storeu_ps(out + nb + 16, m1, a1);
    }
}

typedef struct gm_scratch {
    const int32_t *wt;                            /* the block's [d][v][16] packed weights */
    const int32_t *cw;                            /* the block's [g][v][16] 128 * sum_k w */
    _Alignas(64) float wst[GM_GMAX * GM_NV * 16]; /* [g][v][16] weight scales */
    _Alignas(64) uint8_t xt[GM_MT][GM_KLEN];      /* x ^ 0x80 for the current rows */
} gm_scratch;

/* Point S at K block [kb0, kb0 + klen) (groups [gb, gb + gcnt)) of packed tile t and transpose
 * the scales of its 16-row half v (wsr) into S->wst. */
IFZ_INLINE void gm_prepare(gm_scratch *S, int v, const int32_t *t, const float *const wsr[16],
                           size_t kb0, size_t gb, size_t gcnt, size_t K) {
    const size_t stride = (size_t)GM_NV * 16;
    S->wt = t + kb0 / 4 * stride;
    S->cw = t + (K / 4 + gb) * stride;
    for (size_t g = 0; g < gcnt; g += 16)
        ifz_scales_t16(S->wst + g * stride + (size_t)v * 16, stride, wsr, gb + g,
                       gcnt - g < 16 ? gcnt - g : 16);
}

/* MT activation rows from m0 against NV * 16 weight rows from nb (nr valid), one K block. */
IFZ_INLINE void gm_tile(gm_scratch *S, const int MT, const int NV, int v0, float *out, size_t ldo,
                        const int8_t *xq, const float *xs, size_t m0, size_t nb, size_t nr,
                        size_t K, size_t ng, size_t gb, size_t gcnt, size_t kb0, size_t klen,
                        size_t Lrt, const size_t Lc, int first) {
    const size_t L = Lc ? Lc : Lrt; /* Lc: compile-time group length in dwords, or 0 */
    const __m512i c80 = _mm512_set1_epi8((char)0x80);
    for (int i = 0; i < MT; i++)
        for (size_t c = 0; c < klen; c += 64) {
            const __m512i v = _mm512_maskz_loadu_epi8(ifz_bytemask(klen - c), xq + (m0 + i) * K + kb0 + c);
            _mm512_store_si512((void *)(S->xt[i] + c), _mm512_xor_si512(v, c80));
        }
    __mmask16 vm[GM_NV];
    for (int v = 0; v < NV; v++) {
        const size_t left = nr - (size_t)(v0 + v) * 16;
        vm[v] = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
    }
    __m512 acc[GM_MT][GM_NV];
    for (int i = 0; i < MT; i++)
        for (int v = 0; v < NV; v++)
            acc[i][v] = first ? _mm512_setzero_ps()
                              : _mm512_maskz_loadu_ps(vm[v], out + (m0 + i) * ldo + nb + (v0 + v) * 16);
    const size_t stride = (size_t)GM_NV * 16;
    for (size_t g = 0; g < gcnt; g++) {
        __m512i ai[GM_MT][GM_NV];
        for (int i = 0; i < MT; i++)
            for (int v = 0; v < NV; v++) ai[i][v] = _mm512_setzero_si512();
        const int32_t *wp = S->wt + g * L * stride + (size_t)v0 * 16;
        const size_t xo = g * L * 4;
        _Pragma("GCC unroll 16")
        for (size_t j = 0; j < L; j++) {
            __m512i wv[GM_NV];
            for (int v = 0; v < NV; v++) wv[v] = _mm512_load_si512(wp + j * stride + (size_t)v * 16);
            for (int i = 0; i < MT; i++) {
                int32_t xd;
                memcpy(&xd, S->xt[i] + xo + j * 4, 4);
                const __m512i xb = _mm512_set1_epi32(xd);
                for (int v = 0; v < NV; v++) ai[i][v] = _mm512_dpbusd_epi32(ai[i][v], xb, wv[v]);
            }
        }
        for (int v = 0; v < NV; v++) {
            const __m512i cw = _mm512_load_si512(S->cw + g * stride + (size_t)(v0 + v) * 16);
            const __m512 wsv = _mm512_load_ps(S->wst + g * stride + (size_t)(v0 + v) * 16);
            for (int i = 0; i < MT; i++) {
                __m512 p = _mm512_cvtepi32_ps(_mm512_sub_epi32(ai[i][v], cw));
                p = _mm512_mul_ps(p, wsv);
                p = _mm512_mul_ps(p, _mm512_set1_ps(xs[(m0 + i) * ng + gb + g]));
                acc[i][v] = _mm512_add_ps(acc[i][v], p);
            }
        }
    }
    for (int i = 0; i < MT; i++)
        for (int v = 0; v < NV; v++)
            _mm512_mask_storeu_ps(out + (m0 + i) * ldo + nb + (v0 + v) * 16, vm[v], acc[i][v]);
}

/* out[m * ldo + n] for m in [0, M), n in [n0, n1) (n0 a multiple of 32) from the weights pack
 * wrote to w; see if_q8_gemm_fn. Bit-exact with if_q8_gemm_1x1_scalar. */
void if_q8_gemm_4x32_avx512_vnni(float *out, size_t ldo, const int8_t *xq, const float *xs,
                                size_t M, const int8_t *w, const float *ws, size_t n0, size_t n1,
                                size_t K, size_t gs) {
    if (M == 0 || n1 <= n0) return;
    if (K == 0 || !gm_tiled(gs)) { /* w: the row-major rows */
        const size_t ngs = gs ? K / gs : 0;
        for (size_t m = 0; m < M; m++)
            if_q8_gemv_1x1_avx512_vnni(out + m * ldo, xq + m * K, xs + m * ngs, w, ws, n0, n1, K,
                                       gs);
        return;
    }
    if (M == 1) {
        gm_decode(out, xq, xs, (const int32_t *)(const void *)w, ws, n0, n1, K, gs);
        return;
    }
    const size_t ng = K / gs, L = gs / 4, ti = gm_tile_ints(K, gs);
    size_t gpb = GM_KLEN / gs;
    if (gpb > GM_GMAX) gpb = GM_GMAX;
    const size_t nblk = (ng + gpb - 1) / gpb;
    gpb = (ng + nblk - 1) / nblk; /* even blocks */
    gm_scratch S;
    /* K blocks outer, tiles inner: a block's activation rows (M x klen bytes) stay in L2 while
     * every tile reads them (tiles outer cycled all of K through L2 per tile); each output
     * still adds its groups in order (block by block, through out) */
    for (size_t gb = 0; gb < ng; gb += gpb) {
        const size_t gcnt = ng - gb < gpb ? ng - gb : gpb;
        const size_t kb0 = gb * gs, klen = gcnt * gs;
        const int first = gb == 0;
        for (size_t nb = n0; nb < n1; nb += 16 * GM_NV) {
            const size_t nr = n1 - nb < 16 * GM_NV ? n1 - nb : 16 * GM_NV;
            const int nv = (int)((nr + 15) / 16);
            const int32_t *t = (const int32_t *)(const void *)w + nb / (16 * GM_NV) * ti;
            const float *wsr[GM_NV][16];
            for (int v = 0; v < nv; v++)
                for (size_t s = 0; s < 16; s++) {
                    size_t r = (size_t)v * 16 + s;
                    wsr[v][s] = ws + (nb + (r < nr ? r : nr - 1)) * ng;
                }
            for (int v = 0; v < nv; v++) gm_prepare(&S, v, t, wsr[v], kb0, gb, gcnt, K);
            size_t m0 = 0;
#define GM_TILE(A, B, V0, LC) \
    gm_tile(&S, A, B, V0, out, ldo, xq, xs, m0, nb, nr, K, ng, gb, gcnt, kb0, klen, L, LC, first)
            for (; m0 + GM_MT <= M; m0 += GM_MT) {
                if (nv == GM_NV) {
                    switch (L) { /* the main tile, with the group length unrolled */
                    case 1: GM_TILE(GM_MT, GM_NV, 0, 1); break;
                    case 2: GM_TILE(GM_MT, GM_NV, 0, 2); break;
                    case 4: GM_TILE(GM_MT, GM_NV, 0, 4); break;
                    case 8: GM_TILE(GM_MT, GM_NV, 0, 8); break;
                    case 16: GM_TILE(GM_MT, GM_NV, 0, 16); break;
                    default: GM_TILE(GM_MT, GM_NV, 0, 0); break;
                    }
                } else {
                    for (int v = 0; v < nv; v++) GM_TILE(GM_MT, 1, v, 0);
                }
            }
            for (; m0 < M; m0++) { /* M tail: one activation row at a time */
                if (nv == GM_NV) {
                    GM_TILE(1, GM_NV, 0, 0);
                } else {
                    for (int v = 0; v < nv; v++) GM_TILE(1, 1, v, 0);
                }
            }
#undef GM_TILE
        }
    }
}

const if_q8_gemm_kernel if_k_q8_gemm_4x32_avx512_vnni = {.name = "q8_gemm_4x32_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = 4, .nr = 32,
    .pack_size = pack_size, .pack = pack, .run = if_q8_gemm_4x32_avx512_vnni, .unpack = unpack};
