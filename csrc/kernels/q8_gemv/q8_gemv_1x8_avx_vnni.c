/* Q8 GEMV, AVX-VNNI (-mavx2 -mfma -mavxvnni). Tile: 1 activation row x 8 weight rows (one ymm
 * of 8 float accumulators, lane = output row). Per group and
 * row, 32-byte VPDPBUSD (ymm) dot products with the sign trick (u8 = |x| via VPABSB, once per
 * 32 activation bytes and shared by the 8 rows; s8 = w * sign(x) via VPSIGNB) accumulate 8
 * int32 partial sums; a blend/shuffle tree (no VPHADDD) reduces the 8 rows to one vector of 8
 * isums. The 8 rows' scales are transposed 8 groups at a time, and each lane adds
 * ((float)isum * ws) * xs in group order, exactly as q8_gemv_1x1_scalar. gs = 4/8/16 and other
 * gs % 4 == 0 have their own shuffle paths; gs % 4 != 0 falls back to the scalar kernel. The
 * weight stream is software-prefetched 4 tiles ahead. Code: ../q8_avx2_common.h. */
#include "../q8_avx2_common.h"

void if_q8_gemv_1x8_avx_vnni(float *out, const int8_t *xq, const float *xs, const int8_t *w,
                             const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    if (gs == 0 || gs % 4 != 0) {
        if_q8_gemv_1x1_scalar(out, xq, xs, w, ws, n0, n1, K, gs);
        return;
    }
    q8c_gemv(out, xq, xs, w, ws, n0, n1, K, gs);
}

const if_q8_gemv_kernel if_k_q8_gemv_1x8_avx_vnni = {.name = "q8_gemv_1x8_avx_vnni",
    .requires = IF_FEATS_AVX2 | IF_FEAT_AVX_VNNI, .mr = 1, .nr = 8,
    .run = if_q8_gemv_1x8_avx_vnni};
