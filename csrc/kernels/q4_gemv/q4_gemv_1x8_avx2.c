/* 4-bit codebook GEMV, AVX2 (-mavx2 -mfma). Tile: 1 activation row x 8 weight rows (one ymm
 * of 8 float accumulators, lane = output row). Per call the codebook picks one of three
 * product modes (q4_avx2_common.h): the sign trick after a VPSHUFB lookup (codebook span
 * > 127), the offset trick after a lookup of cb - min (span <= 127), or the offset trick on the
 * raw nibbles (cb[i] = cb[0] + i: GGUF Q4_0), the last two adding min * sum(x) per group
 * (sum(x) once per call, shared by every row). Weights are read 32 bytes (64 values) at a time
 * against activations permuted once per 64 values for the tile's 8 rows; the 8 rows' int32
 * vectors are reduced to one vector of isums (lane = row; at GS 32 one reduction yields two
 * groups), and each lane adds ((float)isum * ws) * xs in group order, exactly as
 * q4_gemv_1x1_scalar. Per block of 8 groups the integer sums come first and the float chain
 * after them, so no group's conversion and scaling waits behind the next group's integer
 * work (the float order is the same either way; docs/performance.md). Groups are taken
 * Q4V_GCH at a time (the sums' buffer); a later pass continues each row's float chain from
 * out. The weight stream is prefetched about Q4V_PF_BYTES ahead, in whole tiles. */
#include "../q4_avx2_common.h"

#define Q4V_GCH 512 /* groups per pass */
#define Q4V_PF_BYTES 6144 /* the full-tile path's prefetch distance (whole tiles, >= 1) */
#define Q4V_LIN_MAX_GS 256 /* Q4C_LINEAR: one int16 run per group (gs / 32 <= 8 VPMADDUBSW) */

/* v[r] (int32; Q4C_LINEAR: int16 run) += the products of the 64 values at k of every row. */
Q8C_INLINE void q4v_blk64(__m256i v[8], const uint8_t *const wr[8], const int8_t *xq, size_t k,
                          __m256i lut, uintptr_t pf, const int mode) {
    q8c_prefetch256(pf + 4 * k);
    __m256i xl, xh;
    q4c_xperm(xq + k, &xl, &xh);
    const __m256i axl = _mm256_abs_epi8(xl), axh = _mm256_abs_epi8(xh);
    for (int r = 0; r < 8; r++) {
        __m256i lo, hi;
        q4c_nib64(wr[r] + k / 2, &lo, &hi);
        if (mode == Q4C_SIGN) {
            v[r] = q8c_dot(v[r], axl, _mm256_sign_epi8(_mm256_shuffle_epi8(lut, lo), xl));
            v[r] = q8c_dot(v[r], axh, _mm256_sign_epi8(_mm256_shuffle_epi8(lut, hi), xh));
        } else if (mode == Q4C_OFFSET) {
            const __m256i p = _mm256_add_epi32(
                q4c_widen(q4c_mul16(_mm256_shuffle_epi8(lut, lo), xl)),
                q4c_widen(q4c_mul16(_mm256_shuffle_epi8(lut, hi), xh)));
            v[r] = _mm256_add_epi32(v[r], p);
        } else if (mode == Q4C_OFFSET2) {
            const __m256i p = _mm256_add_epi16(q4c_mul16(_mm256_shuffle_epi8(lut, lo), xl),
                                               q4c_mul16(_mm256_shuffle_epi8(lut, hi), xh));
            v[r] = _mm256_add_epi32(v[r], q4c_widen(p));
        } else {
            v[r] = _mm256_add_epi16(v[r], _mm256_add_epi16(q4c_mul16(lo, xl), q4c_mul16(hi, xh)));
        }
    }
}

/* The same for one block of 32 values at k (value order in the vector). */
Q8C_INLINE void q4v_blk32(__m256i v[8], const uint8_t *const wr[8], const int8_t *xq, size_t k,
                          __m256i lut, uintptr_t pf, const int mode) {
    q8c_prefetch(pf + 4 * k);
    q8c_prefetch(pf + 4 * k + 64);
    const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(xq + k));
    const __m256i ax = _mm256_abs_epi8(x);
    for (int r = 0; r < 8; r++) {
        const __m256i nb = q4c_nib32(wr[r] + k / 2);
        if (mode == Q4C_SIGN)
            v[r] = q8c_dot(v[r], ax, _mm256_sign_epi8(_mm256_shuffle_epi8(lut, nb), x));
        else if (mode == Q4C_OFFSET || mode == Q4C_OFFSET2)
            v[r] = _mm256_add_epi32(v[r], q4c_widen(q4c_mul16(_mm256_shuffle_epi8(lut, nb), x)));
        else
            v[r] = _mm256_add_epi16(v[r], q4c_mul16(nb, x));
    }
}

