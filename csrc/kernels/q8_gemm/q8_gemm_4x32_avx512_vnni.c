/* Q8 GEMM, AVX-512 VNNI (VPDPBUSD on zmm). Main tile: 4 activation rows x 32 weight rows
 * per step (two zmm of 16 output rows).
 *
 * Lanes are output rows n. Per 32 weight rows and block of K (whole groups, <= 1 KiB) the
 * weights are transposed once into a stack block wt[d][n] (d = a dword, 4 bytes of K), so a
 * K-step is one aligned zmm per 16 rows, reused by every activation row; the activation side
 * is a broadcast dword. VPDPBUSD is u8 x s8, so the offset trick is used: a = x ^ 0x80 =
 * x + 128 (u8, prepared once per 4 rows), b = w (s8), and the exact int32
 * sum_k x*w = dpbusd - 128 * sum_k w, with 128 * sum_k w per (group, row) computed once when
 * the block is transposed. One int32 accumulator per (activation row, 16 weight rows) holds
 * a group's sums; then, in group order, acc += ((float)isum * ws[n][g]) * xs[m][g] with the
 * weight scales transposed like the weights: per lane the scalar kernel's two roundings and
 * add order, never fused, so the result is bit-exact.
 *
 * Calls with M <= 4 (forward.c's gemm_task passes gemm_m_tile = 4 rows per call) skip the
 * stack block: each 64-byte column block of 16 weight rows is transposed in registers and
 * used at once by the 2..4 activation rows (same arithmetic). M = 1, group sizes not a
 * multiple of 4 or above 1 KiB take the 16-rows-per-pass GEMV (q8_avx512_common.h) per row.
 * Tails: weight rows past n1 - 1 repeat row n1 - 1 (never read out of range) and are not
 * stored; 1..3 leftover activation rows and a last 16-row half are separate specialisations;
 * K tails inside a 64-byte column are masked loads. Stack use: about 56 KiB. */
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

typedef struct gm_scratch {
    _Alignas(64) int32_t wt[GM_KLEN / 4 * GM_NV * 16]; /* [d][v][16] weights, 4 bytes each */
    _Alignas(64) float wst[GM_GMAX * GM_NV * 16];      /* [g][v][16] weight scales */
    _Alignas(64) int32_t cw[GM_GMAX * GM_NV * 16];     /* [g][v][16] 128 * sum_k w */
    _Alignas(64) uint8_t xt[GM_MT][GM_KLEN];           /* x ^ 0x80 for the current rows */
} gm_scratch;

/* Transpose weight rows wr[0..16) bytes [kb0, kb0 + klen) into S->wt lane block v of nv,
 * add their 128 * sum_k w per group into S->cw, and their scales into S->wst. */
