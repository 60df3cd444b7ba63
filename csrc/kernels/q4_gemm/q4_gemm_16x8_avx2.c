/* 4-bit codebook GEMM, AVX2 (-mavx2 -mfma). Tile: up to 16 activation rows x 8 weight rows.
 * Per group, the 8 rows' nibbles are expanded once (32 bytes = 64 values per load; then, by
 * the codebook's product mode of q4_avx2_common.h, looked up in the codebook, in cb - min, or
 * kept as they are) into a small buffer, in value order, that the tile's activation rows then
 * reuse: each row dots it (sign trick; or VPMADDUBSW of the unsigned values and the raw
 * activations, plus min * sum(x) per group, sum(x) once per row and group) into 8 int32
 * vectors reduced to one vector of isums (lane = weight row), and its accumulator adds
 * ((float)isum * ws) * xs in group order, exactly as q4_gemv_1x1_scalar. Groups are taken
 * Q4G_GCH at a time (the sums' buffer); a later pass continues each output's float chain from
 * out. Groups above 256 values fall back to the GEMV kernel row by row (same bits). */
#include "../q4_avx2_common.h"

#define Q4G_MR 16
#define Q4G_MAX_GS 256
#define Q4G_GCH 64 /* groups per pass */

/* buf[r][0, gs) = the tile's 8 rows' values of the group at k0 (mode's unsigned or signed
 * bytes), in value order: 64 values per 32-byte load in the offset modes; 32 per 16-byte
 * broadcast in the sign mode (as fast there in a kernel micro-bench; the 64-value form was
 * 3-10 % slower, noisy shared machine). */
Q8C_INLINE void q4g_expand(int8_t buf[8][Q4G_MAX_GS], const uint8_t *const wr[8], size_t k0,
                           size_t gs, __m256i lut, const int mode) {
    for (int r = 0; r < 8; r++) {
        size_t k = 0;
        for (; k + 64 <= gs && mode != Q4C_SIGN; k += 64) {
            __m256i lo, hi;
            q4c_nib64(wr[r] + (k0 + k) / 2, &lo, &hi);
            if (mode != Q4C_LINEAR) {
                lo = _mm256_shuffle_epi8(lut, lo);
                hi = _mm256_shuffle_epi8(lut, hi);
            }
            _mm256_store_si256((__m256i *)(void *)(buf[r] + k), _mm256_permute2x128_si256(lo, hi, 0x20));
            _mm256_store_si256((__m256i *)(void *)(buf[r] + k + 32), _mm256_permute2x128_si256(lo, hi, 0x31));
        }
        for (; k < gs; k += 32) {
            __m256i nb = q4c_nib32(wr[r] + (k0 + k) / 2);
            if (mode != Q4C_LINEAR) nb = _mm256_shuffle_epi8(lut, nb);
            _mm256_store_si256((__m256i *)(void *)(buf[r] + k), nb);
        }
    }
}

Q8C_INLINE __m256i q4g_ld(const int8_t *p) { return _mm256_load_si256((const __m256i *)(const void *)p); }
Q8C_INLINE __m256i q4g_ldu(const int8_t *p) { return _mm256_loadu_si256((const __m256i *)(const void *)p); }

/* The 8 isums (lane = weight row) of the activations x (gs values) against buf. */
Q8C_INLINE __m256i q4g_isums(int8_t buf[8][Q4G_MAX_GS], const int8_t *x, size_t gs,
                             const int mode) {
    __m256i v[8];
    for (int r = 0; r < 8; r++) v[r] = _mm256_setzero_si256();
    size_t k = 0;
    if (mode == Q4C_OFFSET2) { /* two blocks' int16 products added before one VPMADDWD */
        for (; k + 64 <= gs; k += 64) {
            const __m256i x0 = q4g_ldu(x + k), x1 = q4g_ldu(x + k + 32);
            for (int r = 0; r < 8; r++) {
                const __m256i p = _mm256_add_epi16(q4c_mul16(q4g_ld(buf[r] + k), x0),
                                                   q4c_mul16(q4g_ld(buf[r] + k + 32), x1));
                v[r] = _mm256_add_epi32(v[r], q4c_widen(p));
            }
        }
    }
    for (; k < gs; k += 32) {
        const __m256i xv = q4g_ldu(x + k);
        const __m256i ax = _mm256_abs_epi8(xv);
        for (int r = 0; r < 8; r++) {
            const __m256i wv = q4g_ld(buf[r] + k);
            if (mode == Q4C_SIGN)
                v[r] = q8c_dot(v[r], ax, _mm256_sign_epi8(wv, xv));
            else if (mode == Q4C_LINEAR) /* gs / 32 <= 8 products of at most 3840 per int16 */
                v[r] = _mm256_add_epi16(v[r], q4c_mul16(wv, xv));
            else
                v[r] = _mm256_add_epi32(v[r], q4c_widen(q4c_mul16(wv, xv)));
        }
    }
    if (mode == Q4C_LINEAR)
        for (int r = 0; r < 8; r++) v[r] = q4c_widen(v[r]);
    return q8c_hsum8(v);
}

