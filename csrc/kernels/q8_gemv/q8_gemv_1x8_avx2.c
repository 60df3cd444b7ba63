/* Q8 GEMV, AVX2 (-mavx2 -mfma). Tile: 1 activation row x 8 weight rows (one ymm of 8 float
 * accumulators, lane = output row). Per group and row,
 * 32-byte VPMADDUBSW + VPMADDWD dot products with the sign trick (u8 = |x| via VPABSB, once per
 * 32 activation bytes and shared by the 8 rows; s8 = w * sign(x) via VPSIGNB) give 8 int32
 * partial sums; a blend/shuffle tree (no VPHADDD) reduces the 8 rows to one vector of 8 isums.
 * The 8 rows' scales are transposed 8 groups at a time, and each lane adds
 * ((float)isum * ws) * xs in group order, exactly as q8_gemv_1x1_scalar. gs = 4/8/16 and other
 * gs % 4 == 0 have their own shuffle paths; gs % 4 != 0 falls back to the scalar kernel. The
 * weight stream is software-prefetched 4 tiles ahead. The AVX-VNNI GEMV is this file compiled
 * with -mavxvnni (q8_gemv_1x8_avx_vnni.c): q8c_dot is then one VPDPBUSD, the rest the same. */
#include "../q8_avx2_common.h"

#if defined(__AVXVNNI__)
#define Q8C_GEMV_RUN if_q8_gemv_1x8_avx_vnni
#define Q8C_GEMV_DESC if_k_q8_gemv_1x8_avx_vnni
#define Q8C_GEMV_NAME "q8_gemv_1x8_avx_vnni"
#define Q8C_GEMV_REQUIRES (IF_FEATS_AVX2 | IF_FEAT_AVX_VNNI)
#else
#define Q8C_GEMV_RUN if_q8_gemv_1x8_avx2
#define Q8C_GEMV_DESC if_k_q8_gemv_1x8_avx2
#define Q8C_GEMV_NAME "q8_gemv_1x8_avx2"
#define Q8C_GEMV_REQUIRES IF_FEATS_AVX2
#endif

/* ---------------------------------------------------------------------------------------
 * GEMV: 1 activation row x 8 weight rows. For each row, the bytes of a group are dotted with
 * the activation in 32-byte vectors (sign trick: u8 = |x| shared by the 8 rows, s8 =
 * w * sign(x)), giving 8 int32 partial sums per row; the 8 rows' vectors are then reduced to
 * one vector of 8 isums (lane = row) with blends and in-lane shuffles. For gs = 4, 8, 16 a
 * 32-byte dot holds 8, 4, 2 whole groups, separated by a transpose-like shuffle; other
 * gs % 4 == 0 go through quads (each int32 lane of a dot is one 4-byte quad, an 8x8 transpose
 * turns 8 rows x 8 quads into 8 quads x 8 rows, and quads are added into their groups).
 * ------------------------------------------------------------------------------------- */

/* Isums of one group (gs % 32 == 0) starting at byte off, for the 8 rows; lane = row. */
Q8C_INLINE __m256i q8c_isum_rows32(const int8_t *const wr[8], const int8_t *xq, size_t off,
                                   size_t gs, uintptr_t pf) {
    __m256i v[8];
    for (int r = 0; r < 8; r++) v[r] = _mm256_setzero_si256();
    for (size_t k = off; k < off + gs; k += 32) {
        q8c_prefetch256(pf + 8 * k);
        const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + k));
        const __m256i ax = _mm256_abs_epi8(x);
        for (int r = 0; r < 8; r++) {
            const __m256i wv = _mm256_loadu_si256((const __m256i *)(wr[r] + k));
            v[r] = q8c_dot(v[r], ax, _mm256_sign_epi8(wv, x));
        }
    }
    return q8c_hsum8(v);
}

/* v[r] lane q = isum of quad q (q < nq; later lanes 0) of the 32 bytes at k of row r and x */
Q8C_INLINE void q8c_dot_chunk(__m256i v[8], const int8_t *const wr[8], const int8_t *xq, size_t k,
                              size_t nq, uintptr_t pf) {
    q8c_prefetch256(pf + 8 * k);
    const __m256i x = q8c_load_bytes(xq + k, nq);
    const __m256i ax = _mm256_abs_epi8(x);
    for (int r = 0; r < 8; r++)
        v[r] = q8c_dot(_mm256_setzero_si256(), ax,
                       _mm256_sign_epi8(q8c_load_bytes(wr[r] + k, nq), x));
}

/* Isums of groups [g0, g0 + gb) for any gs % 4 == 0, via quads; is[j] lane = row. */
Q8C_INLINE void q8c_isum_quads(__m256i is[8], const int8_t *const wr[8], const int8_t *xq,
                               size_t g0, size_t gb, size_t gs, uintptr_t pf) {
    const size_t qpg = gs / 4, k0 = g0 * gs, k1 = k0 + gb * gs;
    for (int j = 0; j < 8; j++) is[j] = _mm256_setzero_si256();
    size_t gi = 0, qi = 0;
    for (size_t k = k0; k < k1; k += 32) {
        const size_t nq = (k1 - k) / 4 < 8 ? (k1 - k) / 4 : 8;
        __m256i v[8];
        q8c_dot_chunk(v, wr, xq, k, nq, pf);
        q8c_tr8_epi32(v);
        for (size_t i = 0; i < nq; i++) {
            is[gi] = _mm256_add_epi32(is[gi], v[i]);
            if (++qi == qpg) {
                qi = 0;
                gi++;
            }
        }
    }
}