/* Groups [ga, gb_end) of output rows [n0, n1); msx[g - ga] = min * sum(x of group g). */
Q8C_INLINE void q4v_pass(float *out, const int8_t *xq, const float *xs, const uint8_t *w,
                         const float *ws, __m256i lut, const int32_t *msx, size_t n0, size_t n1,
                         size_t K, size_t gs, size_t ga, size_t gend, const int mode) {
    const size_t ng = K / gs;
    for (size_t n = n0; n < n1; n += 8) {
        const size_t nr = n1 - n < 8 ? n1 - n : 8;
        const uint8_t *wr[8];
        const float *sr[8];
        q4c_rows(wr, sr, w, ws, n, nr, K, ng);
        /* a full tile's 8 rows are contiguous: 4 bytes of the tile per value index k */
        const uintptr_t pf = q8c_addr(w, (n + 8 * Q8C_PFD) * (K / 2));
        __m256 acc = ga ? q8c_load_out(out + n, nr) : _mm256_setzero_ps();
        for (size_t g0 = ga; g0 < gend; g0 += 8) {
            const size_t gb = gend - g0 < 8 ? gend - g0 : 8;
            __m256i is[8]; /* the block's integer sums, then its float chain (as below) */
            size_t j = 0;
            if (gs == 32) { /* two groups per 64 values: lane 0 of each row's vector, lane 1 */
                for (; j + 1 < gb; j += 2) {
                    __m256i v[8];
                    for (int r = 0; r < 8; r++) v[r] = _mm256_setzero_si256();
                    q4v_blk64(v, wr, xq, (g0 + j) * 32, lut, pf, mode);
                    if (mode == Q4C_LINEAR)
                        for (int r = 0; r < 8; r++) v[r] = q4c_widen(v[r]);
                    q4c_hsum8x2(v, &is[j], &is[j + 1]);
                }
            }
            for (; j < gb; j++) {
                __m256i v[8];
                for (int r = 0; r < 8; r++) v[r] = _mm256_setzero_si256();
                const size_t k0 = (g0 + j) * gs;
                size_t k = k0;
                for (; k + 64 <= k0 + gs; k += 64) q4v_blk64(v, wr, xq, k, lut, pf, mode);
                for (; k < k0 + gs; k += 32) q4v_blk32(v, wr, xq, k, lut, pf, mode);
                if (mode == Q4C_LINEAR)
                    for (int r = 0; r < 8; r++) v[r] = q4c_widen(v[r]);
                is[j] = q4c_hsum8(v);
            }
            acc = q4c_fold_block(acc, is, sr, msx + (g0 - ga), xs + g0, g0, gb, mode);
        }
        q8c_store_out(out + n, acc, nr);
    }
}

/* ---- the full-tile path of GS 32 and 64 (CQ4 as --quant cq4 writes it, GGUF Q4_0) ----
 * The same products, sums and float order as q4v_pass, with less work around them: the 8 rows
 * of a full tile are addressed from one pointer and the row stride, each 64-value block's
 * per-row vectors are reduced as they are made (pairs of rows merged by unpacks while the next
 * pair is computed, so no vector is zeroed or kept for a later reduction), and a group of 64
 * is one block, with no inner block loop. */

/* One row's products of the 64 values at p (nibbles) against xl/xh (q4c_xperm), int32 lanes
 * (lane order is irrelevant: only their sum is used). Q4C_LINEAR: the int16 pair sums
 * (2 x 3840 at most) widened at once. */
Q8C_INLINE __m256i q4v_row64(const uint8_t *p, __m256i xl, __m256i xh, __m256i axl, __m256i axh,
                             __m256i lut, const int mode) {
    __m256i lo, hi;
    q4c_nib64(p, &lo, &hi);
    if (mode == Q4C_SIGN)
        return q8c_dot(q8c_dot(_mm256_setzero_si256(), axl,
                               _mm256_sign_epi8(_mm256_shuffle_epi8(lut, lo), xl)),
                       axh, _mm256_sign_epi8(_mm256_shuffle_epi8(lut, hi), xh));
    if (mode == Q4C_OFFSET)
        return _mm256_add_epi32(q4c_widen(q4c_mul16(_mm256_shuffle_epi8(lut, lo), xl)),
                                q4c_widen(q4c_mul16(_mm256_shuffle_epi8(lut, hi), xh)));
    if (mode == Q4C_OFFSET2)
        return q4c_widen(_mm256_add_epi16(q4c_mul16(_mm256_shuffle_epi8(lut, lo), xl),
                                          q4c_mul16(_mm256_shuffle_epi8(lut, hi), xh)));
    return q4c_widen(_mm256_add_epi16(q4c_mul16(lo, xl), q4c_mul16(hi, xh)));
}

