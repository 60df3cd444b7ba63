/* 4-bit codebook GEMM, AVX2 (-mavx2 -mfma). Tile: up to 16 activation rows x 8 weight rows.
 *
 * Layout (pack below, once at load; the nibbles only rearranged, scales and codebook as they
 * are): tile-major, 8 weight rows per tile (a last partial tile repeats its last row); within
 * a tile, per block of 8 values (k = 8 b) 32 bytes: row r's 4 bytes at 4 r, byte i = the
 * nibble of value k + i (low) | of value k + 4 + i (high). One 32-byte load, the AND / shift
 * and the codebook lookup (VPSHUFB) give each row's values k..k+3 and k+4..k+7 in its own
 * 32-bit lane; VPMADDUBSW + VPMADDWD against the activations' 4 + 4 bytes broadcast then put
 * row r's partial sum in lane r, so a group's products accumulate with lane = weight row and
 * need no horizontal reduction (the row-major GEMV reduces 8 vectors per group), and a tile is
 * one contiguous stream. Products by the codebook's mode (q4_avx2_common.h: sign trick, or
 * VPMADDUBSW of cb - min plus min * sum(x) per group; Q4C_LINEAR as Q4C_OFFSET2 through the
 * identity lookup): the same int32 per group as q4_gemv_1x1_scalar, then each output adds
 * ((float)isum * ws) * xs in group order, so the bits are the scalar kernel's.
 * M = 1 (decode, decode_packed) walks the tiles directly: 8 groups' integer sums, then their
 * float chain (q4c_fold_block), with the stream prefetched Q4P_PF_BYTES ahead: faster than
 * the row-major GEMV, cold and hot, since the tile needs no horizontal reduction
 * (docs/performance.md), so a model decoding on this tier keeps only the packed copy. M > 1
 * expands a tile's group once (looked-up bytes, in the packed order) into a small buffer that
 * each of the tile's activation rows then dots.
 * Groups are taken Q4G_GCH at a time (the sums' buffer); a later pass continues each
 * output's float chain from out. Other group sizes (gs % 32, K % gs, gs > 256): pack copies
 * the row-major nibbles and run is the row-major GEMV row by row (same bits). */
#include "../q4_avx2_common.h"

#define Q4G_MR 16
#define Q4G_MAX_GS 256
#define Q4G_GCH 64 /* groups per pass */
#define Q4P_PF_BYTES 6144 /* M = 1: prefetch distance along the packed stream */

/* The tiled layout applies (else pack copies the row-major nibbles). */
static int q4p_tiled(size_t K, size_t gs) {
    return gs && gs % 32 == 0 && K % gs == 0 && gs <= Q4G_MAX_GS;
}

/* Nibble of value k of a row-major row (if_q4_gemv_fn's layout: per 32-value block, byte j =
 * value j low, value j + 16 high). */
static unsigned q4p_nib(const uint8_t *row, size_t k) {
    return (unsigned)(row[k / 32 * 16 + k % 16] >> (k % 32 >= 16 ? 4 : 0)) & 15u;
}

static size_t q4p_pack_size(size_t N, size_t K, size_t gs) {
    return (q4p_tiled(K, gs) ? (N + 7) / 8 * 8 : N) * (K / 2);
}

static void q4p_pack(uint8_t *dst, const uint8_t *w, size_t N, size_t K, size_t gs) {
    if (!q4p_tiled(K, gs)) {
        memcpy(dst, w, N * (K / 2));
        return;
    }
    for (size_t t = 0; t < (N + 7) / 8; t++)
        for (size_t r = 0; r < 8; r++) {
            const size_t n = t * 8 + r < N ? t * 8 + r : N - 1;
            const uint8_t *row = w + n * (K / 2);
            uint8_t *d = dst + t * 4 * K + 4 * r;
            for (size_t b = 0; b < K / 8; b++)
                for (size_t i = 0; i < 4; i++)
                    d[b * 32 + i] = (uint8_t)(q4p_nib(row, 8 * b + i) |
                                              q4p_nib(row, 8 * b + 4 + i) << 4);
        }
}

