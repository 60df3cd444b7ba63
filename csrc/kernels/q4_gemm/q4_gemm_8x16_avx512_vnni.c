/* 4-bit codebook GEMM, AVX-512 VNNI (-mavx512f -mavx512bw -mavx512vl -mavx512vnni). Tile: up
 * to 8 activation rows x 16 weight rows; lanes are weight (output) rows, so no reduction.
 *
 * The nibbles are packed once, at load (pack below): per tile of 16 weight rows (rows past N
 * zero) and 32-value block b, four 64-byte lines; line j holds bytes 4j .. 4j + 3 of block b
 * of each of the 16 rows (dword lane s = row s). One load and the nibble split (VPANDQ,
 * VPSRLW, VPANDQ) then give two vectors of 4 consecutive values per row: values 4j .. 4j + 3
 * (low nibbles) and 16 + 4j .. 16 + 4j + 3 (high nibbles), looked up in u = cb - min (VPSHUFB;
 * none for Q4_0's cb[i] = cb[0] + i) as in q4_avx512_common.h, and each activation row adds
 * VPDPBUSD(u, the broadcast dword of its 4 matching activations) into its int32 accumulator
 * (lane = weight row). Per 64 values and 16 weight rows: 8 loads, 24 nibble ops, 16 VPSHUFB,
 * shared by the tile's activation rows, and 16 VPDPBUSD per activation row. Per group, each
 * row adds min * sum(x) (once per activation row and group, shared by the tiles) and
 * ((float)isum * ws) * xs to its float accumulator, groups in order: q4_gemv_1x1_scalar's
 * arithmetic, bit for bit. Groups are taken Q4W_GCH at a time (the sums' buffer); a later pass
 * continues each output's float chain from out.
 *
 * decode_packed: at M = 1 the packed tiles are one contiguous stream, prefetched Q4W_PF_BYTES
 * ahead, at the GEMV's instruction count per value (q4_gemv_1x16_avx512_vnni), so a model
 * decoding on this tier keeps only the packed copy. Each tile starts with the transpose of its
 * 16 rows' scales, so the scales of the tile Q4W_PF_TILES ahead are prefetched too: from
 * memory, that transpose otherwise stalls the stream (docs/performance.md). */
#include "../q4_avx512_common.h"

#include <stdlib.h>

#define Q4W_MR 8
#define Q4W_NR 16
#define Q4W_GCH 128       /* groups per pass */
#define Q4W_PF_BYTES 9216 /* software prefetch distance in the packed stream */
#define Q4W_PF_TILES 4    /* the row scales are prefetched this many tiles ahead */

/* Bytes of one packed tile: 16 rows of K / 2 bytes. */
static size_t q4w_pack_size(size_t N, size_t K, size_t gs) {
    (void)gs;
    return (N + Q4W_NR - 1) / Q4W_NR * Q4W_NR * (K / 2);
}

/* Byte offset in a tile of byte i (0..15) of block b of row s. */
static inline size_t q4w_off(size_t b, size_t s, size_t i) {
    return ((b * 4 + i / 4) * Q4W_NR + s) * 4 + i % 4;
}

static void q4w_pack(uint8_t *dst, const uint8_t *w, size_t N, size_t K, size_t gs) {
    const size_t rb = K / 2, tb = q4w_pack_size(Q4W_NR, K, gs);
    for (size_t n = 0; n < N; n += Q4W_NR) {
        uint8_t *t = dst + n / Q4W_NR * tb;
        for (size_t s = 0; s < Q4W_NR; s++)
            for (size_t b = 0; b < K / 32; b++)
                for (size_t i = 0; i < 16; i++)
                    t[q4w_off(b, s, i)] = n + s < N ? w[(n + s) * rb + b * 16 + i] : 0;
    }
}

static void q4w_unpack(uint8_t *w, const uint8_t *src, size_t N, size_t K, size_t gs) {
    const size_t rb = K / 2, tb = q4w_pack_size(Q4W_NR, K, gs);
    for (size_t n = 0; n < N; n++) {
        const uint8_t *t = src + n / Q4W_NR * tb;
        for (size_t b = 0; b < K / 32; b++)
            for (size_t i = 0; i < 16; i++) w[n * rb + b * 16 + i] = t[q4w_off(b, n % Q4W_NR, i)];
    }
}

IFZ_INLINE __m512i q4w_bcast(const int8_t *p) {
    int32_t d;
    memcpy(&d, p, 4);
    return _mm512_set1_epi32(d);
}

