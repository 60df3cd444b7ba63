/* Q8 GEMV, AVX-512 VNNI (VPDPBUSD on zmm). Tile: 1 activation row x 1 weight row per step,
 * 16 groups of that row per zmm (lanes = groups). The avx512_vnni and amx tiers decode with it,
 * and the AVX-512 GEMM runs it per row for group sizes it does not tile.
 *
 * Decode streams the weights from DRAM once per token, so the rows are read one after another
 * in memory order (a single sequential stream, software-prefetched ~9 KiB ahead). Per 64-byte
 * chunk of a row: VPDPBUSD(u8 = w ^ 0x80, s8 = x), i.e. sum (w + 128) x; the 128 * sum x of
 * each group depends only on x and is subtracted once per group (computed once per call), so
 * rows need no sign handling. A short add/shuffle network per row turns the chunks of 16
 * groups into one vector of 16 int32 group sums; then, in that row layout,
 * p = ((float)isum * ws) * xs (two separate roundings, as in the scalar kernel) and the row's
 * float accumulator adds p's lanes one at a time in group order, starting from 0.0f: the
 * scalar kernel's arithmetic exactly, so the output bits are equal. Group sizes 4, 8, 16, 32
 * have dedicated networks, other sizes >= 16 read each group as byte-masked chunks; smaller
 * sizes (1, 2, 3, 5 .. 15 except 4, 8) go to the scalar kernel. */
#include "../kernels.h"
#include "../q8_avx512_common.h"

/* ---------------------------------------------------------------------------------------
 * GEMV. Decode streams every weight once per token from DRAM, so the access pattern decides
 * the speed. The rows are read one after another in memory order (one sequential stream,
 * plus its scales), with a software prefetch of the same bytes IFZ_PF_DIST bytes (whole rows)
 * ahead and of the first rows at the start of a call. Reading 16 rows in 64-byte columns
 * (16 interleaved streams) is slower from DRAM, and so is the row stream without the software
 * prefetch (docs/performance.md).
 *
 * Per weight row, K is cut into segments of 16 groups (16 * gs bytes):
 *  - integers, offset trick: VPDPBUSD(u8 = w ^ 0x80 = w + 128, s8 = x) per 64-byte chunk gives
 *    sum (w + 128) x = sum w x + 128 sum x; 128 sum x per group depends on x only, so it is
 *    computed once per call (cx, by the same code with u8 = 0x80) and subtracted: no sign
 *    handling per row. int32 lanes may wrap on the way, the result is exact whenever the
 *    true sum fits (|isum| <= gs * 127 * 127, i.e. any gs < 2^17).
 *  - an add/shuffle network (ifz_net_small, ifz_net16) sums the dwords of each group: one
 *    vector per row and segment with lane j = the int32 sum of group j (a VPERMD restores
 *    group order where the network leaves it permuted);
 *  - both float multiplies in that layout, where ws[n][g .. g+16) and xs[g .. g+16) are plain
 *    vector loads (no transposed copy of the scales): p = ((float)isum * ws) * xs, per lane
 *    the scalar kernel's two roundings, never fused;
 *  - the row's accumulator (lane 0 of an xmm, starting at 0.0f) adds p's lanes ONE AT A TIME
 *    in group order (ADDSS): the scalar kernel's add chain, bit for bit. This serial chain
 *    costs ~16 adds per 16 groups, but it also paces the loop: the out-of-order window then
 *    holds only a few rows, and the DRAM stream runs faster than with the same products summed
 *    16 rows at a time through a 16x16 transpose, which runs ahead in bursts
 *    (docs/performance.md).
 * gs = 4, 8, 16, 32: L = gs / 4 chunks per segment, a dedicated network; the last segment of
 * a row may hold fewer chunks (a compile-time case per chunk count, no padding). Other
 * gs >= 16 (any, even not a multiple of 4): each group is read as ceil(gs / 64) byte-masked
 * chunks accumulated by VPDPBUSD, then a 16-group network. Loads past a row's groups are
 * masked; rows >= n1 are never read or prefetched. cx and xs vectors are kept for up to
 * IFZ_SEGS segments; longer rows are processed in passes of IFZ_SEGS segments, the
 * accumulators going through out[] in between (a float store and reload: exact).
 * ------------------------------------------------------------------------------------- */
