/* q6k_gemm_16x16_amx_body.h - the AMX Q6_K GEMM body (kquant_amx.h), written once and
 * compiled twice: with real tile instructions (q6k_gemm_16x16_amx.c, amx_tiles.h) and with the
 * tile operations emulated in plain C (csrc/testing/q6k_gemm_16x16_amx_emulated.c, amx_emu.h:
 * the test-only "amx_emulated" table). Both compile with AVX-512 flags: only the tile
 * operations differ. The includer defines Q6KA_FN (the function's name), and
 * AMX_USE_TILE_EMULATION for the emulated twin.
 *
 * Per block and 16 weight rows the 6-bit values u = q + 32
 * are expanded once into four sets of VNNI B tiles, one per 2-bit piece of the int8 scales
 * (see q6ka_blk); then per 16 activation rows and 64-value window 4 TDPs (K = 64; TDPBSSD for
 * the signed top piece), 4 tile stores per block, the readout sumi = P0 + 4 P1 + 16 P2 + 64 P3
 * less 32 x the scales times xsum (VPMADDWD), then the scalar kernel's float step, block after
 * block. The same integers and float chain as q6k_gemm_1x1_scalar, so the same bits;
 * activation and weight rows past M and n1 are never read (tile rows configured to the tail,
 * masked gathers; d is read as the top half of the dword ending the block). */
#ifndef IF_Q6K_GEMM_16X16_AMX_BODY_H
#define IF_Q6K_GEMM_16X16_AMX_BODY_H

#include "../kquant_amx.h"

/* One block of 16 weight rows, expanded: the unsigned values u times the four 2-bit pieces
 * of their sub-block's int8 scale, sc = p0 + 4 p1 + 16 p2 + 64 p3 (p0..p2 in [0, 3]: u p <=
 * 189, unsigned; p3 = sc >> 6 in [-2, 1]: u p3 in [-126, 63], signed), in VNNI order per
 * 64-value window (sub-blocks 4w .. 4w + 3), so sum_j sc_j (u_j . x) = P0 + 4 P1 + 16 P2 +
 * 64 P3 with Pi = (u pi) . x. 16 KiB: expanded one block at a time. */
typedef struct q6ka_blk {
    uint8_t p[4][4][16][64]; /* piece, window, VNNI row (4 values), 4 bytes per weight row */
    int32_t sc32[8][16];     /* 32 x the scales of sub-blocks 2i, 2i + 1 as an int16 pair */
    float d[16];
} q6ka_blk;

/* 16 bytes (two per 16-bit lane, each u <= 63) times the int16 lanes of s: the low byte of
 * each product in its byte (p3 < 0 makes a product negative, so the bytes go separately). */
IFZ_INLINE __m512i q6ka_mul_signed(__m512i t, __m512i s) {
    const __m512i m8 = _mm512_set1_epi16(0x00FF);
    const __m512i e = _mm512_mullo_epi16(_mm512_and_si512(t, m8), s);
    const __m512i o = _mm512_mullo_epi16(_mm512_srli_epi16(t, 8), s);
    return _mm512_or_si512(_mm512_and_si512(e, m8), _mm512_slli_epi16(o, 8));
}

/* int32 lanes v (each in [-32768, 32767]) as the int16 pair (v, v). */
IFZ_INLINE __m512i q6ka_pair(__m512i v) {
    return _mm512_or_si512(_mm512_and_si512(v, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(v, 16));
}

#ifndef Q6KA_X16
#define Q6KA_X16 0
#endif
/* Dword off / 4 of the 16 rows' blocks: gathered from the file's rows (row stride in idx), or
 * with Q6KA_X16 (Q6_K in 16-row groups, if_kq_pack_x16) one load of the group's block. */
#if Q6KA_X16
#define q6ka_ld(k, idx, p, off)                                                            \
    _mm512_loadu_si512((const void *)((p) + 64 * ifk_x16_row(IF_Q6K_BLOCK_BYTES, (off) / 4)))
#else
#define q6ka_ld(k, idx, p, off) ifka_gather((k), (idx), (p) + (off))
#endif

/* Block b's blocks of rows [0, r) at p (row stride rowbytes) into B; Q6KA_X16: p is the group
 * block's dword rows and rowbytes the offset of its d's from p (ifk_x16_block). */
static void q6ka_expand(q6ka_blk *B, const uint8_t *p, size_t rowbytes, size_t r) {
    const __mmask16 k = ifka_mask(r);
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32((int)rowbytes));
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30), m3 = _mm512_set1_epi32(3);
    (void)k, (void)idx; /* the row groups' loads need neither */
    /* per sub-block j the scale pieces as int16 pairs (lane = row) */
    __m512i pc[4][16];
    __m512i sc[16];
    for (size_t g = 0; g < 4; g++) {
        const __m512i v = q6ka_ld(k, idx, p, 192 + 4 * g);
        IFZ_UNROLL
        for (size_t e = 0; e < 4; e++) {
            const __m512i s = _mm512_srai_epi32(_mm512_slli_epi32(v, (unsigned)(24 - 8 * e)), 24);
            const size_t j = 4 * g + e;
            sc[j] = s;
            pc[0][j] = q6ka_pair(_mm512_and_si512(s, m3));
            pc[1][j] = q6ka_pair(_mm512_and_si512(_mm512_srai_epi32(s, 2), m3));
            pc[2][j] = q6ka_pair(_mm512_and_si512(_mm512_srai_epi32(s, 4), m3));
            pc[3][j] = q6ka_pair(_mm512_srai_epi32(s, 6));
        }
    }
    IFZ_UNROLL
    for (size_t i = 0; i < 8; i++)
        _mm512_store_si512((void *)B->sc32[i],
                           _mm512_or_si512(_mm512_and_si512(_mm512_slli_epi32(sc[2 * i], 5),
                                                            _mm512_set1_epi32(0xFFFF)),
                                           _mm512_slli_epi32(sc[2 * i + 1], 21)));
    /* d: the high half of the dword at 206 (the block's last two bytes) */