/* Activation rows [m0, m0 + mb) x output rows [n0, n1) over groups [ga, gend);
 * msx[i][g - ga] = min * sum(x of row m0 + i, group g). */
Q8C_INLINE void q4g_pass(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t m0,
                         size_t mb, const uint8_t *w, const float *ws, __m256i lut,
                         int32_t msx[Q4G_MR][Q4G_GCH], size_t n0, size_t n1, size_t K,
                         size_t gs, size_t ga, size_t gend, const int mode) {
    const size_t ng = K / gs;
    int8_t buf[8][Q4G_MAX_GS] __attribute__((aligned(32)));
    for (size_t n = n0; n < n1; n += 8) {
        const size_t nr = n1 - n < 8 ? n1 - n : 8;
        const uint8_t *wr[8];
        const float *sr[8];
        q4c_rows(wr, sr, w, ws, n, nr, K, ng);
        __m256 acc[Q4G_MR];
        for (size_t i = 0; i < mb; i++)
            acc[i] = ga ? q8c_load_out(out + (m0 + i) * ldo + n, nr) : _mm256_setzero_ps();
        for (size_t g0 = ga; g0 < gend; g0 += 8) {
            const size_t gb = gend - g0 < 8 ? gend - g0 : 8;
            __m256 st[8];
            q8c_load_scales(st, sr, g0, gb);
            for (size_t j = 0; j < gb; j++) {
                const size_t k0 = (g0 + j) * gs;
                q4g_expand(buf, wr, k0, gs, lut, mode);
                for (size_t i = 0; i < mb; i++) {
                    __m256i is = q4g_isums(buf, xq + (m0 + i) * K + k0, gs, mode);
                    if (mode != Q4C_SIGN)
                        is = _mm256_add_epi32(is, _mm256_set1_epi32(msx[i][g0 + j - ga]));
                    const float xsc = xs[(m0 + i) * ng + g0 + j];
                    const __m256 p = _mm256_mul_ps(
                        _mm256_mul_ps(_mm256_cvtepi32_ps(is), st[j]), _mm256_set1_ps(xsc));
                    acc[i] = _mm256_add_ps(acc[i], p);
                }
            }
        }
        for (size_t i = 0; i < mb; i++) q8c_store_out(out + (m0 + i) * ldo + n, acc[i], nr);
    }
}

void if_q4_gemm_16x8_avx2(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                          const uint8_t *w, const float *ws, const int8_t *cb, size_t n0,
                          size_t n1, size_t K, size_t gs) {
    const size_t ng = gs ? K / gs : 0;
    if (gs == 0 || gs % 32 || K % gs || gs > Q4G_MAX_GS) {
        for (size_t m = 0; m < M; m++)
            if_q4_gemv_1x8_avx2(out + m * ldo, xq + m * K, xs + m * ng, w, ws, cb, n0, n1, K,
                                gs);
        return;
    }
    int32_t cmin, msx[Q4G_MR][Q4G_GCH];
    int8_t lb[16];
    const int mode = q4c_mode(cb, &cmin, lb);
    const __m256i lut = q4c_codebook(lb);
    for (size_t m0 = 0; m0 < M; m0 += Q4G_MR) {
        const size_t mb = M - m0 < Q4G_MR ? M - m0 : Q4G_MR;
        for (size_t ga = 0; ga < ng; ga += Q4G_GCH) {
            const size_t gend = ng - ga < Q4G_GCH ? ng : ga + Q4G_GCH;
            if (mode != Q4C_SIGN)
                for (size_t i = 0; i < mb; i++)
                    q4c_xsums(msx[i], xq + (m0 + i) * K + ga * gs, gend - ga, gs, cmin);
#define Q4G_RUN(MODE) \
    q4g_pass(out, ldo, xq, xs, m0, mb, w, ws, lut, msx, n0, n1, K, gs, ga, gend, MODE)
            if (mode == Q4C_SIGN) Q4G_RUN(Q4C_SIGN);
            else if (mode == Q4C_OFFSET) Q4G_RUN(Q4C_OFFSET);
            else if (mode == Q4C_OFFSET2) Q4G_RUN(Q4C_OFFSET2);
            else Q4G_RUN(Q4C_LINEAR);
#undef Q4G_RUN
        }
    }
}

const if_q4_gemm_kernel if_k_q4_gemm_16x8_avx2 = {.name = "q4_gemm_16x8_avx2",
    .requires = IF_FEATS_AVX2, .mr = 16, .nr = 8, .run = if_q4_gemm_16x8_avx2};