#ifndef IFZ_SEGS
#define IFZ_SEGS 32 /* segments per pass (their cx and xs vectors: 128 bytes each) */
#endif
#ifndef IFZ_PF_DIST
#define IFZ_PF_DIST 9216 /* software prefetch distance in bytes of the weight stream (0: off) */
#endif
#ifndef IFZ_PF_HINT
#define IFZ_PF_HINT _MM_HINT_T0
#endif

/* L chunk results d[0 .. L) of one segment (d[c] dword i = 4 products of bytes 64c + 4i .. +3,
 * group (16c + i) / L) -> lane j = sum of group j. L in {1, 2, 4, 8}; only the first nch
 * chunks exist (1 <= nch <= L, constants): missing inputs are replaced by copies of present
 * ones, which only changes lanes of groups that do not exist. */
IFZ_INLINE __m512i ifz_net_small(const __m512i d[8], const int L, const int nch) {
#define IFZ_D(c) d[(c) < nch ? (c) : 0]
    if (L == 1) return d[0];
    if (L == 2) { /* ifz_hP: block b = [g 2b, g 2b+1, g 8+2b, g 9+2b] */
        const __m512i r = ifz_hP(d[0], IFZ_D(1));
        return _mm512_permutexvar_epi32(
            _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15), r);
    }
    const __m512i u0 = ifz_hA(d[0], IFZ_D(1));
    const __m512i u1 = nch > 2 ? ifz_hA(IFZ_D(2), IFZ_D(3)) : u0;
    const __m512i w0 = ifz_hA(u0, u1); /* block b = [d0, d2, d1, d3 summed over block b] */
    if (L == 4) /* block b = [g b, g 8+b, g 4+b, g 12+b] */
        return _mm512_permutexvar_epi32(
            _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 1, 5, 9, 13, 3, 7, 11, 15), w0);
    __m512i w1 = w0;
    if (nch > 4) {
        const __m512i u2 = ifz_hA(IFZ_D(4), IFZ_D(5));
        const __m512i u3 = nch > 6 ? ifz_hA(IFZ_D(6), IFZ_D(7)) : u2;
        w1 = ifz_hA(u2, u3);
    }
    /* L == 8, after ifz_hC: blocks [g0 g4 g2 g6 | g1 g5 g3 g7 | g8 g12 g10 g14 | g9 g13 g11 g15] */
    return _mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7, 8, 12, 10, 14, 9, 13, 11, 15), ifz_hC(w0, w1));
#undef IFZ_D
}

/* 16 vectors of 16 partial sums (one group each) -> lane j = sum of v[j]. */
IFZ_INLINE __m512i ifz_net16(const __m512i v[16]) {
    __m512i t[8];
    IFZ_UNROLL
    for (int k = 0; k < 8; k++) t[k] = ifz_hA(v[2 * k], v[2 * k + 1]);
    IFZ_UNROLL
    for (int k = 0; k < 4; k++) t[k] = ifz_hB(t[2 * k], t[2 * k + 1]);
    /* t[k] lane (block, q) = group 4k + q, summed within the block */
    t[0] = ifz_hC(t[0], t[1]);
    t[1] = ifz_hC(t[2], t[3]);
    return ifz_hC(t[0], t[1]);
}

