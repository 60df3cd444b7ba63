/* Q8 GEMV, AVX-512 VNNI (VPDPBUSD on zmm). Tile: 1 activation row x 16 weight rows per pass
 *. Self-contained: only static inline code from
 * q8_avx512_common.h, so the amx tier can reuse it for decode.
 *
 * Per 64-byte chunk of K, each of the 16 rows gets one VPDPBUSD(0, |x|, w negated where
 * x < 0) -- the u8 x s8 sign trick; |x| and the sign mask are computed once per chunk and
 * shared by the 16 rows. An unpack/shuffle/add network then sums the partial products of
 * each group and transposes at the same time, so that lane s of a vector is the int32 group
 * sum of row s. The float part runs across rows: per group, in group order,
 * acc += ((float)isum * ws) * xs, with the 16 rows' scales transposed into a small stack
 * block -- the same two roundings per group as the scalar kernel, so the result is bit-exact.
 * Group sizes 4, 8, 16 and 32 pack several groups per chunk; other sizes >= 16 read each
 * group as masked chunks; smaller odd sizes go to the scalar kernel. Decode streams the
 * weights once, so the next 16-row block is software-prefetched while this one is computed
 * (16 interleaved row streams defeat the hardware prefetcher). */
#include "../kernels.h"
#include "../q8_avx512_common.h"

/* out[n] for n in [n0, n1); see if_q8_gemv_fn. Bit-exact with if_q8_gemv_1x1_scalar. */
void if_q8_gemv_1x16_avx512_vnni(float *out, const int8_t *xq, const float *xs, const int8_t *w,
                                const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    if (n1 <= n0 || K == 0 || gs == 0) {
        if_q8_gemv_1x1_scalar(out, xq, xs, w, ws, n0, n1, K, gs);
        return;
    }
    if (!ifz_gemv(out, xq, xs, w, ws, n0, n1, K, gs))
        if_q8_gemv_1x1_scalar(out, xq, xs, w, ws, n0, n1, K, gs);
}