#if Q6KA_X16 /* the 16 rows' d (ifk_x16_block: rowbytes carries its offset from p) */
    _mm512_store_ps(B->d, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p + rowbytes))));
#else
    _mm512_store_ps(B->d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(
                              _mm512_srli_epi32(ifka_gather(k, idx, p + 206), 16))));
#endif
    /* value 128 h + 32 t + l: low 4 bits in ql[64 h + 32 (t & 1) + l] (low nibble for t < 2),
     * top 2 in bits 2t, 2t + 1 of qh[32 h + l] (kquant_common.h, ifk_q6k_u); the 4 values of
     * a dword are VNNI row 4 (j % 4) + (l / 4) % 4 of window j / 4, sub-block j = 8 h + 2 t +
     * l / 16 */
    for (size_t h = 0; h < 2; h++) {
        IFZ_UNROLL
        for (size_t dw = 0; dw < 8; dw++) {
            const __m512i l0 = q6ka_ld(k, idx, p, 64 * h + 4 * dw);
            const __m512i l1 = q6ka_ld(k, idx, p, 64 * h + 32 + 4 * dw);
            const __m512i hb = q6ka_ld(k, idx, p, 128 + 32 * h + 4 * dw);
            const __m512i u[4] = {
                _mm512_or_si512(_mm512_and_si512(l0, m4), _mm512_and_si512(_mm512_slli_epi16(hb, 4), m30)),
                _mm512_or_si512(_mm512_and_si512(l1, m4), _mm512_and_si512(_mm512_slli_epi16(hb, 2), m30)),
                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4), _mm512_and_si512(hb, m30)),
                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4),
                                _mm512_and_si512(_mm512_srli_epi16(hb, 2), m30))};
            IFZ_UNROLL
            for (size_t t = 0; t < 4; t++) {
                const size_t j = 8 * h + 2 * t + dw / 4, win = j / 4, row = 4 * (j % 4) + dw % 4;
                _mm512_store_si512((void *)B->p[0][win][row], _mm512_mullo_epi16(u[t], pc[0][j]));
                _mm512_store_si512((void *)B->p[1][win][row], _mm512_mullo_epi16(u[t], pc[1][j]));
                _mm512_store_si512((void *)B->p[2][win][row], _mm512_mullo_epi16(u[t], pc[2][j]));
                _mm512_store_si512((void *)B->p[3][win][row], q6ka_mul_signed(u[t], pc[3][j]));
            }
        }
    }
}

/* One window: A tile TA from xa, the four pieces' B tiles (6, 7 alternating) into C 0-3. */
#define Q6KA_WIN(TA, xa, lda, B, w)                                                        \
    do {                                                                                   \
        AMX_TILE_LOAD(TA, (xa), (lda));                                                    \
        AMX_TILE_LOAD(6, (B)->p[0][w], 64);                                                \
        AMX_TILE_LOAD(7, (B)->p[1][w], 64);                                                \
        AMX_TILE_DPBSUD(0, TA, 6);                                                            \
        AMX_TILE_DPBSUD(1, TA, 7);                                                            \
        AMX_TILE_LOAD(6, (B)->p[2][w], 64);                                                \
        AMX_TILE_LOAD(7, (B)->p[3][w], 64);                                                \
        AMX_TILE_DPBSUD(2, TA, 6);                                                            \
        AMX_TILE_DPBSSD(3, TA, 7);                                                            \
    } while (0)

