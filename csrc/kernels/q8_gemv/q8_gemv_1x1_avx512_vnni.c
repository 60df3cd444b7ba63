/* Q8 GEMV, AVX-512 VNNI (VPDPBUSD on zmm). Tile: 1 activation row x 1 weight row per step,
 * 16 groups of that row per zmm (lanes = groups). Self-contained: only static inline code from
 * q8_avx512_common.h (ifz_gemv), so the amx tier reuses it for decode.
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