/* Lane j = sum over group g0 + j of u8(a) * s8(x) for one row, a = w ^ 0x80 (xor80 = 1) or the
 * constant 0x80 (xor80 = 0, w unused: 128 * sum x, the offset correction). Lanes of groups
 * >= ng: any value. L = gs / 4 in {1, 2, 4, 8}: the segment's first nch chunks (constant,
 * 1 .. L) hold data, the last of them tb bytes (masked loads if tb < 64). L = 0 (any gs):
 * nch = 16 if all 16 groups exist, 0 if only those before ng. Reads no byte past the groups. */
IFZ_INLINE __m512i ifz_row_isums(const int8_t *wrow, const int8_t *x, size_t g0, size_t ng,
                                 size_t gs, const int L, const int nch, size_t tb,
                                 const int xor80) {
    const __m512i c80 = _mm512_set1_epi8((char)0x80);
    if (L) {
        const size_t k0 = g0 * gs;
        __m512i d[8];
        IFZ_UNROLL
        for (int c = 0; c < nch; c++) {
            const size_t o = k0 + (size_t)c * 64;
            if (c < nch - 1 || tb == 64) {
                const __m512i a = xor80 ? _mm512_xor_si512(_mm512_loadu_si512(wrow + o), c80) : c80;
                d[c] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), a, _mm512_loadu_si512(x + o));
            } else {
                const __mmask64 m = ifz_bytemask(tb);
                const __m512i a = xor80 ? _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, wrow + o), c80) : c80;
                d[c] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), a, _mm512_maskz_loadu_epi8(m, x + o));
            }
        }
        return ifz_net_small(d, L, nch);
    }
    __m512i v[16];
    IFZ_UNROLL
    for (int q = 0; q < 16; q++) {
        const size_t o = (g0 + (size_t)q) * gs;
        v[q] = _mm512_setzero_si512();
        if (!nch && g0 + (size_t)q >= ng) continue;
        for (size_t k = 0; k < gs; k += 64) {
            const __mmask64 m = ifz_bytemask(gs - k);
            const __m512i a = xor80 ? _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, wrow + o + k), c80) : c80;
            v[q] = _mm512_dpbusd_epi32(v[q], a, _mm512_maskz_loadu_epi8(m, x + o + k));
        }
    }
    return ifz_net16(v);
}

/* Shape of the segment starting at group g0: for L > 0, the chunks holding data (1 .. L)
 * and the bytes in the last one; for L = 0, 16 if whole, else 0 (tb unused). */
IFZ_INLINE int ifz_seg_chunks(size_t g0, size_t ng, size_t gs, const int L, size_t *tb) {
    const size_t bytes = (ng - g0 < 16 ? ng - g0 : 16) * gs;
    if (!L) {
        *tb = 64;
        return ng - g0 >= 16 ? 16 : 0;
    }
    const size_t nch = (bytes + 63) / 64;
    *tb = bytes - (nch - 1) * 64;
    return (int)nch;
}

/* cx of a segment that is not whole: 128 * sum x of its groups (lane = group), computed once
 * per call with the full network and zero chunks in place of the missing ones (the lanes of
 * the existing groups are the same as with the row's own case). */
IFZ_INLINE __m512i ifz_seg_cx(const int8_t *x, size_t g0, size_t ng, size_t gs, const int L) {
    if (!L) return ifz_row_isums(x, x, g0, ng, gs, 0, 0, 64, 0);
    const __m512i c80 = _mm512_set1_epi8((char)0x80);
    const size_t k0 = g0 * gs, ke = ng * gs;
    __m512i d[8];
    for (int c = 0; c < 8; c++) {
        const size_t o = k0 + (size_t)c * 64;
        d[c] = c < L && o < ke ? _mm512_dpbusd_epi32(_mm512_setzero_si512(), c80,
                                                     _mm512_maskz_loadu_epi8(ifz_bytemask(ke - o), x + o))
                               : _mm512_setzero_si512();
    }
    return ifz_net_small(d, L, L);
}

/* p = ((float)(isum - cx) * ws[g0 .. g0+16)) * xs[g0 .. g0+16) of one row (lanes = groups);
 * wm: the groups that exist (all ones for a whole segment). */