void Q6KA_FN(IF_KQ_GEMM_ARGS);
void Q6KA_FN(float *out, size_t ldo, const int8_t *xq, const float *xd, const int16_t *xsum,
             size_t M, const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QK, rowbytes = nb * IF_Q6K_BLOCK_BYTES;
    if (M == 0 || n0 >= n1) return;
    if (rowbytes > (size_t)INT32_MAX / 16) { /* gather offsets are int32 */
        if_q6k_gemm_1x1_scalar(out, ldo, xq, xd, xsum, M, w, n0, n1, K);
        return;
    }
    _Alignas(64) q6ka_blk S;
    _Alignas(64) int32_t cb[4][256];
    _Alignas(64) ifka_cfg cfg;
    size_t cfg_rows = 0;
    AMX_TILE_STATE;
    for (size_t n = n0; n < n1; n += 16) {
        const size_t r = n1 - n < 16 ? n1 - n : 16;
        const __mmask16 km = ifka_mask(r);
        for (size_t b = 0; b < nb; b++) {
            AMX_BARRIER(); /* earlier tile loads of the scratch stay before its rewrite */
#if Q6KA_X16
            size_t dw, tl;
            ifk_x16_block(b, nb, IF_Q6K_BLOCK_BYTES, &dw, &tl);
            q6ka_expand(&S, w + n * rowbytes + dw, tl - dw, r); /* "rowbytes": d's offset */
#else
            q6ka_expand(&S, w + n * rowbytes + b * IF_Q6K_BLOCK_BYTES, rowbytes, r);
#endif
            const __m512 d = _mm512_load_ps(S.d);
            for (size_t m0 = 0; m0 < M; m0 += 16) {
                const size_t mr = M - m0 < 16 ? M - m0 : 16;
                if (mr != cfg_rows) {
                    ifka_config(&cfg, mr, 64);
                    AMX_TILE_CONFIG(&cfg);
                    cfg_rows = mr;
                }
                const int8_t *xa = xq + m0 * K + b * IF_QK;
                AMX_TILE_ZERO(0);
                AMX_TILE_ZERO(1);
                AMX_TILE_ZERO(2);
                AMX_TILE_ZERO(3);
                Q6KA_WIN(4, xa, K, &S, 0);
                Q6KA_WIN(5, xa + 64, K, &S, 1);
                Q6KA_WIN(4, xa + 128, K, &S, 2);
                Q6KA_WIN(5, xa + 192, K, &S, 3);
                AMX_TILE_STORE(0, cb[0], 64);
                AMX_TILE_STORE(1, cb[1], 64);
                AMX_TILE_STORE(2, cb[2], 64);
                AMX_TILE_STORE(3, cb[3], 64);
                for (size_t rr = 0; rr < mr; rr++) {
                    const size_t m = m0 + rr;
                    const __m512i *c0 = (const __m512i *)(const void *)(cb[0] + 16 * rr);
                    const __m512i *c1 = (const __m512i *)(const void *)(cb[1] + 16 * rr);
                    const __m512i *c2 = (const __m512i *)(const void *)(cb[2] + 16 * rr);
                    const __m512i *c3 = (const __m512i *)(const void *)(cb[3] + 16 * rr);
                    __m512i sumi = _mm512_add_epi32(
                        _mm512_add_epi32(_mm512_load_si512(c0), _mm512_slli_epi32(_mm512_load_si512(c1), 2)),
                        _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c2), 4),
                                         _mm512_slli_epi32(_mm512_load_si512(c3), 6)));
                    const int16_t *bs = xsum + m * (K / 16) + b * 16;
                    IFZ_UNROLL
                    for (size_t i = 0; i < 8; i++) {
                        int32_t pair;
                        memcpy(&pair, bs + 2 * i, 4);
                        sumi = _mm512_sub_epi32(
                            sumi, _mm512_madd_epi16(_mm512_load_si512((const void *)S.sc32[i]),
                                                    _mm512_set1_epi32(pair)));
                    }
                    const __m512 xdb = _mm512_set1_ps(xd[m * nb + b]);
                    float *o = out + m * ldo + n;
                    const __m512 acc = b ? _mm512_maskz_loadu_ps(km, o) : _mm512_setzero_ps();
                    _mm512_mask_storeu_ps(o, km,
                                          _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(d, xdb),
                                                                           _mm512_cvtepi32_ps(sumi))));
                }
            }
        }
    }
    if (cfg_rows) AMX_TILE_RELEASE();
}

#endif
