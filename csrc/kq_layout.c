/* kq_layout.c - Q4_K's and Q6_K's 8-row groups, Q4_K's, Q6_K's, Q4_0's and Q8_0's 16-row ones
 * (isaforge.h, if_kq_pack_x8, if_kq_pack_x16, if_q80_pack_x16, if_q40_pack_x16): the file's
 * bytes rearranged so that a kernel's lane r is row r.
 *
 * Why: on the file's row-major blocks an 8-lane kernel either reduces 8 rows' vectors per block
 * (the file-layout GEMV: ~60 instructions per row and block, bound by its own instructions at
 * ~20 GB/s on a 1B model) or transposes them first (the GEMM's expansion). Grouped, one load
 * is a dword of 8 rows, a scale or min reaches its lane by one byte shuffle, and the 6-bit
 * fields unpack for 8 rows at once. */
#include <string.h>

#include "isaforge.h"
#include "kernels/kquant_common.h"

/* bb: the block's bytes (Q4_K 144, Q6_K 210); the bytes past its last whole dword (Q6_K's d)
 * follow the dwords, bb % 4 of them per row. */
static void kq_pack(uint8_t *dst, const uint8_t *src, size_t groups, size_t K, size_t bb,
                    size_t G) {
    const size_t nb = K / IF_QK, rowbytes = nb * bb, nd = bb / 4, tail = bb % 4;
    for (size_t g = 0; g < groups; g++) {
        const uint8_t *rows = src + g * G * rowbytes;
        uint8_t *out = dst + g * G * rowbytes;
        for (size_t b = 0; b < nb; b++, out += G * bb)
            for (size_t r = 0; r < G; r++) {
                const uint8_t *blk = rows + r * rowbytes + b * bb;
                for (size_t k = 0; k < nd; k++) memcpy(out + 4 * G * k + 4 * r, blk + 4 * k, 4);
                memcpy(out + 4 * G * nd + tail * r, blk + 4 * nd, tail);
            }
    }
}
void if_kq_pack_x8(uint8_t *dst, const uint8_t *src, size_t groups, size_t K, size_t bb) {
    kq_pack(dst, src, groups, K, bb, 8);
}
/* Q4_K, Q6_K for a 512-bit kernel's 16 lanes: each block of a group is aligned 64-byte loads
 * (ifk_x16_block), the group one sequential stream (the file's rows are 16 streams side by
 * side). */
void if_kq_pack_x16(uint8_t *dst, const uint8_t *src, size_t groups, size_t K, size_t bb) {
    const size_t nb = K / IF_QK, rowbytes = nb * bb, nd = bb / 4, tail = bb % 4;
    for (size_t g = 0; g < groups; g++) {
        const uint8_t *rows = src + g * 16 * rowbytes;
        uint8_t *out = dst + g * 16 * rowbytes;
        for (size_t b = 0; b < nb; b++) {
            size_t dw, tl;
            ifk_x16_block(b, nb, bb, &dw, &tl);
            for (size_t r = 0; r < 16; r++) {
                const uint8_t *blk = rows + r * rowbytes + b * bb;
                for (size_t k = 0; k < nd; k++)
                    memcpy(out + dw + 64 * ifk_x16_row(bb, k) + 4 * r, blk + 4 * k, 4);
                memcpy(out + tl + tail * r, blk + 4 * nd, tail);
            }
        }
    }
}

/* Q8_0 and Q4_0 (a 512-bit kernel's 16 lanes): besides lane = row, the group is one sequential
 * stream of aligned 64-byte loads, where the file's 34- or 18-byte blocks split loads across
 * lines and 16 row streams run side by side. nq: the block's qs dwords (8 or 4). */
static void legacy_pack_x16(uint8_t *dst, const uint8_t *src, size_t groups, size_t K,
                            size_t bb, size_t nq) {
    const size_t nb = K / IF_QL, rowbytes = nb * bb;
    for (size_t g = 0; g < groups; g++) {
        const uint8_t *rows = src + g * 16 * rowbytes;
        uint8_t *out = dst + g * 16 * rowbytes;
        for (size_t p = 0; p < nb / 2; p++, out += 32 * bb)
            for (size_t e = 0; e < 2; e++)
                for (size_t r = 0; r < 16; r++) {
                    const uint8_t *blk = rows + r * rowbytes + (2 * p + e) * bb;
                    memcpy(out + 32 * e + 2 * r, blk, 2);
                    for (size_t k = 0; k < nq; k++)
                        memcpy(out + 64 + 64 * nq * e + 64 * k + 4 * r, blk + 2 + 4 * k, 4);
                }
    }
}
void if_q80_pack_x16(uint8_t *dst, const uint8_t *src, size_t groups, size_t K) {
    legacy_pack_x16(dst, src, groups, K, IF_Q80_BLOCK_BYTES, 8);
}
void if_q40_pack_x16(uint8_t *dst, const uint8_t *src, size_t groups, size_t K) {
    legacy_pack_x16(dst, src, groups, K, IF_Q40_BLOCK_BYTES, 4);
}

void if_group_row(uint8_t *dst, const uint8_t *raw, int ggml_type, int group_rows, size_t r,
                  size_t K) {
    if (ggml_type == IF_GGML_Q4_K || ggml_type == IF_GGML_Q6_K) {
        const size_t bb = ggml_type == IF_GGML_Q4_K ? IF_Q4K_BLOCK_BYTES : IF_Q6K_BLOCK_BYTES;
        const size_t G = (size_t)group_rows;
        const size_t nb = K / IF_QK, nd = bb / 4, tail = bb % 4, l = r % G;
        const uint8_t *g = raw + r / G * G * nb * bb;
        for (size_t b = 0; b < nb; b++) {
            size_t dw = G * bb * b, tl = dw + 4 * G * nd;
            if (G == 16) ifk_x16_block(b, nb, bb, &dw, &tl);
            for (size_t k = 0; k < nd; k++)
                memcpy(dst + b * bb + 4 * k,
                       g + dw + 4 * G * (G == 16 ? ifk_x16_row(bb, k) : k) + 4 * l, 4);
            memcpy(dst + b * bb + 4 * nd, g + tl + tail * l, tail);
        }
        return;
    }
    const int q4 = ggml_type == IF_GGML_Q4_0; /* else Q8_0 */
    const size_t nb = K / IF_QL, bb = q4 ? IF_Q40_BLOCK_BYTES : IF_Q80_BLOCK_BYTES;
    const size_t nq = q4 ? 4 : 8;
    const uint8_t *g = raw + r / 16 * 16 * nb * bb;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *pr = g + b / 2 * 32 * bb;
        const size_t e = b & 1, l = r % 16;
        memcpy(dst + b * bb, pr + 32 * e + 2 * l, 2);
        for (size_t k = 0; k < nq; k++)
            memcpy(dst + b * bb + 2 + 4 * k, pr + 64 + 64 * nq * e + 64 * k + 4 * l, 4);
    }
}
