/* ggml_convert.c - GGML tensors (GGUF's raw blocks) to row-major Q8, row by row.
 *
 * Each row is dequantized into one row of float32 scratch and requantized per group, so a
 * matrix never exists in float32. The arithmetic is the reference's (isaforge.quant.ggml's
 * dequantizers, then isaforge.quant.q8.quantize_q8) operation for operation, in float32, so
 * the result equals it bit for bit: fp16 fields are widened exactly; a dequantized value is
 * d * q, d * q + m or (d * sc) * q - (dmin * m) in that order (no contraction: the build
 * passes -ffp-contract=off); scale = max|w| / 127, q = w / scale rounded half to even and
 * clipped to [-127, 127], an all-zero group (or a scale that underflows to 0) gets q 0. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isaforge.h"

#define FAIL(st, ...)                                              \
    do {                                                           \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__);     \
        return (st);                                               \
    } while (0)

typedef struct ggml_type_desc {
    int id;
    const char *name;
    size_t block, nbytes;
} ggml_type_desc;

static const ggml_type_desc TYPES[] = {
    {IF_GGML_F32, "F32", 1, 4},        {IF_GGML_F16, "F16", 1, 2},
    {IF_GGML_Q4_0, "Q4_0", 32, 18},    {IF_GGML_Q4_1, "Q4_1", 32, 20},
    {IF_GGML_Q5_0, "Q5_0", 32, 22},    {IF_GGML_Q5_1, "Q5_1", 32, 24},
    {IF_GGML_Q8_0, "Q8_0", 32, 34},    {IF_GGML_Q2_K, "Q2_K", 256, 84},
    {IF_GGML_Q3_K, "Q3_K", 256, 110},  {IF_GGML_Q4_K, "Q4_K", 256, 144},
    {IF_GGML_Q5_K, "Q5_K", 256, 176},  {IF_GGML_Q6_K, "Q6_K", 256, 210},
    {IF_GGML_IQ4_NL, "IQ4_NL", 32, 18}, {IF_GGML_IQ4_XS, "IQ4_XS", 256, 136},
    {IF_GGML_BF16, "BF16", 1, 2},
};
#define N_TYPES (sizeof TYPES / sizeof TYPES[0])

static const ggml_type_desc *find_type(int id) {
    for (size_t i = 0; i < N_TYPES; i++)
        if (TYPES[i].id == id) return &TYPES[i];
    return NULL;
}

/* IQ4_NL's and IQ4_XS's 16 non-linear levels */
static const int8_t KVALUES[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

/* IEEE binary16 bits -> float32, exactly (subnormals normalized, inf and NaN kept). */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, b;
    if (e == 0x1f) {
        b = sign | 0x7f800000u | (m << 13);
    } else if (e) {
        b = sign | ((e + 112u) << 23) | (m << 13);
    } else if (!m) {
        b = sign;
    } else { /* subnormal: m * 2^-24, shifted until its leading bit is the implicit one */
        e = 113;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        b = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static float rd_f16(const uint8_t *p) { return f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

static float rd_f32(const uint8_t *p) {
    uint32_t b = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Q4_K / Q5_K: six-bit scale and min of sub-block j from the 12 bytes s */
static void k4_scale_min(const uint8_t *s, unsigned j, unsigned *sc, unsigned *mn) {
    if (j < 4) {
        *sc = s[j] & 63u;
        *mn = s[j + 4] & 63u;
    } else {
        *sc = (s[j + 4] & 0x0Fu) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q3_K: scale i (0..15) minus 32 */
static int k3_scale(const uint8_t *s, unsigned i) {
    unsigned lo = i < 8 ? s[i] & 0x0Fu : s[i - 8] >> 4;
    unsigned hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3u;
    return (int)(lo | (hi << 4)) - 32;
}

/* 32 values of a 16-byte block of nibbles (low nibbles are values 0..15) plus, for the 5-bit
 * types, bit j of qh as bit 4 of value j: q[j] */
static void nibbles32(const uint8_t *qs, const uint8_t *qh4, uint8_t *q) {
    for (unsigned j = 0; j < 16; j++) {
        q[j] = qs[j] & 0x0Fu;
        q[j + 16] = qs[j] >> 4;
    }
    if (qh4) {
        const uint32_t qh = rd_u32(qh4);
        for (unsigned j = 0; j < 32; j++) q[j] |= (uint8_t)(((qh >> j) & 1u) << 4);
    }
}

/* Dequantize the nb blocks (nbytes each) of type id at b into out (nb * block values). */
static void dequant_row(int id, size_t nbytes, const uint8_t *b, size_t nb, float *out) {
    uint8_t q[256];
    switch (id) {
    case IF_GGML_F32:
        for (size_t i = 0; i < nb; i++) out[i] = rd_f32(b + 4 * i);
        return;
    case IF_GGML_F16:
        for (size_t i = 0; i < nb; i++) out[i] = rd_f16(b + 2 * i);
        return;
    case IF_GGML_BF16:
        for (size_t i = 0; i < nb; i++) {
            const uint32_t u = (uint32_t)(b[2 * i] | (b[2 * i + 1] << 8)) << 16;
            memcpy(out + i, &u, sizeof u);
        }
        return;
    default: break;
    }
    for (size_t k = 0; k < nb; k++) {
        const uint8_t *blk = b + k * nbytes;
        switch (id) {
        case IF_GGML_Q8_0: {
            const float d = rd_f16(blk);
            float *o = out + 32 * k;
            for (unsigned j = 0; j < 32; j++) o[j] = (float)(int8_t)blk[2 + j] * d;
            break;
        }
        case IF_GGML_Q4_0:
        case IF_GGML_Q5_0: {
            const int five = id == IF_GGML_Q5_0;
            const float d = rd_f16(blk);
            const int bias = five ? 16 : 8;
            float *o = out + 32 * k;
            nibbles32(blk + (five ? 6 : 2), five ? blk + 2 : NULL, q);
            for (unsigned j = 0; j < 32; j++) o[j] = (float)((int)q[j] - bias) * d;
            break;
        }
        case IF_GGML_Q4_1:
        case IF_GGML_Q5_1: {
            const int five = id == IF_GGML_Q5_1;
            const float d = rd_f16(blk), m = rd_f16(blk + 2);
            float *o = out + 32 * k;
            nibbles32(blk + (five ? 8 : 4), five ? blk + 4 : NULL, q);
            for (unsigned j = 0; j < 32; j++) o[j] = (float)q[j] * d + m;
            break;
        }
        case IF_GGML_IQ4_NL: {
            const float d = rd_f16(blk);
            float *o = out + 32 * k;
            nibbles32(blk + 2, NULL, q);
            for (unsigned j = 0; j < 32; j++) o[j] = d * (float)KVALUES[q[j]];
            break;
        }
        case IF_GGML_IQ4_XS: {
            const float d = rd_f16(blk);
            const unsigned sh = (unsigned)(blk[2] | (blk[3] << 8));
            for (unsigned j = 0; j < 8; j++) {
                const unsigned lo = j % 2 ? blk[4 + j / 2] >> 4 : blk[4 + j / 2] & 0x0Fu;
                const unsigned hi = (sh >> (2 * j)) & 3u;
                const float scale = d * (float)((int)(lo | (hi << 4)) - 32);
                float *o = out + 256 * k + 32 * j;
                nibbles32(blk + 8 + 16 * j, NULL, q);
                for (unsigned l = 0; l < 32; l++) o[l] = scale * (float)KVALUES[q[l]];
            }
            break;
        }
        case IF_GGML_Q4_K:
        case IF_GGML_Q5_K: {
            /* sub-block j (32 values): chunk j / 2 of the quants, low nibbles for even j;
             * Q5_K: bit j of qh byte l is bit 4 of value l */
            const float d = rd_f16(blk), dmin = rd_f16(blk + 2);
            const int five = id == IF_GGML_Q5_K;
            const uint8_t *qs = blk + (five ? 48 : 16), *qh = blk + 16;
            for (unsigned j = 0; j < 8; j++) {
                unsigned sc, mn;
                k4_scale_min(blk + 4, j, &sc, &mn);
                const float scale = d * (float)sc, off = dmin * (float)mn;
                const uint8_t *c = qs + 32 * (j / 2);
                const unsigned shift = 4 * (j % 2);
                for (unsigned l = 0; l < 32; l++) q[l] = (c[l] >> shift) & 0x0Fu;
                if (five)
                    for (unsigned l = 0; l < 32; l++) q[l] |= (uint8_t)(((qh[l] >> j) & 1u) << 4);
                float *o = out + 256 * k + 32 * j;
                for (unsigned l = 0; l < 32; l++) o[l] = scale * (float)q[l] - off;
            }
            break;
        }
        case IF_GGML_Q6_K: {
            /* value (h, k, l) at h*128 + k*32 + l: ql byte h*64 + (k%2)*32 + l (low nibble for
             * k < 2), two high bits (qh byte h*32 + l) >> 2k, scale byte h*8 + k*2 + l/16 */
            const float d = rd_f16(blk + 208);
            for (unsigned h = 0; h < 2; h++)
                for (unsigned kk = 0; kk < 4; kk++) {
                    const uint8_t *ql = blk + h * 64 + (kk % 2) * 32, *qh = blk + 128 + h * 32;
                    const unsigned lsh = 4 * (kk / 2), hsh = 2 * kk;
                    for (unsigned l = 0; l < 32; l++)
                        q[l] = (uint8_t)(((ql[l] >> lsh) & 0x0Fu) | (((qh[l] >> hsh) & 3u) << 4));
                    for (unsigned half = 0; half < 2; half++) {
                        const float scale =
                            d * (float)(int8_t)blk[192 + h * 8 + kk * 2 + half];
                        float *o = out + 256 * k + h * 128 + kk * 32 + 16 * half;
                        for (unsigned l = 0; l < 16; l++)
                            o[l] = (float)((int)q[16 * half + l] - 32) * scale;
                    }
                }
            break;
        }
        case IF_GGML_Q2_K:
        case IF_GGML_Q3_K: {
            /* value (h, k, l) at h*128 + k*32 + l: two bits (byte h*32 + l of the quants) >> 2k,
             * scale h*8 + k*2 + l/16; Q3_K subtracts 4 where hmask bit h*4 + k of byte l is 0 */
            const int three = id == IF_GGML_Q3_K;
            const uint8_t *qs = blk + (three ? 32 : 16);
            const float d = rd_f16(blk + (three ? 108 : 80)), dmin = three ? 0.0f
                                                                       : rd_f16(blk + 82);
            for (unsigned h = 0; h < 2; h++)
                for (unsigned kk = 0; kk < 4; kk++) {
                    for (unsigned l = 0; l < 32; l++) q[l] = (qs[h * 32 + l] >> (2 * kk)) & 3u;
                    for (unsigned half = 0; half < 2; half++) {
                        const unsigned si = h * 8 + kk * 2 + half;
                        float *o = out + 256 * k + h * 128 + kk * 32 + 16 * half;
                        const uint8_t *qv = q + 16 * half;
                        if (three) {
                            const float dl = d * (float)k3_scale(blk + 96, si);
                            const uint8_t *hm = blk + 16 * half;
                            const unsigned hb = h * 4 + kk;
                            for (unsigned l = 0; l < 16; l++)
                                o[l] = dl * (float)((int)qv[l] - 4 * (1 - (int)((hm[l] >> hb) & 1u)));
                        } else {
                            const uint8_t sc = blk[si];
                            const float dl = d * (float)(sc & 0x0Fu), ml = dmin * (float)(sc >> 4);
                            for (unsigned l = 0; l < 16; l++) o[l] = dl * (float)qv[l] - ml;
                        }
                    }
                }
            break;
        }
        default: return; /* unreachable: the type was validated */
        }
    }
}

/* Quantize one row x (cols floats) per group of gs into q and s; 0 if a value is not finite.
 * The loops are branch-free so that the compiler vectorizes them; the division stays a
 * division (multiplying by a reciprocal would change bits). */
static int quantize_row(const float *x, size_t cols, size_t gs, int8_t *q, float *s) {
    uint32_t worst = 0;
    for (size_t g = 0; g < cols / gs; g++) {
        const float *v = x + g * gs;
        int8_t *qg = q + g * gs;
        /* max |v| on the bits: without the sign they order as the values do, and NaN or
         * infinity lies above every finite value */
        uint32_t top = 0;
        for (size_t i = 0; i < gs; i++) {
            uint32_t b;
            memcpy(&b, &v[i], sizeof b);
            b &= 0x7fffffffu;
            top = b > top ? b : top;
        }
        worst = top > worst ? top : worst;
        float amax;
        memcpy(&amax, &top, sizeof amax);
        const float scale = amax / 127.0f;
        s[g] = scale;
        if (scale == 0.0f || top >= 0x7f800000u) { /* (a non-finite row fails) */
            memset(qg, 0, gs);
        } else if (scale >= 1.17549435e-38f) {
            /* a normal scale: |v / scale| <= 127 * (1 + 2^-23) rounds to [-127, 127], and
             * adding and subtracting 1.5 * 2^23 rounds it half to even */
            for (size_t i = 0; i < gs; i++)
                qg[i] = (int8_t)(int32_t)((v[i] / scale + 12582912.0f) - 12582912.0f);
        } else {
            /* a subnormal scale: v / scale may be large or infinite; clipping to +-127 before
             * rounding is the same as after (both are integers) */
            for (size_t i = 0; i < gs; i++) {
                float r = v[i] / scale;
                r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
                qg[i] = (int8_t)(int32_t)((r + 12582912.0f) - 12582912.0f);
            }
        }
    }
    return worst < 0x7f800000u;
}

typedef struct convert_job {
    const ggml_type_desc *t;
    const uint8_t *src;
    size_t cols, gs, row_bytes, r0;
    int keep; /* Q8_0 rows copied as stored */
    int8_t *q;
    float *s;
    atomic_size_t first_bad; /* lowest row with a non-finite value (SIZE_MAX: none) */
    atomic_int nomem, has_m128;
} convert_job;

static void note_bad(convert_job *j, size_t row) {
    size_t cur = atomic_load(&j->first_bad);
    while (row < cur && !atomic_compare_exchange_weak(&j->first_bad, &cur, row)) {
    }
}

static void convert_rows(void *ctx, size_t t0, size_t t1, size_t tid) {
    (void)tid;
    convert_job *j = ctx;
    const size_t cols = j->cols, gs = j->gs, nb = cols / j->t->block;
    if (j->keep) { /* Q8_0 at group 32: quants and fp16 scales as stored */
        int m128 = 0;
        for (size_t r = j->r0 + t0; r < j->r0 + t1; r++) {
            const uint8_t *row = j->src + r * j->row_bytes;
            int bad = 0; /* an infinite or NaN fp16 scale: its values are not finite either */
            for (size_t b = 0; b < nb; b++) {
                const uint8_t *blk = row + b * 34;
                memcpy(j->q + r * cols + b * 32, blk + 2, 32);
                j->s[r * nb + b] = rd_f16(blk);
                bad |= (blk[1] & 0x7c) == 0x7c;
                for (unsigned i = 0; i < 32; i++) m128 |= blk[2 + i] == 0x80;
            }
            if (bad) note_bad(j, r);
        }
        if (m128) atomic_store(&j->has_m128, 1);
        return;
    }
    float *x = malloc(cols * sizeof *x);
    if (!x) {
        atomic_store(&j->nomem, 1);
        return;
    }
    for (size_t r = j->r0 + t0; r < j->r0 + t1; r++) {
        const uint8_t *row = j->src + r * j->row_bytes;
        dequant_row(j->t->id, j->t->nbytes, row, nb, x);
        if (!quantize_row(x, cols, gs, j->q + r * cols, j->s + r * (cols / gs))) note_bad(j, r);
    }
    free(x);
}

void if_ggml_dequant_row(int type, const void *row, size_t cols, float *out) {
    const ggml_type_desc *t = find_type(type);
    if (!t || cols % t->block) return;
    dequant_row(t->id, t->nbytes, row, cols / t->block, out);
}

size_t if_ggml_bytes(int type, size_t rows, size_t cols) {
    const ggml_type_desc *t = find_type(type);
    if (!t || cols % t->block) return 0;
    const size_t per_row = cols / t->block;
    if (per_row && t->nbytes > SIZE_MAX / per_row) return 0;
    const size_t row_bytes = per_row * t->nbytes;
    if (row_bytes && rows > SIZE_MAX / row_bytes) return 0;
    return rows * row_bytes;
}

const char *if_ggml_type_name(int type) {
    const ggml_type_desc *t = find_type(type);
    return t ? t->name : NULL;
}

int if_ggml_row_f32(int type, const void *src, size_t cols, size_t row, float *out) {
    const ggml_type_desc *t = find_type(type);
    if (!t || !cols || cols % t->block) return 0;
    const size_t nb = cols / t->block;
    dequant_row(t->id, t->nbytes, (const uint8_t *)src + row * nb * t->nbytes, nb, out);
    return 1;
}

if_status if_ggml_to_q8(int type, const void *src, size_t src_bytes, size_t rows, size_t cols,
                        size_t r0, size_t r1, size_t gs, unsigned flags, int8_t *q, float *s,
                        if_pool *pool, int *kept, char *err, size_t errlen) {
    const ggml_type_desc *t = find_type(type);
    if (kept) *kept = 0;
    if (!t) {
        char names[160] = "";
        for (size_t i = 0, off = 0; i < N_TYPES && off < sizeof names; i++)
            off += (size_t)snprintf(names + off, sizeof names - off, "%s%s", i ? ", " : "",
                                    TYPES[i].name);
        FAIL(IF_EINVAL, "ggml type %d is not supported (supported: %s)", type, names);
    }
    if (!rows || !cols) FAIL(IF_EINVAL, "%s tensor of %zu x %zu values is empty", t->name, rows,
                             cols);
    if (cols % t->block)
        FAIL(IF_EINVAL, "%s row length %zu is not a multiple of the block size %zu", t->name,
             cols, t->block);
    const size_t need = if_ggml_bytes(type, rows, cols);
    if (!need || rows > SIZE_MAX / cols)
        FAIL(IF_EINVAL, "%s tensor of %zu x %zu values: size overflows", t->name, rows, cols);
    if (src_bytes != need)
        FAIL(IF_EINVAL, "%s tensor of %zu x %zu values takes %zu bytes, got %zu", t->name, rows,
             cols, need, src_bytes);
    if (!gs || cols % gs)
        FAIL(IF_EINVAL, "group size %zu does not divide the row length %zu", gs, cols);
    if (r0 > r1 || r1 > rows) FAIL(IF_EINVAL, "row range [%zu, %zu) outside %zu rows", r0, r1,
                                   rows);
    if (!src || !q || !s) FAIL(IF_EINVAL, "NULL source or destination");
    if (r0 == r1) return IF_OK;
    convert_job j = {.t = t, .src = src, .cols = cols, .gs = gs,
                     .row_bytes = need / rows, .r0 = r0, .q = q, .s = s};
    atomic_init(&j.first_bad, SIZE_MAX);
    atomic_init(&j.nomem, 0);
    atomic_init(&j.has_m128, 0);
    const size_t n = r1 - r0, grain = 1 + 65536 / cols;
    j.keep = (flags & IF_GGML_KEEP_Q8_0) && type == IF_GGML_Q8_0 && gs == 32;
    if (j.keep) {
        if_pool_parallel_for(pool, n, grain, convert_rows, &j);
        if (!atomic_load(&j.has_m128) && atomic_load(&j.first_bad) == SIZE_MAX) {
            if (kept) *kept = 1;
            return IF_OK;
        }
        j.keep = 0; /* a -128 quant: the kernels need [-127, 127], so requantize the range */
    }
    if_pool_parallel_for(pool, n, grain, convert_rows, &j);
    if (atomic_load(&j.nomem)) FAIL(IF_ENOMEM, "out of memory for a %zu-value row", cols);
    const size_t bad = atomic_load(&j.first_bad);
    if (bad != SIZE_MAX)
        FAIL(IF_EINVAL, "%s tensor row %zu holds NaN or infinity after dequantization",
             t->name, bad);
    return IF_OK;
}
