/* legacy_gemm_x86.h - the x86 legacy-block GEMM body (legacy/ *_gemm_*_avx2.c, *_avx_vnni.c,
 * *_avx512_vnni.c), one source compiled per ISA: 16 weight rows per 512-bit vector under
 * AVX-512 VNNI, 8 per 256-bit vector under AVX-VNNI and AVX2.
 *
 * Outer-product layout, expanded per call (the weights stay in the file's blocks): per tile
 * of NR weight rows and span of IFLG_SB blocks, each block's unsigned values go to an L1
 * scratch as 8 vectors, vector k lane r = row r's values 4k..4k+3 (one byte each), with the
 * rows' f16 scales (and minimums) as float vectors. Then per MR activation rows and block,
 * VPDPBUSD of each vector against the activation's 4 bytes broadcast (AVX2: VPMADDUBSW pairs,
 * two added in int16, at most 4 * 31 * 127, then VPMADDWD against ones) leaves one int32 vector
 * per activation row holding the NR rows' exact block sums: no horizontal reduction. The
 * zero-point term starts that sum (-z * xs, xs the block's activation sum from the int16 sums
 * of 16), so the int32 equals the scalar kernel's dot - z xs; then the scalar kernel's float step
 * lane-wise in block order, its running sums in registers across the span (stored and
 * reloaded exactly between spans).
 *
 * A type plugs in with its value expansion (a small inline function below, passed to
 * iflg_gemm with the type's zero point): the body reads the f16 scale at byte 0 of a block and,
 * when t.min, the f16 minimum at byte 2. Q8_0's values are signed 8-bit (iflg_s8): VNNI takes
 * them + 128 with z = 128; AVX2 keeps them signed and forms each product as |q| times x with
 * q's sign (VPSIGNB), one VPMADDUBSW per int16 sum. */
#ifndef IF_LEGACY_GEMM_X86_H
#define IF_LEGACY_GEMM_X86_H

#include <immintrin.h>

#include "kquant_avx2.h"
#include "legacy_common.h"

#define IFLG_INLINE static inline __attribute__((always_inline))
#define IFLG_UNROLL _Pragma("GCC unroll 16")
/* Blocks per span: the span's expanded values (SB * NV * 8 vectors, 16 KiB) and scales stay
 * in L1 while every activation row of the call runs over them. */
#if defined(__AVX512F__)
#define IFLG_SB 16
#else
#define IFLG_SB 32
#endif

#if defined(__AVX512F__)
/* AVX-512: tiles of two 16-row halves (NV), so each broadcast activation dword feeds two
 * VPDPBUSDs, 6 activation rows a pass (24 accumulators). */
#define IFLG_NR 16
#define IFLG_NV 2
#ifndef IFLG_MR
#define IFLG_MR 6
#endif
typedef __m512i iflg_vi;
typedef __m512 iflg_vf;
typedef __mmask16 iflg_mask;
#define iflg_and _mm512_and_si512
#define iflg_xor _mm512_xor_si512
#define iflg_srli16 _mm512_srli_epi16
#define iflg_srli32 _mm512_srli_epi32
#define iflg_set1_8 _mm512_set1_epi8
#define iflg_set1_32 _mm512_set1_epi32
#define iflg_zero _mm512_setzero_si512
#define iflg_addf _mm512_add_ps
#define iflg_mulf _mm512_mul_ps
#define iflg_cvt _mm512_cvtepi32_ps
#define iflg_set1f _mm512_set1_ps
#define iflg_zerof _mm512_setzero_ps
#else
#define IFLG_NR 8
#define IFLG_NV 1
#ifndef IFLG_MR
#define IFLG_MR 4
#endif
typedef __m256i iflg_vi;
typedef __m256 iflg_vf;
typedef __m256i iflg_mask;
#define iflg_and _mm256_and_si256
#define iflg_xor _mm256_xor_si256
#define iflg_srli16 _mm256_srli_epi16
#define iflg_srli32 _mm256_srli_epi32
#define iflg_set1_8 _mm256_set1_epi8
#define iflg_set1_32 _mm256_set1_epi32
#define iflg_zero _mm256_setzero_si256
#define iflg_addf _mm256_add_ps
#define iflg_mulf _mm256_mul_ps
#define iflg_cvt _mm256_cvtepi32_ps
#define iflg_set1f _mm256_set1_ps
#define iflg_zerof _mm256_setzero_ps
#endif