IFZ_INLINE __m512 ifz_row_products(const int8_t *wrow, const float *wsrow, const int8_t *x,
                                   __m512 xsv, __m512i cx, size_t g0, size_t ng, size_t gs,
                                   const int L, const int nch, size_t tb, __mmask16 wm) {
    const __m512i is = _mm512_sub_epi32(ifz_row_isums(wrow, x, g0, ng, gs, L, nch, tb, 1), cx);
    const __m512 wsv = wm == 0xFFFF ? _mm512_loadu_ps(wsrow + g0) : _mm512_maskz_loadu_ps(wm, wsrow + g0);
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(is), wsv), xsv);
}

/* acc (lane 0) + p[0] + p[1] + ... + p[cnt - 1], one add at a time in lane (= group) order:
 * the scalar kernel's float add chain. C (constant) >= cnt; C == 16: cnt = 16. */
IFZ_INLINE __m128 ifz_add_lanes(__m128 acc, __m512 p, size_t cnt, const int C) {
    IFZ_UNROLL
    for (int b = 0; b < C / 4 + (C % 4 != 0); b++) {
        if (C != 16 && (size_t)b * 4 >= cnt) break;
#ifdef __clang__
        /* clang wants the lane index as a literal before unrolling (b < 4: C <= 16) */
        const __m128 q = b == 0   ? _mm512_castps512_ps128(p)
                         : b == 1 ? _mm512_extractf32x4_ps(p, 1)
                         : b == 2 ? _mm512_extractf32x4_ps(p, 2)
                                  : _mm512_extractf32x4_ps(p, 3);
#else
        const __m128 q = b == 0 ? _mm512_castps512_ps128(p)
                                : _mm512_extractf32x4_ps(p, b & 3);
#endif
        const __m128 l[4] = {q, _mm_movehdup_ps(q), _mm_movehl_ps(q, q), _mm_shuffle_ps(q, q, 3)};
        IFZ_UNROLL
        for (int i = 0; i < 4; i++)
            if (C == 16 || (size_t)(b * 4 + i) < cnt) acc = _mm_add_ss(acc, l[i]);
    }
    return acc;
}

/* Software prefetch of n (constant) consecutive 64-byte lines from p. */
IFZ_INLINE void ifz_prefetch_lines(const char *p, const int n) {
    for (int c = 0; c < n; c++) _mm_prefetch(p + (size_t)c * 64, IFZ_PF_HINT);
}

/* The partial last segment of a row (TN chunks, constant; L = 0: TN = 1): prefetch its bytes
 * at pw (and its scales at ps), then acc += its groups in order. */
IFZ_INLINE __m128 ifz_row_tail(__m128 acc, const int8_t *wrow, const float *wsrow, const int8_t *x,
                               __m512 xsv, __m512i cx, const char *pw, const char *ps, size_t gt,
                               size_t ng, size_t gs, size_t cnt, __mmask16 tm, size_t tb,
                               const int L, const int TN) {
    if (IFZ_PF_DIST) {
        if (L)
            ifz_prefetch_lines(pw + gt * gs, TN);
        else
            for (size_t k = gt * gs; k < ng * gs; k += 64) _mm_prefetch(pw + k, IFZ_PF_HINT);
        _mm_prefetch(ps + gt * 4, IFZ_PF_HINT);
    }
    const __m512 p = ifz_row_products(wrow, wsrow, x, xsv, cx, gt, ng, gs, L, L ? TN : 0, tb, tm);
    /* at most 16 * TN / L groups (< 16) in the partial segment */
    return ifz_add_lanes(acc, p, cnt, L ? (16 * TN / L < 16 ? 16 * TN / L : 15) : 15);
}

/* Rows [n0, n1) x the pass of segments [s0, s0 + ns): nwhole whole segments, then, if tn != 0,
 * one partial segment (tn chunks, the last with tb bytes; for L = 0, tn = 1). */