/* MB activation rows (xr[i], their sums msx[i], scales xsr[i]) against the packed tile tp
 * (16 rows; row scales sr, nr valid rows), groups [ga, gend). */
IFZ_INLINE void q4w_tile(float *const orow[Q4W_MR], const int8_t *const xr[Q4W_MR],
                         const float *const xsr[Q4W_MR], int32_t msx[Q4W_MR][Q4W_GCH],
                         const uint8_t *tp, const float *const sr[16], __mmask16 om, size_t gs,
                         size_t ga, size_t gend, __m512i lut, const int MB, const int mode) {
    __m512 acc[Q4W_MR];
    for (int i = 0; i < MB; i++) acc[i] = ga ? _mm512_maskz_loadu_ps(om, orow[i]) : _mm512_setzero_ps();
    _Alignas(64) float st[16 * 16];
    const size_t bpg = gs / 32;
    for (size_t g0 = ga; g0 < gend; g0 += 16) {
        const size_t gb = gend - g0 < 16 ? gend - g0 : 16;
        ifz_scales_t16(st, 16, sr, g0, gb);
        for (size_t j = 0; j < gb; j++) {
            const size_t g = g0 + j;
            __m512i ai[Q4W_MR];
            for (int i = 0; i < MB; i++) ai[i] = _mm512_set1_epi32(msx[i][g - ga]);
            for (size_t b = g * bpg; b < (g + 1) * bpg; b++) {
                const uint8_t *lp = tp + b * 256;
                _mm_prefetch((const char *)lp + Q4W_PF_BYTES, _MM_HINT_T0);
                _mm_prefetch((const char *)lp + Q4W_PF_BYTES + 64, _MM_HINT_T0);
                _mm_prefetch((const char *)lp + Q4W_PF_BYTES + 128, _MM_HINT_T0);
                _mm_prefetch((const char *)lp + Q4W_PF_BYTES + 192, _MM_HINT_T0);
                IFZ_UNROLL
                for (int q = 0; q < 4; q++) {
                    __m512i lo, hi;
                    q4z_expand(_mm512_loadu_si512(lp + 64 * q), lut, &lo, &hi, mode);
                    for (int i = 0; i < MB; i++) {
                        const int8_t *x = xr[i] + b * 32 + 4 * q;
                        ai[i] = _mm512_dpbusd_epi32(ai[i], lo, q4w_bcast(x));
                        ai[i] = _mm512_dpbusd_epi32(ai[i], hi, q4w_bcast(x + 16));
                    }
                }
            }
            const __m512 wsv = _mm512_load_ps(st + j * 16);
            for (int i = 0; i < MB; i++) {
                const __m512 p = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(ai[i]), wsv),
                                               _mm512_set1_ps(xsr[i][g]));
                acc[i] = _mm512_add_ps(acc[i], p);
            }
        }
    }
    for (int i = 0; i < MB; i++) _mm512_mask_storeu_ps(orow[i], om, acc[i]);
}

/* Activation rows [m0, m0 + mb) x tiles of [n0, n1) over groups [ga, gend). */
IFZ_INLINE void q4w_pass(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t m0,
                         size_t mb, const uint8_t *w, const float *ws, int32_t msx[Q4W_MR][Q4W_GCH],
                         size_t n0, size_t n1, size_t K, size_t gs, size_t ga, size_t gend,
                         __m512i lut, const int MB, const int mode) {
    const size_t ng = K / gs, tb = (size_t)Q4W_NR * (K / 2);
    const int8_t *xr[Q4W_MR];
    const float *xsr[Q4W_MR];
    for (size_t i = 0; i < Q4W_MR; i++) {
        const size_t m = m0 + (i < mb ? i : mb - 1);
        xr[i] = xq + m * K;
        xsr[i] = xs + m * ng;
    }
    for (size_t n = n0; n < n1; n += Q4W_NR) {
        const size_t nr = n1 - n < Q4W_NR ? n1 - n : Q4W_NR;
        const __mmask16 om = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
        const float *sr[16];
        for (size_t r = 0; r < 16; r++) sr[r] = ws + (n + (r < nr ? r : nr - 1)) * ng;
        { /* the scales of the tile Q4W_PF_TILES ahead, past n1 too (the next task's, as the
           * weight prefetch runs on; a prefetch never faults) */
            const char *ps = (const char *)(ws + (n + Q4W_PF_TILES * Q4W_NR) * ng);
            for (size_t c = 0; c < Q4W_NR * ng * sizeof(float); c += 64)
                _mm_prefetch(ps + c, _MM_HINT_T0);
        }
        float *orow[Q4W_MR];
        for (size_t i = 0; i < Q4W_MR; i++) orow[i] = out + (m0 + (i < mb ? i : mb - 1)) * ldo + n;
        q4w_tile(orow, xr, xsr, msx, w + n / Q4W_NR * tb, sr, om, gs, ga, gend, lut, MB, mode);
    }
}