IFLG_INLINE int32_t iflg_ld32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* T[k] lane r = dword k of the 16 bytes at rows[r] + off: register i holds rows i, 4 + i, ...
 * in its 128-bit lanes, and the in-lane 4x4 dword transpose puts row 4l + i in lane 4l + i. */
IFLG_INLINE void iflg_col4(const uint8_t *const rows[IFLG_NR], size_t off, iflg_vi T[4]) {
#define IFLG_L(r) _mm_loadu_si128((const __m128i *)(const void *)(rows[r] + off))
    iflg_vi R[4];
    IFLG_UNROLL
    for (int i = 0; i < 4; i++) {
#if defined(__AVX512F__)
        const __m512i r01 =
            _mm512_inserti32x4(_mm512_castsi128_si512(IFLG_L(i)), IFLG_L(4 + i), 1);
        R[i] = _mm512_inserti32x4(_mm512_inserti32x4(r01, IFLG_L(8 + i), 2), IFLG_L(12 + i), 3);
#else
        R[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(IFLG_L(i)), IFLG_L(4 + i), 1);
#endif
    }
#undef IFLG_L
#if defined(__AVX512F__)
    const iflg_vi a = _mm512_unpacklo_epi32(R[0], R[1]), b = _mm512_unpackhi_epi32(R[0], R[1]);
    const iflg_vi c = _mm512_unpacklo_epi32(R[2], R[3]), e = _mm512_unpackhi_epi32(R[2], R[3]);
    T[0] = _mm512_unpacklo_epi64(a, c), T[1] = _mm512_unpackhi_epi64(a, c);
    T[2] = _mm512_unpacklo_epi64(b, e), T[3] = _mm512_unpackhi_epi64(b, e);
#else
    const iflg_vi a = _mm256_unpacklo_epi32(R[0], R[1]), b = _mm256_unpackhi_epi32(R[0], R[1]);
    const iflg_vi c = _mm256_unpacklo_epi32(R[2], R[3]), e = _mm256_unpackhi_epi32(R[2], R[3]);
    T[0] = _mm256_unpacklo_epi64(a, c), T[1] = _mm256_unpackhi_epi64(a, c);
    T[2] = _mm256_unpacklo_epi64(b, e), T[3] = _mm256_unpackhi_epi64(b, e);
#endif
}

/* The 4-bit values of a block (Q4_0, Q4_1): value j is nibble j % 16 of qs byte j % 16 (low for
 * j < 16), so vectors 0-3 are the qs dwords' low nibbles and 4-7 their high ones. */
IFLG_INLINE void iflg_u4(ifl_type t, const uint8_t *const rows[IFLG_NR], size_t off,
                         iflg_vi v[8]) {
    iflg_vi T[4];
    iflg_col4(rows, off + t.qs, T);
    const iflg_vi m4 = iflg_set1_8(15);
    IFLG_UNROLL
    for (int k = 0; k < 4; k++) {
        v[k] = iflg_and(T[k], m4);
        v[k + 4] = iflg_and(iflg_srli16(T[k], 4), m4);
    }
}

/* The 5-bit values (Q5_0, Q5_1): the 4-bit ones with bit j of the little-endian qh word as
 * bit 4 of value j. Vector k byte i of a lane is value 4k + i: VPSHUFB copies qh byte k / 2 to
 * the lane's 4 bytes, and byte i tests bit 4 (k % 2) + i of it. */
IFLG_INLINE void iflg_u5(ifl_type t, const uint8_t *const rows[IFLG_NR], size_t off,
                         iflg_vi v[8]) {
    iflg_u4(t, rows, off, v);
    iflg_vi H[4];
    iflg_col4(rows, off + t.qh, H);
    const iflg_vi sixteen = iflg_set1_8(16);
    IFLG_UNROLL
    for (int k = 0; k < 8; k++) {
        const int hb = (k / 2) * 0x01010101; /* qh byte k / 2, in each byte of an index */
        const iflg_vi bit = iflg_set1_32((int)(0x08040201u << (4 * (k % 2))));
#if defined(__AVX512F__)
        const iflg_vi idx =
            _mm512_set4_epi32(0x0c0c0c0c + hb, 0x08080808 + hb, 0x04040404 + hb, hb);
        const __mmask64 on = _mm512_test_epi8_mask(_mm512_shuffle_epi8(H[0], idx), bit);
        v[k] = _mm512_mask_add_epi8(v[k], on, v[k], sixteen);
#else
        const __m128i i128 = _mm_setr_epi32(hb, 0x04040404 + hb, 0x08080808 + hb, 0x0c0c0c0c + hb);
        const iflg_vi idx = _mm256_broadcastsi128_si256(i128);
        const iflg_vi on = _mm256_and_si256(_mm256_shuffle_epi8(H[0], idx), bit);
        v[k] = _mm256_or_si256(v[k], _mm256_and_si256(_mm256_cmpeq_epi8(on, bit), sixteen));
#endif
    }
}