/* The same for the 32-value block at p against x (value order). */
Q8C_INLINE __m256i q4v_row32(const uint8_t *p, __m256i x, __m256i ax, __m256i lut,
                             const int mode) {
    const __m256i nb = q4c_nib32(p);
    if (mode == Q4C_SIGN)
        return q8c_dot(_mm256_setzero_si256(), ax,
                       _mm256_sign_epi8(_mm256_shuffle_epi8(lut, nb), x));
    if (mode == Q4C_LINEAR) return q4c_widen(q4c_mul16(nb, x));
    return q4c_widen(q4c_mul16(_mm256_shuffle_epi8(lut, nb), x));
}

/* The 8 rows p + r * rs of a full tile, one 64-value block at p (xq at x): *e, *f as
 * q4c_hsum8_halves (per 128-bit half, lane r = row r's sum in that half: e rows 0-3, f rows
 * 4-7). */
Q8C_INLINE void q4v_tile64(const uint8_t *p, size_t rs, const int8_t *x, __m256i lut, __m256i *e,
                           __m256i *f, const int mode) {
    __m256i xl, xh;
    q4c_xperm(x, &xl, &xh);
    const __m256i axl = _mm256_abs_epi8(xl), axh = _mm256_abs_epi8(xh);
    __m256i t[4];
    for (int i = 0; i < 4; i++) {
        const __m256i a = q4v_row64(p + (size_t)(2 * i) * rs, xl, xh, axl, axh, lut, mode);
        const __m256i b = q4v_row64(p + (size_t)(2 * i + 1) * rs, xl, xh, axl, axh, lut, mode);
        t[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
    }
    *e = _mm256_add_epi32(_mm256_unpacklo_epi64(t[0], t[1]), _mm256_unpackhi_epi64(t[0], t[1]));
    *f = _mm256_add_epi32(_mm256_unpacklo_epi64(t[2], t[3]), _mm256_unpackhi_epi64(t[2], t[3]));
}

/* Lane r = row r's sum of the 32-value block at p (xq at x), full tile. */
Q8C_INLINE __m256i q4v_tile32(const uint8_t *p, size_t rs, const int8_t *x, __m256i lut,
                              const int mode) {
    const __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)x);
    const __m256i ax = _mm256_abs_epi8(xv);
    __m256i v[8];
    for (int r = 0; r < 8; r++) v[r] = q4v_row32(p + (size_t)r * rs, xv, ax, lut, mode);
    return q4c_hsum8(v);
}

/* Full tiles (n1 - n0 a multiple of 8) of groups [ga, gend), gs 32 or 64: as q4v_pass. */
Q8C_INLINE void q4v_pass_tiles(float *out, const int8_t *xq, const float *xs, const uint8_t *w,
                               const float *ws, __m256i lut, const int32_t *msx, size_t n0,
                               size_t n1, size_t K, const size_t gs, size_t ga, size_t gend,
                               const int mode) {
    const size_t ng = K / gs, rs = K / 2;
    /* prefetch about Q4V_PF_BYTES ahead, whole tiles (1 .. Q8C_PFD): a short distance streams
     * long rows fastest (docs/performance.md) */
    const size_t pft0 = Q4V_PF_BYTES / (8 * rs);
    const size_t pft = pft0 < 1 ? 1 : pft0 > Q8C_PFD ? Q8C_PFD : pft0;
    for (size_t n = n0; n < n1; n += 8) {
        const uint8_t *wt = w + n * rs;
        const float *sr[8];
        for (int r = 0; r < 8; r++) sr[r] = ws + (n + (size_t)r) * ng;
        const uintptr_t pf = q8c_addr(w, (n + 8 * pft) * rs);
        __m256 acc = ga ? _mm256_loadu_ps(out + n) : _mm256_setzero_ps();
        for (size_t g0 = ga; g0 < gend; g0 += 8) {
            const size_t gb = gend - g0 < 8 ? gend - g0 : 8;
            /* the integer sums of the block's groups first, then their float chain: the
             * conversions and scale products of one group do not wait behind the next
             * group's integer work (same sums, same float order) */
            __m256i is[8];
            size_t j = 0;
            for (; j + (gs == 32) < gb; j += 1 + (gs == 32)) {
                const size_t g = g0 + j, k = g * gs;
                q8c_prefetch256(pf + 4 * k);
                __m256i e, f;
                q4v_tile64(wt + k / 2, rs, xq + k, lut, &e, &f, mode);
                if (gs == 64) {
                    is[j] = _mm256_add_epi32(_mm256_blend_epi32(e, f, 0xF0),
                                             _mm256_permute2x128_si256(e, f, 0x21));
                } else { /* two groups: the low 128-bit halves, then the high ones */
                    is[j] = _mm256_permute2x128_si256(e, f, 0x20);
                    is[j + 1] = _mm256_permute2x128_si256(e, f, 0x31);
                }
            }
            if (j < gb) { /* gs 32, an odd last group */
                const size_t k = (g0 + j) * gs;
                q8c_prefetch(pf + 4 * k);
                q8c_prefetch(pf + 4 * k + 64);
                is[j] = q4v_tile32(wt + k / 2, rs, xq + k, lut, mode);
            }
            acc = q4c_fold_block(acc, is, sr, msx + (g0 - ga), xs + g0, g0, gb, mode);
        }
        _mm256_storeu_ps(out + n, acc);
    }
}