/* The rows of an interface case this layout does not tile (gs not a multiple of 32 dividing
 * K; not produced by the loaders): the scalar kernel on the unpacked rows. */
static void q4w_fallback(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                         const uint8_t *w, const float *ws, const int8_t *cb, size_t n0,
                         size_t n1, size_t K, size_t gs) {
    uint8_t *rows = malloc((n1 > n0 ? n1 - n0 : 1) * (K / 2 ? K / 2 : 1));
    if (!rows) abort();
    for (size_t n = n0; n < n1; n += Q4W_NR) {
        const size_t nr = n1 - n < Q4W_NR ? n1 - n : Q4W_NR;
        q4w_unpack(rows + (n - n0) * (K / 2), w + n / Q4W_NR * q4w_pack_size(Q4W_NR, K, gs),
                   nr, K, gs);
    }
    const size_t ng = gs ? K / gs : 0;
    for (size_t m = 0; m < M; m++)
        if_q4_gemv_1x1_scalar(out + m * ldo + n0, xq + m * K, xs + m * ng, rows, ws + n0 * ng,
                              cb, 0, n1 - n0, K, gs);
    free(rows);
}

void if_q4_gemm_8x16_avx512_vnni(float *out, size_t ldo, const int8_t *xq, const float *xs,
                                 size_t M, const uint8_t *w, const float *ws, const int8_t *cb,
                                 size_t n0, size_t n1, size_t K, size_t gs) {
    if (n1 <= n0 || M == 0) return;
    if (gs == 0 || gs % 32 || K % gs) {
        q4w_fallback(out, ldo, xq, xs, M, w, ws, cb, n0, n1, K, gs);
        return;
    }
    const size_t ng = K / gs;
    int32_t cmin, msx[Q4W_MR][Q4W_GCH];
    uint8_t lb[16];
    const int mode = q4z_mode(cb, &cmin, lb);
    const __m512i lut = q4z_lut(lb);
    for (size_t m0 = 0; m0 < M; m0 += Q4W_MR) {
        const size_t mb = M - m0 < Q4W_MR ? M - m0 : Q4W_MR;
        for (size_t ga = 0; ga < ng; ga += Q4W_GCH) {
            const size_t gend = ng - ga < Q4W_GCH ? ng : ga + Q4W_GCH;
            for (size_t i = 0; i < mb; i++)
                q4z_xsums(msx[i], xq + (m0 + i) * K + ga * gs, gend - ga, gs, cmin);
#define Q4W_RUN(MB) \
    do { \
        if (mode == Q4Z_LIN) \
            q4w_pass(out, ldo, xq, xs, m0, mb, w, ws, msx, n0, n1, K, gs, ga, gend, lut, MB, Q4Z_LIN); \
        else \
            q4w_pass(out, ldo, xq, xs, m0, mb, w, ws, msx, n0, n1, K, gs, ga, gend, lut, MB, Q4Z_LUT); \
    } while (0)
            switch (mb) {
            case 1: Q4W_RUN(1); break;
            case 2: Q4W_RUN(2); break;
            case 3: Q4W_RUN(3); break;
            case 4: Q4W_RUN(4); break;
            case 5: Q4W_RUN(5); break;
            case 6: Q4W_RUN(6); break;
            case 7: Q4W_RUN(7); break;
            default: Q4W_RUN(8); break;
            }
#undef Q4W_RUN
        }
    }
}

const if_q4_gemm_kernel if_k_q4_gemm_8x16_avx512_vnni = {.name = "q4_gemm_8x16_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = Q4W_MR, .nr = Q4W_NR,
    .run = if_q4_gemm_8x16_avx512_vnni, .pack_size = q4w_pack_size, .pack = q4w_pack,
    .unpack = q4w_unpack, .decode_packed = 1};