static void q4p_unpack(uint8_t *w, const uint8_t *src, size_t N, size_t K, size_t gs) {
    if (!q4p_tiled(K, gs)) {
        memcpy(w, src, N * (K / 2));
        return;
    }
    memset(w, 0, N * (K / 2));
    for (size_t n = 0; n < N; n++) {
        const uint8_t *s = src + n / 8 * 4 * K + 4 * (n % 8);
        uint8_t *row = w + n * (K / 2);
        for (size_t k = 0; k < K; k++) {
            const unsigned v = (unsigned)(s[k / 8 * 32 + k % 4] >> (k % 8 >= 4 ? 4 : 0)) & 15u;
            row[k / 32 * 16 + k % 16] |= (uint8_t)(v << (k % 32 >= 16 ? 4 : 0));
        }
    }
}

/* The looked-up bytes of the 8-value block at p: *wl lane r = row r's values k..k+3, *wh its
 * values k+4..k+7. */
Q8C_INLINE void q4p_weights(const uint8_t *p, __m256i lut, __m256i *wl, __m256i *wh) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)p);
    const __m256i m = _mm256_set1_epi8(15);
    *wl = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m));
    *wh = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m));
}

/* s (lane = weight row) + the products of one block's weights (q4p_weights) and the 8
 * activations at x. */
Q8C_INLINE __m256i q4p_dot(__m256i s, __m256i wl, __m256i wh, const int8_t *x, const int mode) {
    int32_t a, c;
    memcpy(&a, x, 4);
    memcpy(&c, x + 4, 4);
    const __m256i xl = _mm256_set1_epi32(a), xh = _mm256_set1_epi32(c);
    if (mode == Q4C_SIGN) {
        s = q8c_dot(s, _mm256_abs_epi8(xl), _mm256_sign_epi8(wl, xl));
        return q8c_dot(s, _mm256_abs_epi8(xh), _mm256_sign_epi8(wh, xh));
    }
    if (mode == Q4C_OFFSET) /* each int16 up to 2 * 127 * 128: widened separately */
        return _mm256_add_epi32(s, _mm256_add_epi32(q4c_widen(q4c_mul16(wl, xl)),
                                                    q4c_widen(q4c_mul16(wh, xh))));
    /* Q4C_OFFSET2 / Q4C_LINEAR (u <= 63): 2 * (2 * 63 * 128) <= 32767 */
    return _mm256_add_epi32(s, q4c_widen(_mm256_add_epi16(q4c_mul16(wl, xl), q4c_mul16(wh, xh))));
}

/* M = 1: output rows [n0, n1) (n0 a multiple of 8) over groups [ga, gend). */
Q8C_INLINE void q4p_gemv(float *out, const int8_t *xq, const float *xs, const uint8_t *w,
                         const float *ws, __m256i lut, const int32_t *msx, size_t n0, size_t n1,
                         size_t K, size_t gs, size_t ga, size_t gend, const int mode) {
    const size_t ng = K / gs;
    for (size_t n = n0; n < n1; n += 8) {
        const size_t nr = n1 - n < 8 ? n1 - n : 8;
        const uint8_t *wt = w + n * (K / 2), *wr[8];
        const float *sr[8];
        q4c_rows(wr, sr, w, ws, n, nr, 0, ng); /* scales only */
        __m256 acc = ga ? q8c_load_out(out + n, nr) : _mm256_setzero_ps();
        for (size_t g0 = ga; g0 < gend; g0 += 8) {
            const size_t gb = gend - g0 < 8 ? gend - g0 : 8;
            __m256i is[8]; /* the block's integer sums, then its float chain */
            for (size_t j = 0; j < gb; j++) {
                const size_t k0 = (g0 + j) * gs;
                const uint8_t *p = wt + k0 * 4;
                for (size_t c = 0; c < gs * 4; c += 64)
                    _mm_prefetch((const char *)(p + Q4P_PF_BYTES + c), _MM_HINT_T0);
                __m256i s = _mm256_setzero_si256();
                for (size_t b = 0; b < gs / 8; b++) {
                    __m256i wl, wh;
                    q4p_weights(p + b * 32, lut, &wl, &wh);
                    s = q4p_dot(s, wl, wh, xq + k0 + 8 * b, mode);
                }
                is[j] = s;
            }
            acc = q4c_fold_block(acc, is, sr, msx + (g0 - ga), xs + g0, g0, gb, mode);
        }
        q8c_store_out(out + n, acc, nr);
    }
}