/* Rows [n0, n1): the full tiles by q4v_pass_tiles when gs is 32 or 64, the rest by q4v_pass. */
Q8C_INLINE void q4v_rows(float *out, const int8_t *xq, const float *xs, const uint8_t *w,
                         const float *ws, __m256i lut, const int32_t *msx, size_t n0, size_t n1,
                         size_t K, size_t gs, size_t ga, size_t gend, const int mode) {
    size_t nf = n0;
    if (gs == 32 || gs == 64) {
        nf = n0 + (n1 - n0) / 8 * 8;
        if (gs == 32)
            q4v_pass_tiles(out, xq, xs, w, ws, lut, msx, n0, nf, K, 32, ga, gend, mode);
        else
            q4v_pass_tiles(out, xq, xs, w, ws, lut, msx, n0, nf, K, 64, ga, gend, mode);
    }
    if (nf < n1) q4v_pass(out, xq, xs, w, ws, lut, msx, nf, n1, K, gs, ga, gend, mode);
}

void if_q4_gemv_1x8_avx2(float *out, const int8_t *xq, const float *xs, const uint8_t *w,
                         const float *ws, const int8_t *cb, size_t n0, size_t n1, size_t K,
                         size_t gs) {
    if (gs == 0 || gs % 32 || K % gs) {
        if_q4_gemv_1x1_scalar(out, xq, xs, w, ws, cb, n0, n1, K, gs);
        return;
    }
    const size_t ng = K / gs;
    int32_t cmin, msx[Q4V_GCH];
    int8_t lb[16];
    int mode = q4c_mode(cb, &cmin, lb);
    if (mode == Q4C_LINEAR && gs > Q4V_LIN_MAX_GS) mode = Q4C_OFFSET;
    const __m256i lut = q4c_codebook(lb);
    for (size_t ga = 0; ga < ng; ga += Q4V_GCH) {
        const size_t gend = ng - ga < Q4V_GCH ? ng : ga + Q4V_GCH;
        if (mode != Q4C_SIGN) q4c_xsums(msx, xq + ga * gs, gend - ga, gs, cmin);
        if (mode == Q4C_SIGN)
            q4v_rows(out, xq, xs, w, ws, lut, msx, n0, n1, K, gs, ga, gend, Q4C_SIGN);
        else if (mode == Q4C_OFFSET)
            q4v_rows(out, xq, xs, w, ws, lut, msx, n0, n1, K, gs, ga, gend, Q4C_OFFSET);
        else if (mode == Q4C_OFFSET2)
            q4v_rows(out, xq, xs, w, ws, lut, msx, n0, n1, K, gs, ga, gend, Q4C_OFFSET2);
        else
            q4v_rows(out, xq, xs, w, ws, lut, msx, n0, n1, K, gs, ga, gend, Q4C_LINEAR);
    }
}

const if_q4_gemv_kernel if_k_q4_gemv_1x8_avx2 = {.name = "q4_gemv_1x8_avx2",
    .requires = IF_FEATS_AVX2, .mr = 1, .nr = 8, .run = if_q4_gemv_1x8_avx2};