/* Q8_0 is the one type whose values are signed bytes (34-byte blocks, no minimum, no qh). */
#define IFLG_S8(t) ((t).bb == IF_Q80_BLOCK_BYTES)
/* Its zero point: VPDPBUSD takes value + 128 (0..255, exact in int32, 128 xs subtracted);
 * VPMADDUBSW would saturate on that (2 * 255 * 127 > 32767), so AVX2 keeps the signed values. */
#if defined(__AVX512VNNI__) || defined(__AVXVNNI__)
#define IFLG_Z80 128
#else
#define IFLG_Z80 0
#endif

/* The 8-bit values (Q8_0): value j is byte j of qs, so vectors 0-3 are the first 16 bytes'
 * dwords and 4-7 the last 16's; + 128 (the sign bit flipped) under VNNI. */
IFLG_INLINE void iflg_s8(ifl_type t, const uint8_t *const rows[IFLG_NR], size_t off,
                         iflg_vi v[8]) {
    iflg_col4(rows, off + t.qs, v);
    iflg_col4(rows, off + t.qs + 16, v + 4);
#if IFLG_Z80
    const iflg_vi flip = iflg_set1_8((char)0x80);
    IFLG_UNROLL
    for (int k = 0; k < 8; k++) v[k] = iflg_xor(v[k], flip);
#endif
}

/* f16 bits in the low half of each dword -> floats, exactly as ifk_f16 (VCVTPH2PS under
 * AVX-512; without F16C kquant_avx2.h's exact bit-field conversion). */
IFLG_INLINE iflg_vf iflg_f16(iflg_vi x) {
#if defined(__AVX512F__)
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(x));
#else
    return ifky_f16_dw(_mm256_and_si256(x, _mm256_set1_epi32(0xffff)));
#endif
}

/* Per activation row i: dot[i] += the block's products, 8 value vectors W against x[i]'s 32
 * bytes (4 at a time, broadcast). AVX2: VPMADDUBSW pairs summed in int16 over g vectors (2g
 * products of at most vmax * 128, vmax 15 for 4 bits (g = 8), 31 for 5 (g = 4): below 2^15),
 * then VPMADDWD against ones into int32; g = 0: signed values (Q8_0), |w| times x with w's sign
 * (VPSIGNB; a pair at most 2 * 128 * 127 for the Q8 rule's |x| <= 127), each into int32. */