IFZ_INLINE void ifz_gemv_pass(float *out, const int8_t *xq, const __m512i *cx, const __m512 *xsv,
                              const int8_t *w, const float *ws, size_t n0, size_t n1, size_t K,
                              size_t gs, size_t s0, size_t ns, size_t pfrows, const int L,
                              int tn, size_t tb) {
    const size_t ng = K / gs, g00 = s0 * 16;
    const size_t nwhole = tn ? ns - 1 : ns;
    const size_t segb = 16 * gs, gt = g00 + nwhole * 16, cnt = ng - gt < 16 ? ng - gt : 16;
    const __mmask16 tm = (__mmask16)(cnt >= 16 ? 0xFFFF : (1u << cnt) - 1);
    for (size_t n = n0; n < n1; n++) {
        const int8_t *wrow = w + n * K;
        const float *wsrow = ws + n * ng;
        /* prefetch the same bytes pfrows rows ahead; without such a row, this row (no-op) */
        const size_t pfo = n + pfrows < n1 ? pfrows : 0;
        const char *pw = (const char *)(wrow + pfo * K), *ps = (const char *)(wsrow + pfo * ng);
        __m128 acc = s0 == 0 ? _mm_setzero_ps() : _mm_load_ss(out + n);
        for (size_t j = 0; j < nwhole; j++) {
            const size_t g0 = g00 + j * 16;
            if (IFZ_PF_DIST) {
                if (L)
                    ifz_prefetch_lines(pw + g0 * gs, L);
                else
                    for (size_t k = 0; k < segb; k += 64) _mm_prefetch(pw + g0 * gs + k, IFZ_PF_HINT);
                _mm_prefetch(ps + g0 * 4, IFZ_PF_HINT);
            }
            acc = ifz_add_lanes(acc, ifz_row_products(wrow, wsrow, xq, xsv[j], cx[j], g0, ng, gs, L,
                                                      L ? L : 16, 64, 0xFFFF), 16, 16);
        }
        if (tn) { /* the partial segment: a compile-time case per chunk count */
#define IFZ_T(N) acc = ifz_row_tail(acc, wrow, wsrow, xq, xsv[nwhole], cx[nwhole], pw, ps, gt, ng, \
                                    gs, cnt, tm, tb, L, (N) <= L ? (N) : L)
            if (!L) {
                acc = ifz_row_tail(acc, wrow, wsrow, xq, xsv[nwhole], cx[nwhole], pw, ps, gt, ng, gs,
                                   cnt, tm, tb, 0, 1);
            } else {
                switch (tn) {
                case 1: IFZ_T(1); break;
                case 2: IFZ_T(2); break;
                case 3: IFZ_T(3); break;
                case 4: IFZ_T(4); break;
                case 5: IFZ_T(5); break;
                case 6: IFZ_T(6); break;
                case 7: IFZ_T(7); break;
                default: IFZ_T(8); break;
                }
            }
#undef IFZ_T
        }
        _mm_store_ss(out + n, acc);
    }
}

/* The GEMV for one L (see above): passes of IFZ_SEGS segments; per pass, the cx and xs vectors
 * of its segments and the prefetch of its first rows, then the row loop. */
