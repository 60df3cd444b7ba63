/* Q8 GEMM, AVX2 (-mavx2 -mfma). Tile: 4 activation rows x 16 weight rows per step (8 ymm of
 * int32 / float accumulators, lane = output row; the name's "4x4" is historical). Each 16-row
 * weight tile is packed once per K block (up to 2048 bytes / 128 groups, stack scratch) into
 * 4-byte quads transposed across 8 rows, and reused by every activation row: per quad and
 * activation row, VPSIGNB (s8 = w * sign(x), x's 4 bytes broadcast) + VPMADDUBSW (u8 = |x|,
 * copied once per 4-row tile and block) + VPMADDWD add that quad of 8 rows' dot products to
 * the int32 lanes, so no horizontal reduction is needed. Per group each lane then adds
 * ((float)isum * ws) * xs in group order, exactly as q8_gemv_1x1_scalar; float accumulators
 * live in `out` between K blocks. M and N tails use 3/2/1-row steps, 8-row halves and masked
 * loads/stores; gs % 4 != 0 uses the scalar kernel. Code: ../q8_avx2_common.h. */
#include "../q8_avx2_common.h"

static size_t pack_size(size_t N, size_t K, size_t gs) { return q8c_pack_size(N, K, gs); }

static void pack(int8_t *dst, const int8_t *w, size_t N, size_t K, size_t gs) {
    q8c_pack_weights(dst, w, N, K, gs);
}

/* w: what pack wrote; n0 a multiple of 16. */
void if_q8_gemm_4x16_avx2(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                          const int8_t *w, const float *ws, size_t n0, size_t n1, size_t K,
                          size_t gs) {
    if (q8c_tiled(gs)) {
        q8c_gemm(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs);
    } else if (gs % 4 == 0) { /* groups above one K block: w is row-major, GEMV per row */
        for (size_t m = 0; m < M; m++)
            q8c_gemv(out + m * ldo, xq + m * K, xs + m * (K / gs), w, ws, n0, n1, K, gs);
    } else {
        if_q8_gemm_1x1_scalar(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs);
    }
}

const if_q8_gemm_kernel if_k_q8_gemm_4x16_avx2 = {.name = "q8_gemm_4x16_avx2",
    .requires = IF_FEATS_AVX2, .mr = 4, .nr = 16, .pack_size = pack_size, .pack = pack, .run = if_q8_gemm_4x16_avx2};