IFLG_INLINE void iflg_dots(const int mr, const int g, iflg_vi dot[IFLG_MR][IFLG_NV],
                           const iflg_vi W[IFLG_NV][8], const int8_t *const x[IFLG_MR]) {
#if defined(__AVX512VNNI__) || defined(__AVXVNNI__)
    (void)g;
    IFLG_UNROLL
    for (int k = 0; k < 8; k++) {
        iflg_vi w[IFLG_NV];
        IFLG_UNROLL
        for (int v = 0; v < IFLG_NV; v++) w[v] = W[v][k];
        IFLG_UNROLL
        for (int i = 0; i < mr; i++) {
            const iflg_vi xb = iflg_set1_32(iflg_ld32(x[i] + 4 * k));
            IFLG_UNROLL
            for (int v = 0; v < IFLG_NV; v++) {
#if defined(__AVX512F__)
                dot[i][v] = _mm512_dpbusd_epi32(dot[i][v], w[v], xb);
#elif defined(__AVX512VNNI__)
                dot[i][v] = _mm256_dpbusd_epi32(dot[i][v], w[v], xb);
#else
                dot[i][v] = _mm256_dpbusd_avx_epi32(dot[i][v], w[v], xb);
#endif
            }
        }
    }
#else
    const __m256i ones = _mm256_set1_epi16(1);
    if (g == 0) {
        IFLG_UNROLL
        for (int k = 0; k < 8; k++) {
            const __m256i w = W[0][k], aw = _mm256_abs_epi8(w); /* -128 -> 0x80: 128 unsigned */
            IFLG_UNROLL
            for (int i = 0; i < mr; i++) {
                const __m256i xs = _mm256_sign_epi8(iflg_set1_32(iflg_ld32(x[i] + 4 * k)), w);
                dot[i][0] = _mm256_add_epi32(
                    dot[i][0], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, xs), ones));
            }
        }
        return;
    }
    IFLG_UNROLL
    for (int k0 = 0; k0 < 8; k0 += g) {
        __m256i p[IFLG_MR];
        IFLG_UNROLL
        for (int k = k0; k < k0 + g; k++) {
            const __m256i w = W[0][k];
            IFLG_UNROLL
            for (int i = 0; i < mr; i++) {
                const __m256i q = _mm256_maddubs_epi16(w, iflg_set1_32(iflg_ld32(x[i] + 4 * k)));
                p[i] = k == k0 ? q : _mm256_add_epi16(p[i], q);
                __asm__("" : "+x"(p[i])); /* keeps the chain: a reassociated tree spills */
            }
        }
        IFLG_UNROLL
        for (int i = 0; i < mr; i++)
            dot[i][0] = _mm256_add_epi32(dot[i][0], _mm256_madd_epi16(p[i], ones));
    }
#endif
}

/* Output lanes: the first nr of NR. */
IFLG_INLINE iflg_mask iflg_lanes(size_t nr) {
#if defined(__AVX512F__)
    return (iflg_mask)(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
#else
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)nr), idx);
#endif
}
IFLG_INLINE iflg_vf iflg_loadf(const float *p, iflg_mask m) {
#if defined(__AVX512F__)
    return _mm512_maskz_loadu_ps(m, p);
#else
    return _mm256_maskload_ps(p, m);
#endif
}
IFLG_INLINE void iflg_storef(float *p, iflg_mask m, iflg_vf v) {
#if defined(__AVX512F__)
    _mm512_mask_storeu_ps(p, m, v);
#else
    _mm256_maskstore_ps(p, m, v);
#endif
}

/* One block's activation sums xs = xsum[2b] + xsum[2b + 1] for nbs blocks from b (one dword of
 * int16 pairs per block, masked at the span's end): -z xs as int32 (the dot product's start),
 * or with a minimum (float)xs. */
IFLG_INLINE void iflg_xs(int32_t *o, const int16_t *xsum, size_t nbs, int min, int32_t z) {
    for (size_t b = 0; b < nbs; b += IFLG_NR) {
        const size_t n = nbs - b < IFLG_NR ? nbs - b : IFLG_NR;
#if defined(__AVX512F__)
        const __m512i s = _mm512_madd_epi16(_mm512_maskz_loadu_epi32(iflg_lanes(n), xsum + 2 * b),
                                            _mm512_set1_epi16((int16_t)(min ? 1 : -z)));
        _mm512_storeu_si512(o + b, min ? _mm512_castps_si512(_mm512_cvtepi32_ps(s)) : s);
#else
        const __m256i s = _mm256_madd_epi16(
            _mm256_maskload_epi32((const int *)(const void *)(xsum + 2 * b), iflg_lanes(n)),
            _mm256_set1_epi16((int16_t)(min ? 1 : -z)));
        _mm256_storeu_si256((__m256i *)(void *)(o + b),
                            min ? _mm256_castps_si256(_mm256_cvtepi32_ps(s)) : s);
#endif
    }
}

/* The expanded span of a tile. */
typedef struct iflg_span {
    iflg_vi w[IFLG_SB][IFLG_NV][8];
    iflg_vf d[IFLG_SB][IFLG_NV], m[IFLG_SB][IFLG_NV];
} iflg_span;

/* mr activation rows (from m0) over the span's nbs blocks from b0: the running sums from out
 * (0 at the first span), the blocks in order, back to out. The rows' block sums of the span go
 * to the stack first (as -z xs, or as floats with a minimum). */