/* Isums of groups [g0, g0 + gb) (gb <= 8) for gs = 4, 8 or 16: one 32-byte dot per row holds
 * 8, 4 or 2 whole groups, which are separated and transposed to lane = row with in-lane
 * shuffles; is[j] lane = row. Lanes past the valid bytes (masked loads) give unused zeros. */
Q8C_INLINE void q8c_isum_small(__m256i is[8], const int8_t *const wr[8], const int8_t *xq,
                               size_t g0, size_t gb, size_t gs, uintptr_t pf) {
    const size_t k0 = g0 * gs, k1 = k0 + gb * gs;
    size_t j = 0;
    for (size_t k = k0; k < k1; k += 32) {
        const size_t nq = (k1 - k) / 4 < 8 ? (k1 - k) / 4 : 8;
        __m256i v[8];
        q8c_dot_chunk(v, wr, xq, k, nq, pf);
        if (gs == 4) { /* lane i of v[r] = group i of row r */
            q8c_tr8_epi32(v);
            for (int i = 0; i < 8; i++) is[j + i] = v[i];
            j += 8;
        } else if (gs == 8) { /* lanes 2i, 2i+1 = group i */
            const __m256i a = q8c_hpair(v[0], v[1]), b = q8c_hpair(v[2], v[3]);
            const __m256i c = q8c_hpair(v[4], v[5]), d = q8c_hpair(v[6], v[7]);
            /* 64-bit unit u of a: group u (0-1 | 2-3 by lane), rows 0-1 */
            const __m256i ab0 = _mm256_unpacklo_epi64(a, b), ab1 = _mm256_unpackhi_epi64(a, b);
            const __m256i cd0 = _mm256_unpacklo_epi64(c, d), cd1 = _mm256_unpackhi_epi64(c, d);
            is[j + 0] = _mm256_permute2x128_si256(ab0, cd0, 0x20);
            is[j + 1] = _mm256_permute2x128_si256(ab1, cd1, 0x20);
            is[j + 2] = _mm256_permute2x128_si256(ab0, cd0, 0x31);
            is[j + 3] = _mm256_permute2x128_si256(ab1, cd1, 0x31);
            j += 4;
        } else { /* gs == 16: 128-bit half h = group h */
            const __m256i e = q8c_hquad(q8c_hpair(v[0], v[1]), q8c_hpair(v[2], v[3]));
            const __m256i f = q8c_hquad(q8c_hpair(v[4], v[5]), q8c_hpair(v[6], v[7]));
            is[j + 0] = _mm256_permute2x128_si256(e, f, 0x20);
            is[j + 1] = _mm256_permute2x128_si256(e, f, 0x31);
            j += 2;
        }
    }
}

/* out[n] for n in [n0, n1), one activation row; gs % 4 == 0. */
Q8C_INLINE void q8c_gemv(float *out, const int8_t *xq, const float *xs, const int8_t *w,
                         const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    const size_t ng = K / gs;
    for (size_t n = n0; n < n1; n += 8) {
        const size_t nr = n1 - n < 8 ? n1 - n : 8;
        const int8_t *wr[8];
        const float *sr[8];
        q8c_rows(wr, sr, w, ws, n, nr, K, ng);
        const uintptr_t pf = q8c_addr(w, (n + 8 * Q8C_PFD) * K);
        const uintptr_t pfs = q8c_addr(ws, (n + 8 * Q8C_PFD) * ng * sizeof(float));
        __m256 acc = _mm256_setzero_ps();
        for (size_t g0 = 0; g0 < ng; g0 += 8) {
            const size_t gb = ng - g0 < 8 ? ng - g0 : 8;
            __m256 st[8];
            q8c_load_scales(st, sr, g0, gb);
            q8c_prefetch256(pfs + 32 * g0); /* the scales of 8 groups of the 8 rows */
            if (gs % 32 == 0) {
                for (size_t j = 0; j < gb; j++) {
                    const __m256i is = q8c_isum_rows32(wr, xq, (g0 + j) * gs, gs, pf);
                    const __m256 p = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(is), st[j]),
                                                   _mm256_set1_ps(xs[g0 + j]));
                    acc = _mm256_add_ps(acc, p);
                }
            } else {
                __m256i is[8];
                if (gs == 4 || gs == 8 || gs == 16)
                    q8c_isum_small(is, wr, xq, g0, gb, gs, pf);
                else
                    q8c_isum_quads(is, wr, xq, g0, gb, gs, pf);
                for (size_t j = 0; j < gb; j++) {
                    const __m256 p = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(is[j]), st[j]),
                                                   _mm256_set1_ps(xs[g0 + j]));
                    acc = _mm256_add_ps(acc, p);
                }
            }
        }
        q8c_store_out(out + n, acc, nr);
    }
}

void Q8C_GEMV_RUN(float *out, const int8_t *xq, const float *xs, const int8_t *w, const float *ws,
                  size_t n0, size_t n1, size_t K, size_t gs) {
    if (gs == 0 || gs % 4 != 0) {
        if_q8_gemv_1x1_scalar(out, xq, xs, w, ws, n0, n1, K, gs);
        return;
    }
    q8c_gemv(out, xq, xs, w, ws, n0, n1, K, gs);
}

const if_q8_gemv_kernel Q8C_GEMV_DESC = {.name = Q8C_GEMV_NAME, .requires = Q8C_GEMV_REQUIRES,
    .mr = 1, .nr = 8, .run = Q8C_GEMV_RUN};