IFZ_INLINE void gm_prepare(gm_scratch *S, int v, const int8_t *const wr[16],
                           const float *const wsr[16], size_t kb0, size_t klen, size_t gb,
                           size_t gcnt, size_t L) {
    const size_t stride = (size_t)GM_NV * 16;
    for (size_t c = 0; c * 64 < klen; c++) {
        const __mmask64 lm = ifz_bytemask(klen - c * 64);
        __m512i r[16];
        for (int s = 0; s < 16; s++) r[s] = _mm512_maskz_loadu_epi8(lm, wr[s] + kb0 + c * 64);
        ifz_transpose16(r);
        const size_t left = (klen - c * 64) / 4;
        const size_t nd = left < 16 ? left : 16;
        for (size_t q = 0; q < nd; q++)
            _mm512_store_si512((void *)(S->wt + (c * 16 + q) * stride + (size_t)v * 16), r[q]);
    }
    const __m512i c80 = _mm512_set1_epi8((char)0x80);
    for (size_t g = 0; g < gcnt; g++) {
        __m512i a = _mm512_setzero_si512();
        for (size_t j = 0; j < L; j++)
            a = _mm512_dpbusd_epi32(a, c80, _mm512_load_si512(S->wt + (g * L + j) * stride + (size_t)v * 16));
        _mm512_store_si512((void *)(S->cw + g * stride + (size_t)v * 16), a);
    }
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

/* ---- small M (2 .. GF_MT rows): no weight block; each 64-byte column block of 16 weight
 * rows is transposed in registers and consumed at once by every activation row. ---- */
#define GF_MT 4       /* activation rows of the small-M path */
#define GF_KMAX 4096  /* its x ^ 0x80 stack copy: K <= GF_KMAX */
#ifndef GF_MMAX
#define GF_MMAX 4 /* calls with M <= GF_MMAX take this path */
#endif

/* One pass of 16 weight rows (lanes) against MT activation rows. xt: MT rows of x ^ 0x80
 * (stride GF_KMAX, padded to 64 bytes). Groups are L dwords: Lc in {1, 2, 4, 8} (constant,
 * several groups per chunk) or 0 for L = 16 * cpg (a group spans cpg chunks). */
IFZ_INLINE void gf_pass(const int MT, const int Lc, size_t cpg, float *out, size_t ldo,
                        const uint8_t (*xt)[GF_KMAX], const float *xs, const int8_t *const wr[16],
                        const float *const wsr[16], size_t nb, size_t nr, size_t K, size_t ng) {
    const __m512i c80 = _mm512_set1_epi8((char)0x80);
    _Alignas(64) float wst[16 * 16];
    __m512 acc[GF_MT];
    __m512i ai[GF_MT];
    __m512i cwa = _mm512_setzero_si512(); /* 128 * sum_k w of the open group, per row */
    for (int m = 0; m < MT; m++) {
        acc[m] = _mm512_setzero_ps();
        ai[m] = _mm512_setzero_si512();
    }
    for (size_t c = 0; c * 64 < K; c++) {
        /* the first group completed in this chunk; new block of transposed scales at 16s */
        const size_t gfirst = Lc ? c * (size_t)(16 / Lc) : (c + 1) / cpg - 1;
        const int closes = Lc ? 1 : (c + 1) % cpg == 0;
        if (closes && gfirst % 16 == 0 && gfirst < ng)
            ifz_scales_t16(wst, 16, wsr, gfirst, ng - gfirst < 16 ? ng - gfirst : 16);
        const __mmask64 lm = ifz_bytemask(K - c * 64);
        __m512i r[16];
        IFZ_UNROLL
        for (int s = 0; s < 16; s++) r[s] = _mm512_maskz_loadu_epi8(lm, wr[s] + c * 64);
        ifz_transpose16(r); /* r[q] lane s = dword 16c + q of row s */
        IFZ_UNROLL
        for (int q = 0; q < 16; q++) {
            cwa = _mm512_dpbusd_epi32(cwa, c80, r[q]);
            for (int m = 0; m < MT; m++) {
                int32_t xd;
                memcpy(&xd, xt[m] + c * 64 + (size_t)q * 4, 4);
                ai[m] = _mm512_dpbusd_epi32(ai[m], _mm512_set1_epi32(xd), r[q]);
            }
            if ((Lc && (q + 1) % Lc == 0) || (!Lc && q == 15 && closes)) {
                const size_t g = Lc ? gfirst + (size_t)(q / Lc) : gfirst;
                if (g < ng) {
                    const __m512 wsv = _mm512_load_ps(wst + (g % 16) * 16);
                    for (int m = 0; m < MT; m++) {
                        __m512 p = _mm512_cvtepi32_ps(_mm512_sub_epi32(ai[m], cwa));
                        p = _mm512_mul_ps(p, wsv);
                        p = _mm512_mul_ps(p, _mm512_set1_ps(xs[(size_t)m * ng + g]));
                        acc[m] = _mm512_add_ps(acc[m], p);
                    }
                }
                cwa = _mm512_setzero_si512();
                for (int m = 0; m < MT; m++) ai[m] = _mm512_setzero_si512();
            }
        }
    }
    const __mmask16 om = (__mmask16)(nr >= 16 ? 0xFFFF : ((1u << nr) - 1));
    for (int m = 0; m < MT; m++) _mm512_mask_storeu_ps(out + (size_t)m * ldo + nb, om, acc[m]);
}

IFZ_INLINE void gf_gemm(const int MT, float *out, size_t ldo, const int8_t *xq, const float *xs,
                        const int8_t *w, const float *ws, size_t n0, size_t n1, size_t K,
                        size_t gs) {
    const size_t ng = K / gs, L = gs / 4;
    _Alignas(64) uint8_t xt[GF_MT][GF_KMAX];
    const __m512i c80 = _mm512_set1_epi8((char)0x80);
    for (int m = 0; m < MT; m++)
        for (size_t c = 0; c < K; c += 64) {
            const __m512i v = _mm512_maskz_loadu_epi8(ifz_bytemask(K - c), xq + (size_t)m * K + c);
            _mm512_store_si512((void *)(xt[m] + c), _mm512_xor_si512(v, c80));
        }
    for (size_t nb = n0; nb < n1; nb += 16) {
        const size_t nr = n1 - nb < 16 ? n1 - nb : 16;
        const int8_t *wr[16];
        const float *wsr[16];
        for (size_t s = 0; s < 16; s++) {
            const size_t n = nb + (s < nr ? s : nr - 1);
            wr[s] = w + n * K;
            wsr[s] = ws + n * ng;
        }
        switch (L) {
        case 1: gf_pass(MT, 1, 0, out, ldo, xt, xs, wr, wsr, nb, nr, K, ng); break;
        case 2: gf_pass(MT, 2, 0, out, ldo, xt, xs, wr, wsr, nb, nr, K, ng); break;
        case 4: gf_pass(MT, 4, 0, out, ldo, xt, xs, wr, wsr, nb, nr, K, ng); break;
        case 8: gf_pass(MT, 8, 0, out, ldo, xt, xs, wr, wsr, nb, nr, K, ng); break;
        default: gf_pass(MT, 0, L / 16, out, ldo, xt, xs, wr, wsr, nb, nr, K, ng); break;
        }
    }
}

/* out[m * ldo + n] for m in [0, M), n in [n0, n1); see if_q8_gemm_fn. Bit-exact with
 * if_q8_gemm_1x1_scalar. */
void if_q8_gemm_4x32_avx512_vnni(float *out, size_t ldo, const int8_t *xq, const float *xs,
                                size_t M, const int8_t *w, const float *ws, size_t n0, size_t n1,
                                size_t K, size_t gs) {
    if (M == 0 || n1 <= n0) return;
    if (gs == 0 || K == 0 || M == 1 || gs % 4 != 0 || gs > GM_KLEN) {
        const size_t ngs = gs ? K / gs : 0;
        for (size_t m = 0; m < M; m++) {
            if (gs == 0 || K == 0 ||
                !ifz_gemv(out + m * ldo, xq + m * K, xs + m * ngs, w, ws, n0, n1, K, gs))
                if_q8_gemv_1x1_scalar(out + m * ldo, xq + m * K, xs + m * ngs, w, ws, n0, n1, K, gs);
        }
        return;
    }
    if (M <= GF_MMAX && K <= GF_KMAX && (gs <= 32 ? 32 % gs == 0 : gs % 64 == 0)) {
        for (size_t m0 = 0; m0 < M; m0 += GF_MT) {
            const size_t mt = M - m0 < GF_MT ? M - m0 : GF_MT;
            float *o = out + m0 * ldo;
            const int8_t *x = xq + m0 * K;
            const float *s = xs + m0 * (K / gs);
            switch (mt) {
            case 1: gf_gemm(1, o, ldo, x, s, w, ws, n0, n1, K, gs); break;
            case 2: gf_gemm(2, o, ldo, x, s, w, ws, n0, n1, K, gs); break;
            case 3: gf_gemm(3, o, ldo, x, s, w, ws, n0, n1, K, gs); break;
            default: gf_gemm(4, o, ldo, x, s, w, ws, n0, n1, K, gs); break;
            }
        }
        return;
    }
    const size_t ng = K / gs, L = gs / 4;
    size_t gpb = GM_KLEN / gs;
    if (gpb > GM_GMAX) gpb = GM_GMAX;
    const size_t nblk = (ng + gpb - 1) / gpb;
    gpb = (ng + nblk - 1) / nblk; /* even blocks */
    gm_scratch S;
    for (size_t nb = n0; nb < n1; nb += 16 * GM_NV) {
        const size_t nr = n1 - nb < 16 * GM_NV ? n1 - nb : 16 * GM_NV;
        const int nv = (int)((nr + 15) / 16);
        const int8_t *wr[GM_NV][16];
        const float *wsr[GM_NV][16];
        for (int v = 0; v < nv; v++)
            for (size_t s = 0; s < 16; s++) {
                size_t r = (size_t)v * 16 + s;
                const size_t n = nb + (r < nr ? r : nr - 1);
                wr[v][s] = w + n * K;
                wsr[v][s] = ws + n * ng;
            }
        for (size_t gb = 0; gb < ng; gb += gpb) {
            const size_t gcnt = ng - gb < gpb ? ng - gb : gpb;
            const size_t kb0 = gb * gs, klen = gcnt * gs;
            const int first = gb == 0;
            for (int v = 0; v < nv; v++) gm_prepare(&S, v, wr[v], wsr[v], kb0, klen, gb, gcnt, L);
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
    .run = if_q8_gemm_4x32_avx512_vnni};