IFLG_INLINE void iflg_rows(ifl_type t, const int mr, int32_t z, const iflg_span *S, float *out,
                           size_t ldo, const int8_t *xq, const float *xd, const int16_t *xsum,
                           size_t K, size_t b0, size_t nbs, const iflg_mask om[IFLG_NV]) {
    const size_t nb = K / IF_QL;
    _Alignas(64) int32_t xs[IFLG_MR][IFLG_SB + IFLG_NR]; /* -z xs, or (float)xs */
    iflg_vf acc[IFLG_MR][IFLG_NV];
    IFLG_UNROLL
    for (int i = 0; i < mr; i++) {
        iflg_xs(xs[i], xsum + i * (K / 16) + 2 * b0, nbs, t.min, z);
        IFLG_UNROLL
        for (int v = 0; v < IFLG_NV; v++)
            acc[i][v] = b0 ? iflg_loadf(out + i * ldo + v * IFLG_NR, om[v]) : iflg_zerof();
    }
    /* The activations are read where they are (row i at i K bytes from the span's start): a
     * copy to the stack per tile cost a fifth of the time at K = 576. */
    const int8_t *xb = xq + b0 * IF_QL;
    const float *xdb0 = xd + b0;
    for (size_t b = 0; b < nbs; b++) {
        iflg_vi dot[IFLG_MR][IFLG_NV];
        const int8_t *x[IFLG_MR];
        IFLG_UNROLL
        for (int i = 0; i < mr; i++) {
            IFLG_UNROLL
            for (int v = 0; v < IFLG_NV; v++)
                dot[i][v] = t.min ? iflg_zero() : iflg_set1_32(xs[i][b]);
            x[i] = xb + i * K + b * IF_QL;
        }
        iflg_dots(mr, IFLG_S8(t) ? 0 : t.qh ? 4 : 8, dot, S->w[b], x);
        IFLG_UNROLL
        for (int i = 0; i < mr; i++) {
            const iflg_vf xdb = iflg_set1f(xdb0[i * nb + b]);
            IFLG_UNROLL
            for (int v = 0; v < IFLG_NV; v++) {
                acc[i][v] = iflg_addf(acc[i][v], iflg_mulf(iflg_mulf(S->d[b][v], xdb),
                                                           iflg_cvt(dot[i][v])));
                if (t.min) {
                    float xf;
                    memcpy(&xf, &xs[i][b], sizeof xf);
                    acc[i][v] = iflg_addf(acc[i][v],
                                          iflg_mulf(iflg_mulf(S->m[b][v], xdb), iflg_set1f(xf)));
                }
            }
        }
    }
    IFLG_UNROLL
    for (int i = 0; i < mr; i++) {
        IFLG_UNROLL
        for (int v = 0; v < IFLG_NV; v++) iflg_storef(out + i * ldo + v * IFLG_NR, om[v], acc[i][v]);
    }
}

typedef void (*iflg_expand_fn)(ifl_type, const uint8_t *const[IFLG_NR], size_t, iflg_vi[8]);

#if defined(__AVX512F__)
/* Block b of a Q8_0 or Q4_0 16-row group at g (if_q80_pack_x16, if_q40_pack_x16): the values
 * are already vectors of the 16 rows (Q8_0 + 128 here; Q4_0's low then high nibbles, as
 * iflg_u4 gives them), the scales one 32-byte load. */
IFLG_INLINE void iflg_x16(ifl_type t, const uint8_t *g, size_t b, iflg_vi v[8], iflg_vf *d) {
    const int s8 = IFLG_S8(t);
    const uint8_t *pr = g + b / 2 * 32 * t.bb;
    const size_t e = b & 1;
    if (s8) {
        const iflg_vi flip = iflg_set1_8((char)0x80);
        IFLG_UNROLL
        for (int k = 0; k < 8; k++)
            v[k] = iflg_xor(
                _mm512_loadu_si512((const void *)(pr + 64 + 512 * e + 64 * (size_t)k)), flip);
    } else {
        const iflg_vi m4 = iflg_set1_8(15);
        IFLG_UNROLL
        for (int k = 0; k < 4; k++) {
            const iflg_vi q =
                _mm512_loadu_si512((const void *)(pr + 64 + 256 * e + 64 * (size_t)k));
            v[k] = iflg_and(q, m4);
            v[k + 4] = iflg_and(iflg_srli16(q, 4), m4);
        }
    }
    *d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(pr + 32 * e)));
}
#endif