IFZ_INLINE void ifz_gemv_L(float *out, const int8_t *xq, const float *xs, const int8_t *w,
                           const float *ws, size_t n0, size_t n1, size_t K, size_t gs,
                           const int L) {
    const size_t ng = K / gs, nseg = (ng + 15) / 16;
    if (nseg == 0) {
        for (size_t n = n0; n < n1; n++) out[n] = 0.0f;
        return;
    }
    size_t pfrows = (IFZ_PF_DIST + K - 1) / K; /* prefetch distance in whole rows */
    if (pfrows == 0) pfrows = 1;
    __m512i cx[IFZ_SEGS];
    __m512 xsv[IFZ_SEGS];
    for (size_t s0 = 0; s0 < nseg; s0 += IFZ_SEGS) {
        const size_t ns = nseg - s0 < IFZ_SEGS ? nseg - s0 : IFZ_SEGS;
        const size_t gl = (s0 + ns - 1) * 16; /* the pass's last segment */
        const size_t kb = s0 * 16 * gs, ke = (gl + 16 < ng ? gl + 16 : ng) * gs;
        size_t tb;
        const int nch = ifz_seg_chunks(gl, ng, gs, L, &tb);
        const int whole = gl + 16 <= ng;
        for (size_t j = 0; j < ns; j++) { /* 128 * sum x per group, and xs: once per call */
            const size_t g0 = (s0 + j) * 16;
            cx[j] = g0 + 16 <= ng ? ifz_row_isums(xq, xq, g0, ng, gs, L, L ? L : 16, 64, 0)
                                  : ifz_seg_cx(xq, g0, ng, gs, L);
            xsv[j] = g0 + 16 <= ng ? _mm512_loadu_ps(xs + g0)
                                   : _mm512_maskz_loadu_ps((__mmask16)((1u << (ng - g0)) - 1), xs + g0);
        }
        if (IFZ_PF_DIST) /* the rows before the first prefetch target: start their stream now */
            for (size_t n = n0; n < n1 && n < n0 + pfrows; n++) {
                for (size_t k = kb; k < ke; k += 64) _mm_prefetch((const char *)(w + n * K + k), IFZ_PF_HINT);
                for (size_t k = s0 * 16 * 4; k < ke / gs * 4; k += 64)
                    _mm_prefetch((const char *)(ws + n * ng) + k, IFZ_PF_HINT);
            }
        ifz_gemv_pass(out, xq, cx, xsv, w, ws, n0, n1, K, gs, s0, ns, pfrows, L,
                      whole ? 0 : L ? nch : 1, tb);
    }
}

/* out[n] for n in [n0, n1) (see if_q8_gemv_fn); bit-exact with the scalar GEMV. Returns 0 if
 * the group size is not handled here (gs < 16 and not 4 or 8): the caller uses the scalar
 * kernel then. */
static inline int ifz_gemv(float *out, const int8_t *xq, const float *xs, const int8_t *w,
                           const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    switch (gs) {
    case 4: ifz_gemv_L(out, xq, xs, w, ws, n0, n1, K, gs, 1); return 1;
    case 8: ifz_gemv_L(out, xq, xs, w, ws, n0, n1, K, gs, 2); return 1;
    case 16: ifz_gemv_L(out, xq, xs, w, ws, n0, n1, K, gs, 4); return 1;
    case 32: ifz_gemv_L(out, xq, xs, w, ws, n0, n1, K, gs, 8); return 1;
    default:
        if (gs < 16) return 0;
        ifz_gemv_L(out, xq, xs, w, ws, n0, n1, K, gs, 0);
        return 1;
    }
}

/* out[n] for n in [n0, n1); see if_q8_gemv_fn. Bit-exact with if_q8_gemv_1x1_scalar. */
void if_q8_gemv_1x1_avx512_vnni(float *out, const int8_t *xq, const float *xs, const int8_t *w,
                                const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    if (n1 <= n0 || K == 0 || gs == 0) {
        if_q8_gemv_1x1_scalar(out, xq, xs, w, ws, n0, n1, K, gs);
        return;
    }
    if (!ifz_gemv(out, xq, xs, w, ws, n0, n1, K, gs))
        if_q8_gemv_1x1_scalar(out, xq, xs, w, ws, n0, n1, K, gs);
}

const if_q8_gemv_kernel if_k_q8_gemv_1x1_avx512_vnni = {.name = "q8_gemv_1x1_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = 1, .nr = 1,
    .run = if_q8_gemv_1x1_avx512_vnni};