/* Activation rows [m0, m0 + mb) x output rows [n0, n1) over groups [ga, gend);
 * msx[i][g - ga] = min * sum(x of row m0 + i, group g). */
Q8C_INLINE void q4g_pass(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t m0,
                         size_t mb, const uint8_t *w, const float *ws, __m256i lut,
                         int32_t msx[Q4G_MR][Q4G_GCH], size_t n0, size_t n1, size_t K,
                         size_t gs, size_t ga, size_t gend, const int mode) {
    const size_t ng = K / gs;
    __m256i buf[2 * Q4G_MAX_GS / 8]; /* a group's blocks: wl, wh per 8 values */
    for (size_t n = n0; n < n1; n += 8) {
        const size_t nr = n1 - n < 8 ? n1 - n : 8;
        const uint8_t *wt = w + n * (K / 2), *wr[8];
        const float *sr[8];
        q4c_rows(wr, sr, w, ws, n, nr, 0, ng); /* scales only */
        __m256 acc[Q4G_MR];
        for (size_t i = 0; i < mb; i++)
            acc[i] = ga ? q8c_load_out(out + (m0 + i) * ldo + n, nr) : _mm256_setzero_ps();
        for (size_t g0 = ga; g0 < gend; g0 += 8) {
            const size_t gb = gend - g0 < 8 ? gend - g0 : 8;
            __m256 st[8];
            q8c_load_scales(st, sr, g0, gb);
            for (size_t j = 0; j < gb; j++) {
                const size_t k0 = (g0 + j) * gs;
                for (size_t b = 0; b < gs / 8; b++)
                    q4p_weights(wt + k0 * 4 + b * 32, lut, &buf[2 * b], &buf[2 * b + 1]);
                for (size_t i = 0; i < mb; i++) {
                    const int8_t *x = xq + (m0 + i) * K + k0;
                    __m256i is = _mm256_setzero_si256();
                    for (size_t b = 0; b < gs / 8; b++)
                        is = q4p_dot(is, buf[2 * b], buf[2 * b + 1], x + 8 * b, mode);
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
    if (!q4p_tiled(K, gs)) { /* pack copied the row-major nibbles */
        for (size_t m = 0; m < M; m++)
            if_q4_gemv_1x8_avx2(out + m * ldo, xq + m * K, xs + m * ng, w, ws, cb, n0, n1, K,
                                gs);
        return;
    }
    int32_t cmin;
    int8_t lb[16];
    int mode = q4c_mode(cb, &cmin, lb);
    if (mode == Q4C_LINEAR) mode = Q4C_OFFSET2; /* lb is then the identity lookup */
    const __m256i lut = q4c_codebook(lb);
    if (M == 1) {
        int32_t msx1[8 * Q4G_GCH];
        for (size_t ga = 0; ga < ng; ga += 8 * Q4G_GCH) {
            const size_t gend = ng - ga < 8 * Q4G_GCH ? ng : ga + 8 * Q4G_GCH;
            if (mode != Q4C_SIGN) q4c_xsums(msx1, xq + ga * gs, gend - ga, gs, cmin);
#define Q4P_RUN(MODE) q4p_gemv(out, xq, xs, w, ws, lut, msx1, n0, n1, K, gs, ga, gend, MODE)
            if (mode == Q4C_SIGN) Q4P_RUN(Q4C_SIGN);
            else if (mode == Q4C_OFFSET) Q4P_RUN(Q4C_OFFSET);
            else Q4P_RUN(Q4C_OFFSET2);
#undef Q4P_RUN
        }
        return;
    }
    int32_t msx[Q4G_MR][Q4G_GCH];
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
            else Q4G_RUN(Q4C_OFFSET2);
#undef Q4G_RUN
        }
    }
}

const if_q4_gemm_kernel if_k_q4_gemm_16x8_avx2 = {.name = "q4_gemm_16x8_avx2",
    .requires = IF_FEATS_AVX2, .mr = 16, .nr = 8, .run = if_q4_gemm_16x8_avx2,
    .pack_size = q4p_pack_size, .pack = q4p_pack, .unpack = q4p_unpack, .decode_packed = 1};