/* The GEMM of type t with value expansion `expand` and zero point z (0 with a minimum); x16:
 * Q8_0 or Q4_0 on 16-row groups (AVX-512 only; n0 a multiple of 16, whole groups read). */
IFLG_INLINE void iflg_gemm(ifl_type t, iflg_expand_fn expand, int32_t z, float *out, size_t ldo,
                           const int8_t *xq, const float *xd, const int16_t *xsum, size_t M,
                           const uint8_t *w, size_t n0, size_t n1, size_t K, const int x16) {
    const size_t nb = K / IF_QL, rowbytes = nb * t.bb;
#if !defined(__AVX512F__)
    (void)x16; /* row groups are AVX-512's */
#endif
    _Alignas(64) iflg_span S;
    for (size_t n = n0; n < n1; n += IFLG_NR * IFLG_NV) {
        /* rows past n1 repeat the last (a half wholly past n1 repeats the one before, mask 0):
         * read, never stored */
        const uint8_t *rows[IFLG_NV][IFLG_NR];
        iflg_mask om[IFLG_NV];
        IFLG_UNROLL
        for (int v = 0; v < IFLG_NV; v++) {
            const size_t nv = n + (size_t)v * IFLG_NR;
            if (nv >= n1) {
                memcpy(rows[v], rows[v - 1], sizeof rows[v]);
                om[v] = iflg_lanes(0);
                continue;
            }
            const size_t nr = n1 - nv < IFLG_NR ? n1 - nv : IFLG_NR;
            for (size_t r = 0; r < IFLG_NR; r++)
                rows[v][r] = w + (nv + (r < nr ? r : nr - 1)) * rowbytes;
            om[v] = iflg_lanes(nr);
        }
        for (size_t b0 = 0; b0 < nb; b0 += IFLG_SB) {
            const size_t nbs = nb - b0 < IFLG_SB ? nb - b0 : IFLG_SB;
            for (size_t b = 0; b < nbs; b++) {
                const size_t off = (b0 + b) * t.bb;
                IFLG_UNROLL
                for (int v = 0; v < IFLG_NV; v++) {
#if defined(__AVX512F__)
                    if (x16) {
                        iflg_x16(t, rows[v][0], b0 + b, S.w[b][v], &S.d[b][v]);
                        continue;
                    }
#endif
                    expand(t, rows[v], off, S.w[b][v]);
                    iflg_vi h[4];
                    iflg_col4(rows[v], off, h);
                    S.d[b][v] = iflg_f16(h[0]);
                    if (t.min) S.m[b][v] = iflg_f16(iflg_srli32(h[0], 16));
                }
            }
            for (size_t m = 0; m < M; m += IFLG_MR) {
                const size_t mr = M - m < IFLG_MR ? M - m : IFLG_MR;
                float *o = out + m * ldo + n;
                const int8_t *xm = xq + m * K;
                const float *xdm = xd + m * nb;
                const int16_t *xsm = xsum + m * (K / 16);
#define IFLG_CASE(R)                                                                              \
    case R: iflg_rows(t, R, z, &S, o, ldo, xm, xdm, xsm, K, b0, nbs, om); break;
                switch (mr) {
#if IFLG_MR > 1
                    IFLG_CASE(1)
#endif
#if IFLG_MR > 2
                    IFLG_CASE(2)
#endif
#if IFLG_MR > 3
                    IFLG_CASE(3)
#endif
#if IFLG_MR > 4
                    IFLG_CASE(4)
#endif
#if IFLG_MR > 5
                    IFLG_CASE(5)
#endif
#if IFLG_MR > 6
                    IFLG_CASE(6)
#endif
#if IFLG_MR > 7
                    IFLG_CASE(7)
#endif
#if IFLG_MR > 8
                    IFLG_CASE(8)
#endif
#if IFLG_MR > 9
                    IFLG_CASE(9)
#endif
#if IFLG_MR > 10
                    IFLG_CASE(10)
#endif
#if IFLG_MR > 11
                    IFLG_CASE(11)
#endif
                default: iflg_rows(t, IFLG_MR, z, &S, o, ldo, xm, xdm, xsm, K, b0, nbs, om);
                }
#undef IFLG_CASE
            }
        }
    }
}

#endif
