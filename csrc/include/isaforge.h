/* isaforge.h - the C API of the isaforge kernel core.
 *
 * Pure C11, no Python. The Python layer parses model files and hands this core a
 * description of the weights (pointers into mmapped files or packed buffers); the core
 * owns the run state (activations, KV cache, thread pool) and runs the forward pass.
 *
 * Conventions: a weight matrix is (rows = out features, cols = in features), row-major.
 * Q8 means symmetric int8 per group of `group_size` consecutive values along a row with a
 * float32 scale per group. Sizes are size_t. Functions that can fail return an if_status
 * and write a one-line reason into a caller-given buffer.
 */
#ifndef ISAFORGE_H
#define ISAFORGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ISAFORGE_VERSION "0.1.0"

typedef enum if_status {
    IF_OK = 0,
    IF_EINVAL = 1,    /* bad argument or inconsistent shapes */
    IF_ENOMEM = 2,    /* allocation failed */
    IF_ENOTSUP = 3,   /* kernel tier or feature not available on this CPU */
} if_status;

/* IF_Q4: 4-bit indices into a 16-entry int8 codebook, one float scale per group (CQ4, GGUF
 * Q4_0 / IQ4_NL / IQ4_XS); see if_q4_gemv_fn for the layout.
 * IF_KQ: a GGUF Q4_K, Q5_K or Q6_K matrix run in place on the file's blocks (if_matrix.ggml_type,
 * .raw; the caller keeps the bytes alive, they are the one resident copy).
 * IF_GGML: a GGUF matrix of any other type given as the file's bytes (.ggml_type, .raw,
 * .raw_bytes); model creation turns it into Q8 at group 32 (if_ggml_to_q8), one matrix at a
 * time, and packs it, so no whole-model temporary exists. */
typedef enum if_dtype { IF_F32 = 0, IF_Q8 = 1, IF_Q4 = 2, IF_KQ = 3, IF_GGML = 4 } if_dtype;

/* ---------------------------------------------------------------------------------------
 * Kernel interfaces. Every ISA variant of an op fills the same signature. Kernels compute
 * output rows [n0, n1) so the thread pool can split work without the kernel knowing.
 * ------------------------------------------------------------------------------------- */

/* Quantize one activation row x (K floats) into int8 q and K/gs scales, per group:
 * scale = max|x| / 127, q = roundf(x / scale) (half away from zero); a zero group gets
 * scale 0 and q 0. */
typedef void (*if_quantize_fn)(int8_t *q, float *s, const float *x, size_t K, size_t gs);

/* Q8 GEMV: out[n] = sum over groups g of ((float)isum(n, g) * ws[n, g]) * xs[g], groups in
 * order, for n in [n0, n1). w: (N, K) int8, ws: (N, K/gs), xq: (K), xs: (K/gs). */
typedef void (*if_q8_gemv_fn)(float *out, const int8_t *xq, const float *xs, const int8_t *w,
                              const float *ws, size_t n0, size_t n1, size_t K, size_t gs);

/* Q8 GEMM: out[m, n] for m in [0, M), n in [n0, n1), same per-output arithmetic as GEMV.
 * xq: (M, K), xs: (M, K/gs), out: (M, ldo) with ldo >= N. */
typedef void (*if_q8_gemm_fn)(float *out, size_t ldo, const int8_t *xq, const float *xs,
                              size_t M, const int8_t *w, const float *ws, size_t n0, size_t n1,
                              size_t K, size_t gs);

/* fp32 GEMV: out[n] = sum_k w[n, k] * x[k], k in order, for n in [n0, n1). */
typedef void (*if_f32_gemv_fn)(float *out, const float *x, const float *w, size_t n0, size_t n1,
                               size_t K);

/* SwiGLU: x[i] = silu(x[i]) * g[i] for i < n, as val *= 1 / (1 + expf(-val)); val *= g.
 * GeGLU (the same interface): x[i] = gelu_tanh(x[i]) * g[i], in f32_geglu_1x1_scalar.c's order
 * with these constants (0.044715 and -2 sqrt(2 / pi) as floats). */
typedef void (*if_swiglu_fn)(float *x, const float *g, size_t n);
#define IF_GELU_C3 0.044715f
#define IF_GELU_M2K (-1.5957691216057308f)

/* Bytes of the packed GEMM weight buffer for an (N, K) Q8 matrix with group size gs. */
typedef size_t (*if_q8_pack_size_fn)(size_t N, size_t K, size_t gs);
/* Pack row-major int8 weights w (N, K) into dst (if_q8_pack_size_fn bytes) once, at load. The
 * scales stay row-major (N, K/gs). */
typedef void (*if_q8_pack_fn)(int8_t *dst, const int8_t *w, size_t N, size_t K, size_t gs);
/* The inverse: the row-major int8 weights w (N, K) back from what pack wrote to src. */
typedef void (*if_q8_unpack_fn)(int8_t *w, const int8_t *src, size_t N, size_t K, size_t gs);

/* ---- 4-bit weights: 16-entry int8 codebook x 4-bit index, one float scale per group ----
 * w: (N, K/2) bytes, row-major; K and gs are multiples of 32 and gs divides K. Along a row,
 * each block of 32 values is 16 bytes: byte j holds value j in its low nibble and value j + 16
 * in its high nibble (GGUF Q4_0 / IQ4_NL's own layout, so their nibbles are used unchanged).
 * The weight value is cb[nibble] * ws[n, g]. Arithmetic as Q8: per group an int32 sum of
 * xq * cb[nibble], then acc += ((float)isum * ws[n, g]) * xs[g], groups in order. cb values lie
 * in [-127, 127]. */
typedef void (*if_q4_gemv_fn)(float *out, const int8_t *xq, const float *xs, const uint8_t *w,
                              const float *ws, const int8_t *cb, size_t n0, size_t n1, size_t K,
                              size_t gs);
/* 4-bit GEMM: out[m, n] for m in [0, M), n in [n0, n1), same per-output arithmetic as GEMV. */
typedef void (*if_q4_gemm_fn)(float *out, size_t ldo, const int8_t *xq, const float *xs,
                              size_t M, const uint8_t *w, const float *ws, const int8_t *cb,
                              size_t n0, size_t n1, size_t K, size_t gs);
/* Bytes of the packed 4-bit GEMM weights of an (N, K) matrix (K values, K / 2 bytes a row). */
typedef size_t (*if_q4_pack_size_fn)(size_t N, size_t K, size_t gs);
/* Pack the row-major nibbles w (N, K / 2 bytes) into dst (if_q4_pack_size_fn bytes) once, at
 * load. Scales and codebook stay as they are (ws row-major (N, K/gs)). */
typedef void (*if_q4_pack_fn)(uint8_t *dst, const uint8_t *w, size_t N, size_t K, size_t gs);
/* The inverse: the row-major nibbles w (N, K / 2) back from what pack wrote to src. */
typedef void (*if_q4_unpack_fn)(uint8_t *w, const uint8_t *src, size_t N, size_t K, size_t gs);
/* Run-time rotation of one activation row before int8 quantization: y (kpad) = x (K) zero-
 * padded to kpad, times signs (kpad floats, each +1 or -1; NULL: no rotation, only the padding),
 * then per group of gs (a power of two dividing kpad) the unnormalized fast Walsh-Hadamard
 * transform in one fixed order: for h = 1, 2, 4, .., gs/2, every pair (i, i + h) with
 * i % (2h) < h becomes (a + b, a - b). */
typedef void (*if_hadamard_fn)(float *y, const float *x, const float *signs, size_t K,
                               size_t kpad, size_t gs);

/* ---- attention over the KV cache ---- */

/* KV cache element types. */
typedef enum if_kv_type {
    IF_KV_F32 = 0, /* float32 rows */
    IF_KV_F16 = 1, /* IEEE binary16 rows (round to nearest even when stored) */
    IF_KV_I8 = 2,  /* int8 rows with a float32 scale per (position, kv head, group of
                      `group` head dims): q = roundf(x / s), s = max|x| / 127 */
} if_kv_type;

/* One layer's KV cache. Position t lives in slot t if t < n_sinks, else in slot
 * n_sinks + (t - n_sinks) % (cap - n_sinks): a plain array when cap covers the context, a ring
 * buffer behind n_sinks fixed slots for sliding-window attention.
 * Keys are rows (slot, kv_dim) unless keys_t is set: then (float32 caches only, cap a multiple
 * of IF_ATTN_KEY_BLOCK = B) they are stored transposed per block of B slots, element c of slot
 * s at k[((s / B) * kv_dim + c) * B + s % B], the layout the SIMD fp32 attention kernels score
 * from directly (no per-step transposition); the values stay rows. Same floats either way. */
typedef struct if_kv_layer {
    if_kv_type type;
    void *k, *v;        /* (cap, kv_dim) elements of `type` */
    float *ks, *vs;     /* IF_KV_I8: (cap, kv_dim / group) scales; else NULL */
    size_t cap, kv_dim; /* slots, n_kv_heads * head_size */
    size_t group;       /* IF_KV_I8 scale group along a head (divides head_size), else 0 */
    size_t n_sinks;     /* attention sinks: slots [0, n_sinks) are never overwritten */
    int keys_t;         /* keys stored block-transposed (see above); 0: rows */
} if_kv_layer;

/* One attention call: query rows r (position pos0 + r) against the cache. Query head h reads
 * kv head h / (n_heads / n_kv_heads). Row r sees key positions t <= pos0 + r and, when
 * window > 0, only t > pos0 + r - window or t < n_sinks (sinks). */
typedef struct if_attn_job {
    const float *q;            /* (rows, ldq): head h of row r at q[r*ldq + h*head_size] */
    float *out;                /* (rows, ldo), same head layout */
    size_t ldq, ldo, pos0;
    size_t n_heads, n_kv_heads, head_size;
    size_t window, n_sinks;    /* window 0: global causal attention */
    const if_kv_layer *kv;
} if_attn_job;

/* Keys per block: the kernels walk the cache in blocks of this many keys aligned to absolute
 * positions, converting each block once per query tile and kv group. */
#define IF_ATTN_KEY_BLOCK 64
/* Query rows per tile (the kernels share each key block across a tile's rows and heads). */
#define IF_ATTN_Q_TILE 16

/* Attention for rows [r0, r1) and query heads [h0, h1) of job j. `scratch` holds
 * if_attn_scratch_floats(head_size, h1 - h0, n_heads / n_kv_heads, kv->cap) floats. The
 * per-output contract of the fp32 tiers is llama2.c run.c's arithmetic, for each row and head
 * over the keys V it sees, in key order: s_t = (sum_i q_i * k_t,i, i in order) /
 * sqrtf(head_size); m = max s_t; p_t = expf(s_t - m); sum = sum of p_t in order; p_t /= sum;
 * out_i = ((0 + p_t0 * v_t0,i) + p_t1 * v_t1,i) + ..., t in order. Cached int8/fp16 values are
 * first converted to float (int8: (float)q * s). A row's result depends on nothing but its
 * query and its keys: not on the tiling, the chunking or the other rows. The int8
 * matrix-engine kernels (attn_i8) keep an online softmax of their own, bounded, not exact. */
typedef void (*if_attn_fn)(const if_attn_job *j, size_t r0, size_t r1, size_t h0, size_t h1,
                           float *scratch);

/* Scratch floats an attention kernel needs for `n_heads` query heads of one query tile, heads
 * sharing a kv head in groups of `kv_mul`, over a cache of `keys` slots (each row and head of a
 * tile keeps a row of scores as long as the keys it sees, at most `keys`). 0 if that
 * overflows. */
size_t if_attn_scratch_floats(size_t head_size, size_t n_heads, size_t kv_mul, size_t keys);

/* ---- kernel descriptors ----
 * Every kernel file exports one const descriptor: its name, the IF_FEAT_* bits it needs
 * (csrc/cpu/cpu.h), its step (mr activation rows x nr rows of the other operand: weights, or
 * cached keys for attention), its packed-weight layout if it has one, and its run function.
 * Names follow one rule, <type>_<op>_<mr>x<nr>_<isa> (csrc/kernels/kernels.h). A tier is a
 * list of descriptors, one per op (csrc/cpu/dispatch.c). */

/* Q8 GEMM kernel. With pack == NULL, run reads the row-major int8 weights; otherwise run's `w`
 * is the buffer pack wrote (pack_size bytes, at load) and the caller's n0 is a multiple of nr.
 * decode_packed = 1: run at M = 1 streams its packed layout at least about as fast as the
 * tier's GEMV reads row-major rows, so a model whose decode runs the same tier decodes with
 * run at M = 1 over the packed copy and keeps one resident copy (if_model_reads_rowmajor). */
typedef struct if_q8_gemm_kernel {
    const char *name;
    uint32_t requires;
    size_t mr, nr;
    if_q8_pack_size_fn pack_size;
    if_q8_pack_fn pack;
    if_q8_gemm_fn run;
    int decode_packed;     /* requires unpack */
    /* With decode_packed the layout is tile-major too: the rows [t nr, t nr + n) (n = nr, or
     * the rows left in the last tile) sit at byte t * pack_size(nr, K, gs) and unpack(dst, that,
     * n, K, gs) reads them back (a tied token table's rows are looked up this way). */
    if_q8_unpack_fn unpack;
} if_q8_gemm_kernel;

/* Q8 GEMV kernel (M = 1): mr = 1, nr output rows per step; reads row-major weights. */
typedef struct if_q8_gemv_kernel {
    const char *name;
    uint32_t requires;
    size_t mr, nr;
    if_q8_gemv_fn run;
} if_q8_gemv_kernel;

/* 4-bit GEMV kernel: reads the row-major nibbles (the file's layout). */
typedef struct if_q4_gemv_kernel {
    const char *name;
    uint32_t requires;
    size_t mr, nr;
    if_q4_gemv_fn run;
} if_q4_gemv_kernel;
/* 4-bit GEMM kernel. With pack == NULL, run reads the row-major nibbles; otherwise run's `w`
 * is the buffer pack wrote (pack_size bytes, at load; the nibbles only rearranged, scales and
 * codebook as they are) and the caller's n0 is a multiple of nr. The layout is tile-major: the
 * rows [t nr, t nr + n) (n = nr, or the rows left in the last tile) sit at byte
 * t * pack_size(nr, K, gs) and unpack(dst, that, n, K, gs) reads them back. decode_packed = 1:
 * run at M = 1 over the packed copy is the decode path of a model whose decode runs the same
 * tier (the same per-output arithmetic as the tier's GEMV), so the row-major nibbles are not
 * read after the pack (one resident copy). */
typedef struct if_q4_gemm_kernel {
    const char *name;
    uint32_t requires;
    size_t mr, nr;
    if_q4_gemm_fn run;
    if_q4_pack_size_fn pack_size;
    if_q4_pack_fn pack;
    if_q4_unpack_fn unpack; /* required with pack */
    int decode_packed;
} if_q4_gemm_kernel;
/* ---- K-quants read as stored: GGUF Q4_K, Q5_K and Q6_K super-blocks of IF_QK = 256 values ----
 * w: (N, K / 256) blocks, row-major, each the file's bytes unchanged (no expanded scales: the
 * resident copy is the file's own; the q4kx8_ / q6kx8_ kernels read the same bytes in 8-row
 * groups). Q4_K (144 bytes): f16 d, f16 dmin, 12 bytes
 * of 6-bit scales sc[8] and mins m[8] (ggml's packing), 128 bytes of nibbles: chunk c (32
 * bytes) holds sub-block 2c in its low nibbles and 2c + 1 in its high ones; value = d * sc[j] *
 * q - dmin * m[j], q in 0..15, 8 sub-blocks of 32. Q5_K (176 bytes): Q4_K's fields with
 * qh[32] between the scales and the nibbles (qs at byte 48); bit j of qh[l] is bit 4 of value
 * l of sub-block j, so q in 0..31, and everything else as Q4_K (Q4_K's formulas below).
 * Q6_K (210 bytes): ql[128], qh[64], int8 sc[16], f16 d; value = d * sc[j] * (u - 32), u in
 * 0..63, 16 sub-blocks of 16.
 * Activations (K8): per 256 values one float scale xd and int8 xq (the Q8 rule, if_quantize_fn
 * at gs = 256), plus xsum, the int16 sum of each 16 consecutive xq (K / 16 of them).
 * Per output and block b, in integers (exact, any order): Q4_K sumi = sum_j sc[j] * dot_j(q,
 * xq), summ = sum_j m[j] * (xsum of sub-block j's two halves); Q6_K sumi = sum_j sc[j] *
 * (dot_j(u, xq) - 32 * xsum_j). Then the one float order, blocks in order from acc = 0:
 * Q4_K acc = (acc + (d * xd[b]) * (float)sumi) - (dmin * xd[b]) * (float)summ;
 * Q6_K acc = acc + (d * xd[b]) * (float)sumi. K is a multiple of 256. */
#define IF_QK 256
#define IF_Q4K_BLOCK_BYTES 144
/* Q4_K in 8-row groups (q4kx8_* kernels, the AVX2 tiers' resident layout once the weight arena
 * holds the matrix): rows 8g .. 8g + 7 (rows a multiple of 8) keep the bytes the file gives
 * them, block b of the group at 8 * 144 * b, and within it dword k (bytes 4k .. 4k + 3, k < 36)
 * of row r's block at 32 k + 4 r: one 32-byte load is the same dword of 8 rows, so a kernel's
 * lane r is row r with no transpose (header dword 0 = d, dmin; 1-3 = the 12 scale bytes; 4 + k
 * = nibble bytes 4k .. 4k + 3). The same bytes, rearranged: no more memory than the file.
 * Q6_K likewise (q6kx8_*: dwords k < 52 at 32 k + 4 r, then row r's f16 d at 1664 + 2 r of
 * the group's 1680-byte block). bb: the block's bytes (144 or 210). */
void if_kq_pack_x8(uint8_t *dst, const uint8_t *src, size_t groups, size_t K, size_t bb);
/* Q4_K, Q6_K in 16-row groups likewise (q4kx16_*, q6kx16_*: block b at 16 * bb * b, dword k of
 * row r at 64 k + 4 r, Q6_K's d at 3328 + 2 r), the amx tier's resident layout. */
void if_kq_pack_x16(uint8_t *dst, const uint8_t *src, size_t groups, size_t K, size_t bb);
#define IF_Q5K_BLOCK_BYTES 176
#define IF_Q6K_BLOCK_BYTES 210
/* Quantize one activation row x (K floats, K % 256 == 0) to the K8 form: q (K), d (K / 256),
 * bsum (K / 16). */
typedef void (*if_k8_quantize_fn)(int8_t *q, float *d, int16_t *bsum, const float *x, size_t K);
/* K-quant GEMV: out[n] for n in [n0, n1) from K8 activations (xq, xd, xsum). */
typedef void (*if_kq_gemv_fn)(float *out, const int8_t *xq, const float *xd,
                              const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1,
                              size_t K);
/* K-quant GEMM: out[m, n] (ldo >= N) for m < M, n in [n0, n1); activation row m at xq + m K,
 * xd + m K / 256, xsum + m K / 16; the same per-output arithmetic as the GEMV. */
typedef void (*if_kq_gemm_fn)(float *out, size_t ldo, const int8_t *xq, const float *xd,
                              const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                              size_t n1, size_t K);
/* ---- Legacy blocks read as stored: GGUF Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 blocks of IF_QL = 32 ----
 * w: (N, K / 32) blocks, row-major, the file's bytes unchanged, K a multiple of 32; the kernels
 * are if_kq_gemv_kernel / if_kq_gemm_kernel (q40_*, q41_*, q50_*, q51_*, q80_*; q80x16_* read
 * Q8_0's bytes in 16-row groups, below). Q4_0 (18
 * bytes): f16 d, qs[16]; Q4_1 (20): f16 d, f16 m, qs[16]; Q5_0 (22): f16 d, qh[4], qs[16]; Q5_1
 * (24): f16 d, f16 m, qh[4], qs[16]; Q8_0 (34): f16 d, int8 qs[32]. Value j (0..31) has the
 * unsigned u = the low nibble of qs[j] (j < 16) or the high one of qs[j - 16], plus (five-bit
 * types) bit j of the little-endian qh word as bit 4; value = d * (u - 8) (Q4_0), d * (u - 16)
 * (Q5_0), d * u + m (Q4_1, Q5_1), d * qs[j] (Q8_0, signed). Activations (L8): the K8 form with
 * one scale per 32 values (the Q8 rule, if_quantize_fn at gs = 32: xq in [-127, 127]), xd
 * (K / 32), xsum the int16 sum of each 16 xq (K / 16). Per output and block b, in integers:
 * dot = sum_j u_j xq_j (Q8_0: qs_j), xs = xsum[2b] + xsum[2b + 1]; then blocks in order from
 * acc = 0: Q4_0 / Q5_0 acc = acc + (d * xd[b]) * (float)(dot - z * xs), z = 8 / 16; Q8_0
 * acc = acc + (d * xd[b]) * (float)dot; Q4_1 / Q5_1 acc = (acc + (d * xd[b]) * (float)dot) +
 * (m * xd[b]) * (float)xs. */
#define IF_QL 32
#define IF_Q40_BLOCK_BYTES 18
#define IF_Q41_BLOCK_BYTES 20
#define IF_Q50_BLOCK_BYTES 22
#define IF_Q51_BLOCK_BYTES 24
#define IF_Q80_BLOCK_BYTES 34
/* Q8_0, Q4_0 in 16-row groups (q80x16_*, q40x16_*: the AVX-512 tiers' layout once the weight
 * arena holds them; rows a multiple of 16, K of 64): per pair of blocks (1088 or 576 bytes) the
 * 16 rows' f16 d of block 2p + e at 32 e + 2 r, then its qs dword k < nq (8, 4) of row r at
 * 64 + 64 nq e + 64 k + 4 r: every 64-byte load aligned, the same 4 bytes of 16 rows. */
void if_q80_pack_x16(uint8_t *dst, const uint8_t *src, size_t groups, size_t K);
void if_q40_pack_x16(uint8_t *dst, const uint8_t *src, size_t groups, size_t K);
/* Row r of a Q4_K, Q6_K, Q4_0 or Q8_0 matrix in row groups of group_rows (raw, K columns) back in
 * the file's bytes (a row's blocks) at dst: a grouped token table's lookup. */
void if_group_row(uint8_t *dst, const uint8_t *raw, int ggml_type, int group_rows, size_t r,
                  size_t K);
/* ---- IQ4 blocks read as stored: GGUF IQ4_NL (blocks of 32) and IQ4_XS (super-blocks of 256) ----
 * w: the file's bytes unchanged, row-major; the kernels are if_kq_gemv_kernel /
 * if_kq_gemm_kernel (iq4nl_*, iq4xs_*). Level k (0..15) of the nibble table: -127, -104, -83,
 * -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113. IQ4_NL (18 bytes): f16 d, qs[16];
 * value j = d * level(low nibble of qs[j]) for j < 16, the high one of qs[j - 16] otherwise.
 * IQ4_XS (136 bytes): f16 d, scales_h (u16), scales_l[4], qs[128]; sub-block j (32 values)
 * has ls_j = (nibble j % 2 of scales_l[j / 2]) | (bits 2j, 2j + 1 of scales_h) << 4 and its
 * 16 bytes qs[16 j ..] read as IQ4_NL's; value = d * (ls_j - 32) * level.
 * Activations: IQ4_NL the legacy blocks' L8 (xd per 32), IQ4_XS K8 (xd per 256); xsum as
 * theirs. Per output and block b, in integers: IQ4_NL dot = sum_j level_j xq_j; IQ4_XS
 * sumi = sum_j (ls_j - 32) dot_j over its 8 sub-blocks. Then blocks in order from acc = 0:
 * acc = acc + (d * xd[b]) * (float)dot (IQ4_NL) or (float)sumi (IQ4_XS). */
#define IF_IQ4NL_BLOCK_BYTES 18
#define IF_IQ4XS_BLOCK_BYTES 136
/* K-quant kernels of one weight type (q4k_*, q5k_*, q6k_*, legacy q40_* ... q80_*, by file name) */
typedef struct if_kq_gemv_kernel {
    const char *name;
    uint32_t requires;
    size_t mr, nr;
    if_kq_gemv_fn run;
} if_kq_gemv_kernel;
typedef struct if_kq_gemm_kernel {
    const char *name;
    uint32_t requires;
    size_t mr, nr;
    if_kq_gemm_fn run;
} if_kq_gemm_kernel;
typedef struct if_k8_quantize_kernel {
    const char *name;
    uint32_t requires;
    size_t mr, nr;
    if_k8_quantize_fn run;
} if_k8_quantize_kernel;

/* Hadamard rotation kernel (one row per call). */
typedef struct if_hadamard_kernel {
    const char *name;
    uint32_t requires;
    size_t mr, nr;
    if_hadamard_fn run;
} if_hadamard_kernel;

/* fp32 GEMV kernel (fp32 models' matmuls, one activation row at a time). */
typedef struct if_f32_gemv_kernel {
    const char *name;
    uint32_t requires;
    size_t mr, nr;
    if_f32_gemv_fn run;
} if_f32_gemv_kernel;

/* Activation quantization kernel (one row per call). */
typedef struct if_quantize_kernel {
    const char *name;
    uint32_t requires;
    size_t mr, nr;
    if_quantize_fn run;
} if_quantize_kernel;

/* Attention kernel: mr query rows per tile x nr keys per block. */
typedef struct if_attn_kernel {
    const char *name;
    uint32_t requires;
    size_t mr, nr;
    if_attn_fn run;
} if_attn_kernel;

/* SwiGLU kernel (element-wise). */
typedef struct if_swiglu_kernel {
    const char *name;
    uint32_t requires;
    size_t mr, nr;
    if_swiglu_fn run;
} if_swiglu_kernel;

/* One ISA tier: a kernel for every op, none NULL. A model runs one tier for decode (M = 1:
 * q8_gemv) and prefill (M > 1: q8_gemm), and the tier's attention, SwiGLU and quantization
 * for both, so a row's result does not depend on how the prompt was chunked. */
typedef struct if_kernel_table {
    const char *tier;                  /* "scalar", "avx2", ...; it needs its kernels' features */
    const if_q8_gemv_kernel *q8_gemv;  /* decode matmuls */
    const if_q8_gemm_kernel *q8_gemm;  /* prefill matmuls */
    const if_quantize_kernel *quantize;
    const if_f32_gemv_kernel *f32_gemv;
    const if_attn_kernel *attn;        /* attention over a float32 or float16 cache */
    const if_attn_kernel *attn_i8;     /* over an int8 cache (a matrix engine's, else = attn) */
    const if_swiglu_kernel *swiglu;
    const if_swiglu_kernel *geglu;     /* GELU-tanh gate (if_swiglu_fn's interface) */
    const if_q4_gemv_kernel *q4_gemv;  /* 4-bit decode matmuls (NULL in a test table: scalar) */
    const if_q4_gemm_kernel *q4_gemm;  /* 4-bit prefill matmuls (likewise) */
    const if_hadamard_kernel *hadamard; /* activation rotation of 4-bit matrices (likewise) */
    /* K-quant matmuls on the file's blocks and their activation quantizer (NULL: scalar) */
    const if_kq_gemv_kernel *q4k_gemv, *q5k_gemv, *q6k_gemv;
    const if_kq_gemv_kernel *q40_gemv, *q41_gemv, *q50_gemv, *q51_gemv, *q80_gemv; /* legacy */
    const if_kq_gemm_kernel *q4k_gemm, *q5k_gemm, *q6k_gemm;
    const if_kq_gemm_kernel *q40_gemm, *q41_gemm, *q50_gemm, *q51_gemm, *q80_gemm;
    const if_kq_gemv_kernel *iq4nl_gemv, *iq4xs_gemv; /* IQ4 blocks (NULL: scalar) */
    const if_kq_gemm_kernel *iq4nl_gemm, *iq4xs_gemm;
    const if_k8_quantize_kernel *k8_quantize;
    /* Q4_K, Q6_K on 8-row groups (if_kq_pack_x8) or 16-row ones (if_kq_pack_x16, ahead of the
     * 8-row ones), Q8_0, Q4_0 on 16-row ones (if_q80_pack_x16, if_q40_pack_x16): the weight
     * arena rearranges a matrix of the type into them when both the decode and the prefill
     * table have that pair (NULL: it copies the file's rows as they are) */
    const if_kq_gemv_kernel *q4kx8_gemv, *q6kx8_gemv, *q4kx16_gemv, *q6kx16_gemv, *q80x16_gemv,
        *q40x16_gemv;
    const if_kq_gemm_kernel *q4kx8_gemm, *q6kx8_gemm, *q4kx16_gemm, *q6kx16_gemm, *q80x16_gemm,
        *q40x16_gemm;
} if_kernel_table;

/* ---------------------------------------------------------------------------------------
 * CPU features and dispatch (csrc/cpu/).
 * ------------------------------------------------------------------------------------- */

/* Number of ISA tiers compiled into this build (scalar included). */
size_t if_tier_count(void);
/* Name of compiled tier i (0 = scalar, rising priority), or NULL if out of range. */
const char *if_tier_name(size_t i);
/* 1 if compiled tier i can run on this CPU and OS with the IF_FEAT_* bits `disabled` hidden,
 * else 0; a reason goes to `why`. */
int if_tier_supported(size_t i, uint32_t disabled, char *why, size_t whylen);
/* Comma-separated list of CPU features found (e.g. "sse2,avx2,avx512f"). */
const char *if_cpu_features(void);
/* CPU model string (or "unknown"). */
const char *if_cpu_name(void);

/* Kernel table of compiled tier i (whether or not this CPU supports it), or NULL. */
const if_kernel_table *if_tier_table(size_t i);

/* The IF_FEAT_* bits table t needs: the union of its kernels' `requires`. */
uint32_t if_table_requires(const if_kernel_table *t);
/* 1 if a model running tier t for decode and prefill decodes from the packed copy (t's GEMM
 * packs, declares decode_packed and can unpack): its row-major int8 is then never read. */
int if_table_decodes_packed(const if_kernel_table *t);
/* Notes on features the CPU has but cannot use (e.g. AMX permission refused), or "". */
const char *if_cpu_notes(void);

/* Feature names (comma- or space-separated, as if_cpu_features() prints them; NULL or "": none)
 * as IF_FEAT_* bits in *mask; IF_EINVAL naming an unknown one. */
if_status if_features_mask(const char *names, uint32_t *mask, char *err, size_t errlen);
/* The names of the IF_FEAT_* bits in `mask`, comma-separated, into buf (n bytes); returns buf. */
const char *if_features_string(uint32_t mask, char *buf, size_t n);

/* The kernels one model runs: decode (GEMV, M = 1) and prefill (GEMM, M > 1). Both are the
 * same tier (every tier lists a kernel for every op), so decode and prefill share attention,
 * SwiGLU and quantization. */
typedef struct if_kernel_set {
    const if_kernel_table *gemv;
    const if_kernel_table *gemm;
} if_kernel_set;

/* The one tier lookup by name: a compiled tier this CPU runs with `disabled` hidden; IF_ENOTSUP (with the missing features) or IF_EINVAL (unknown name). */
if_status if_tier_find(const char *name, uint32_t disabled, const if_kernel_table **out,
                       char *err, size_t errlen);
/* Choose a kernel set, a pure function of this CPU's features, the hidden `disabled` bits and
 * `tier`: NULL, "" or "auto" picks the best supported tier (the last in if_tier_name's order),
 * a tier name forces that one (if_tier_find's errors). No global state: each model keeps its
 * own. */
if_status if_kernels_choose(const char *tier, uint32_t disabled, if_kernel_set *out, char *err,
                            size_t errlen);
/* if_kernels_choose with ISAFORGE_KERNEL and ISAFORGE_DISABLE_FEATURES from the environment
 * (the hidden bits also in *disabled unless NULL): the C core's one reader of the environment,
 * for programs without settings of their own (the test drivers); Python passes its settings. */
if_status if_kernels_from_env(if_kernel_set *out, uint32_t *disabled, char *err,
                              size_t errlen);

/* ---------------------------------------------------------------------------------------
 * Thread pool (csrc/threadpool.c).
 * ------------------------------------------------------------------------------------- */

typedef struct if_pool if_pool;
/* Body of a parallel loop: process task indices [t0, t1) of `ctx` on thread `tid`
 * (0 = the caller; tid < if_pool_threads(), for per-thread scratch). */
typedef void (*if_task_fn)(void *ctx, size_t t0, size_t t1, size_t tid);
/* Create a pool running `n_threads` threads in total (the caller counts as one). */
if_pool *if_pool_create(size_t n_threads);
/* Free the pool and join its workers. NULL is allowed. */
void if_pool_free(if_pool *pool);
/* Threads in the pool, the caller included. */
size_t if_pool_threads(const if_pool *pool);
/* Run fn over [0, n) split into contiguous chunks of whole `grain`s (a few per thread, sizes
 * differing by at most one grain) that the threads claim from an atomic counter, lowest
 * first, and wait for all of them. Each index is run once, by one thread. */
void if_pool_parallel_for(if_pool *pool, size_t n, size_t grain, if_task_fn fn, void *ctx);
/* The same on at most max_threads threads (ids 0..max_threads-1; 0: the whole pool). */
void if_pool_parallel_for_n(if_pool *pool, size_t n, size_t grain, size_t max_threads,
                            if_task_fn fn, void *ctx);

/* ---------------------------------------------------------------------------------------
 * Model description and forward pass (csrc/model.c: creation, packing; kv.c: the KV cache;
 * matmul.c, forward.c: the forward pass).
 * ------------------------------------------------------------------------------------- */

typedef struct if_config {
    size_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
    float rope_theta; /* 10000 for llama2.c models */
    float norm_eps;   /* 1e-5 for llama2.c models */
    size_t sliding_window; /* 0: global attention; else each query sees this many positions */
    size_t n_sinks;        /* with a window: the first n_sinks positions stay visible */
    /* The layer description (every field 0: exactly the Llama layer, bit for bit). Per-layer
     * optional vectors (norms, biases) are if_layer_weights' IF_LAYER_VECTORS, NULL when
     * absent. */
    size_t head_dim;       /* per-head width; 0: dim / n_heads (q rows: n_heads * head_dim) */
    size_t act;            /* gated FFN activation: 0 SiLU (SwiGLU), 1 GELU-tanh (GeGLU) */
    size_t rope_neox;      /* 0: rotate pairs (2i, 2i+1); 1: NEOX pairs (i, i + head_dim/2) */
    size_t swa_pattern;    /* 0: every layer has sliding_window; n: layer l is global (window 0,
                              rope_theta) when (l + 1) % n == 0, else windowed (rope_theta_swa) */
    float rope_theta_swa;  /* RoPE base of the windowed layers under swa_pattern; 0: rope_theta */
    float embed_scale;     /* token embeddings times this; 0: unscaled */
    float attn_scale;      /* attention scores' scale; 0: 1 / sqrt(head_dim) */
    float logit_softcap;   /* logits = c * tanh(logits / c); 0: none */
} if_config;

/* Width of one attention head. */
static inline size_t if_config_head_size(const if_config *c) {
    return c->head_dim ? c->head_dim : c->n_heads ? c->dim / c->n_heads : 0;
}

typedef struct if_matrix {
    if_dtype dtype;
    size_t rows, cols, group_size; /* group_size 0 for F32 */
    const float *f32;              /* (rows, cols) when F32 */
    const int8_t *q;               /* (rows, cols) when Q8 */
    const float *s;                /* (rows, cols / group_size) when Q8; (rows, kpad /
                                      group_size) when Q4 */
    /* Q4 only (if_q4_gemv_fn's layout): the row length padded with zero weights to kpad
     * (a multiple of 32 and of group_size); the activations are zero-padded to match */
    const uint8_t *q4;             /* (rows, kpad / 2) nibbles */
    const int8_t *codebook;        /* (16) */
    const float *signs;            /* (kpad) +-1 of the rotation (if_hadamard_fn), or NULL */
    size_t kpad;
    /* IF_KQ and IF_GGML only: the GGML type (IF_GGML_*) and the file's bytes of the
     * (rows, cols) tensor, raw_bytes == if_ggml_bytes(ggml_type, rows, cols) */
    int ggml_type;
    const void *raw;
    size_t raw_bytes;
    /* set by the core: 0, or the rows per group of raw's layout once the weight arena holds the
     * matrix grouped: 8 (Q4_K, Q6_K: if_kq_pack_x8) or 16 (Q4_K: if_kq_pack_x16; Q8_0:
     * if_q80_pack_x16) */
    int group_rows;
} if_matrix;

/* The matrices of one layer, in the one order every reader, writer, binding and the core use
 * (an X-macro: X(name, rows, cols), shapes in if_config terms: D dim, Q n_heads * head size, KV
 * kv_dim, H hidden_dim).
 * IF_MAT_<name> is each one's index in that order. */
#define IF_LAYER_MATRICES(X) \
    X(wq, Q, D) X(wk, KV, D) X(wv, KV, D) X(wo, D, Q) X(w1, H, D) X(w2, D, H) X(w3, H, D)
#define IF_MAT_INDEX_(name, rows, cols) IF_MAT_##name,
enum { IF_LAYER_MATRICES(IF_MAT_INDEX_) IF_N_LAYER_MATRICES };

/* A layer's optional float vectors, NULL when the layer has none (X(name, length), lengths as
 * above, HS the head size): norms after attention and after the FFN (before each residual
 * add), per-head RMSNorm of q and k (one head_size weight shared by the heads, before RoPE), and
 * q/k/v biases (added after the projections). */
#define IF_LAYER_VECTORS(X) \
    X(rms_post_att, D) X(rms_post_ffn, D) X(q_norm, HS) X(k_norm, HS) X(bq, Q) X(bk, KV) X(bv, KV)
#define IF_VEC_INDEX_(name, len) IF_VEC_##name,
enum { IF_LAYER_VECTORS(IF_VEC_INDEX_) IF_N_LAYER_VECTORS };

typedef struct if_layer_weights {
    const float *rms_att; /* (dim) */
    const float *rms_ffn; /* (dim) */
#define IF_VEC_FIELD_(name, len) const float *name; /* (len) or NULL */
    IF_LAYER_VECTORS(IF_VEC_FIELD_)
#undef IF_VEC_FIELD_
#define IF_MAT_FIELD_(name, rows, cols) if_matrix name; /* (rows, cols) */
    IF_LAYER_MATRICES(IF_MAT_FIELD_)
#undef IF_MAT_FIELD_
} if_layer_weights;

/* The layer's matrix with index i (IF_MAT_*), or NULL past the last. */
static inline const if_matrix *if_layer_matrix(const if_layer_weights *L, size_t i) {
#define IF_MAT_CASE_(name, rows, cols) \
    case IF_MAT_##name:                \
        return &L->name;
    switch (i) { IF_LAYER_MATRICES(IF_MAT_CASE_) }
#undef IF_MAT_CASE_
    return NULL;
}

typedef struct if_weights {
    const float *tok_embeddings; /* (vocab, dim) float32 token table, or NULL: `tok` below */
    const float *rms_final;      /* (dim) */
    if_matrix wcls;              /* (vocab, dim) */
    const if_layer_weights *layers; /* n_layers entries, copied by if_model_create */
    const float *rope_freqs;     /* (head_size / 2) RoPE frequency divisors (Llama 3 scaling:
                                    angle of pair i = pos * theta^(-2i / head_size) / f[i]), or
                                    NULL */
    /* The token table when tok_embeddings is NULL: a (vocab, dim) F32, Q8 or Q4 matrix whose
     * looked-up rows are dequantized (csrc/embed.c): Q8 x = (float)q * s; Q4 v = (float)cb[nib] *
     * s along the padded row, then for a rotated one x = signs * H v (the scalar Hadamard
     * kernel, the first dim values). The same data as wcls (a tied classifier: tok = wcls) is
     * one resident copy: when the classifier's row-major int8 is released after packing
     * (if_model_opts.on_packed), rows come from the packed copy (if_q8_gemm_kernel.unpack). */
    if_matrix tok;
} if_weights;

/* The layer's optional vector with index i (IF_VEC_*), as a pointer to its field. */
static inline const float **if_layer_vector(if_layer_weights *L, size_t i) {
#define IF_VEC_CASE_(name, len) \
    case IF_VEC_##name:         \
        return &L->name;
    switch (i) { IF_LAYER_VECTORS(IF_VEC_CASE_) }
#undef IF_VEC_CASE_
    return NULL;
}

typedef struct if_model if_model;

/* Prefill chunk rows (ubatch) when a caller passes 0. */
#define IF_DEFAULT_UBATCH 512

/* Validate config and weights (shapes, group sizes, non-NULL pointers), take the kernels
 * currently selected by dispatch, pack the Q8 weights once if the prefill kernel wants a
 * packed layout, and allocate the run state. The weight memory is borrowed: it must outlive
 * the model. `ubatch` is the prefill chunk (rows per GEMM), 0 for the default (512). The KV
 * cache is float32; if_model_create_opts chooses another type. */
if_status if_model_create(const if_config *cfg, const if_weights *w, size_t n_threads,
                          size_t ubatch, if_model **out, char *err, size_t errlen);
/* Run options of if_model_create_opts. */
typedef struct if_model_opts {
    size_t n_threads; /* >= 1 */
    size_t ubatch;    /* prefill chunk rows, 0 for the default (512) */
    if_kv_type kv_type;
    if_kernel_set kernels; /* the model's kernels (if_kernels_choose); NULL tables: automatic */
    /* Called during if_model_create_opts right after matrix idx (numbered as for
     * if_model_unpack) is packed, only when the model will read nothing but its packed copy
     * (if_model_reads_rowmajor 0): the caller may free that matrix's row-major int8 at once, so
     * the two copies of all the weights never coexist. Likewise after each 4-bit matrix when
     * 4-bit decode reads the packed copy (if_model_q4_decode_packed 1): its row-major nibbles
     * are not read again. NULL: not called. */
    void (*on_packed)(void *ctx, size_t idx);
    void *on_packed_ctx;
    size_t n_seqs; /* KV cache sequence slots (if_model_decode_batch), 0 for 1 */
    /* Thread budget of decode matmuls (M = 1): one thread per this many output rows, at
     * least one, at most the pool (0: the whole pool for every matmul). */
    size_t gemv_rows_per_thread;
    /* Work (multiply-adds) below which an op runs on the calling thread alone (0: 2^17). */
    size_t par_min_work;
    /* SME2 hybrid split: when the model's Q8 kernels are SME2, workers 0..k-1 of each Q8
     * matmul run them (streaming mode) and the others the non-streaming dotprod (else neon)
     * kernels over the same weights, with the same result bits. 0: no split. */
    size_t sme2_workers;
    /* 1: when the 4-bit GEMM declares no packed layout, copy each 4-bit matrix's row-major
     * nibbles into the model's weight arena (2 MiB-aligned, transparent huge pages asked for)
     * and read that copy; on_packed is then called for each, since the caller's nibbles are
     * not read again (the caller should set it only for nibbles it can free: a converted
     * model, not a mapped file). 0: read the caller's nibbles where they are. */
    int q4_arena;
    /* 1: copy each in-place block matrix (IF_KQ: the file's K-quant, legacy or IQ4 blocks,
     * byte for byte) into the model's weight arena, a slice at the start of each decode step
     * (if_model_forward, if_model_batch; 32 steps copy all), each matrix read from its copy
     * once whole (if_model_arena_wait copies the rest at once). Decode streams every weight
     * byte per token, and a mapped file has 4 KiB pages. 2: the same, and the caller's blocks
     * are a read-only file mapping whose pages the core drops (madvise) once copied. The
     * caller's blocks must stay valid while any is pending. 0: read them in place. */
    int kq_arena;
} if_model_opts;

/* if_model_create with a KV cache type. */
if_status if_model_create_opts(const if_config *cfg, const if_weights *w,
                               const if_model_opts *opts, if_model **out, char *err,
                               size_t errlen);
/* Bytes of the model's KV cache (keys, values and int8 scales). */
size_t if_model_kv_bytes(const if_model *m);
/* Bytes of the weights the model packed at load for its GEMM kernel's layout (0 when the
 * kernel reads the row-major weights). */
size_t if_model_packed_bytes(const if_model *m);
/* Copy what is left of the in-place matrices into the weight arena now, so each is read from
 * there (if_model_opts.kq_arena; returns at once without one); pending: matrices not yet
 * moved. */
void if_model_arena_wait(if_model *m);
size_t if_model_arena_pending(const if_model *m);
/* The kernel in-place matrix idx (layer l's matrix i at l * IF_N_LAYER_MATRICES + i, the
 * classifier last) runs now, its GEMM when prefill: the file-layout one until the weight arena
 * moves it, then the one for its resident layout. NULL for another dtype or idx. */
const char *if_model_kq_kernel(const if_model *m, size_t idx, int prefill);
/* 1 if the model reads the row-major int8 weights it was given after if_model_create (0 when
 * it packed every Q8 matrix and decode, like prefill, reads the packed copy: the caller may then
 * release the row-major int8 arrays; the scales stay borrowed). fp32 models: 0 (no int8). */
int if_model_reads_rowmajor(const if_model *m);
/* 1 if the 4-bit matrices were packed for the prefill GEMM and decode reads that packed copy
 * too (if_q4_gemm_kernel.decode_packed, decode on the same tier): their row-major nibbles are
 * not read after if_model_create. */
int if_model_q4_decode_packed(const if_model *m);
/* Matrix idx (layer l's matrix i at l * IF_N_LAYER_MATRICES + i, the classifier last) back as
 * row-major int8 (rows * cols bytes; a 4-bit matrix: its nibbles, rows * kpad / 2 bytes) from
 * the packed copy, for callers that released theirs;
 * IF_ENOTSUP when the model keeps no packed copy its kernel can unpack, IF_EINVAL for idx. */
if_status if_model_unpack(const if_model *m, size_t idx, int8_t *dst, size_t bytes);
/* Bytes a model with config c, prefill chunk `ubatch` (0: 512) and cache type `type` would
 * allocate for its KV cache (what if_model_kv_bytes then reports); 0 if the config is
 * invalid or the size overflows. Allocates nothing. */
size_t if_kv_cache_bytes(const if_config *c, size_t ubatch, if_kv_type type);
/* Bytes a Q8 model with config c and group size gs would pack at load for table t's GEMM
 * layout (what if_model_packed_bytes then reports); 0 when the GEMM reads row-major weights. */
size_t if_packed_weight_bytes(const if_config *c, size_t gs, const if_kernel_table *t);
/* The token table's dtype; *tied = 1 when it is the classifier's matrix (one resident copy),
 * *packed = 1 when its rows are read from the classifier's packed copy (either may be NULL). */
if_dtype if_model_embed_info(const if_model *m, int *tied, int *packed);
/* The rows the forward pass starts from for tokens (n, each in range): out (n, dim) = the
 * table's rows dequantized (times embed_scale when the config has one). */
if_status if_model_embed_rows(if_model *m, const int32_t *tokens, size_t n, float *out,
                              char *err, size_t errlen);
/* The attention kernel the model runs (decode and prefill alike), e.g. "f32_attn_16x64_avx512". */
const char *if_model_attn_name(const if_model *m);

/* Store row x (kv_dim floats) of position pos into a cache's key (which 0) or value (which 1)
 * array, converting to the cache type. */
void if_kv_store(const if_kv_layer *kv, int which, size_t pos, const float *x);
/* A hint: prefetch the float32 cache lines if_kv_store(kv, 0 / 1, pos, ...) will write for a
 * block-transposed key row (one line per element) and the value row; nothing for other
 * types. No result depends on it. */
void if_kv_prefetch_row(const if_kv_layer *kv, size_t pos);
/* Slot of position pos in a cache (see if_kv_layer). */
size_t if_kv_slot(const if_kv_layer *kv, size_t pos);
/* Index, in floats from kv->k, of key element c of slot `slot` in a block-transposed cache
 * (if_kv_layer.keys_t); the slot's next element is IF_ATTN_KEY_BLOCK floats further on. */
size_t if_kv_key_t_index(const if_kv_layer *kv, size_t slot, size_t c);

/* Free the run state (not the weights). NULL is allowed. */
void if_model_free(if_model *m);
/* One decode step: run `token` at position `pos` and write vocab_size logits. */
if_status if_model_forward(if_model *m, int32_t token, size_t pos, float *logits, char *err,
                           size_t errlen);
/* Prefill n tokens at positions pos0 .. pos0+n-1 in chunks of ubatch rows: every projection
 * is a GEMM over the chunk; attention runs as query tiles x key blocks with an online softmax
 * (the same kernel and float order as a decode step, which is a chunk of one row). Writes
 * the last position's logits to `logits` (may be NULL); when `all_logits` is non-NULL it
 * receives (n, vocab) logits. The logits equal those of n decode steps bit for bit. */
if_status if_model_prefill(if_model *m, const int32_t *tokens, size_t n, size_t pos0,
                           float *logits, float *all_logits, char *err, size_t errlen);
/* The final hidden states (after the last layer and the final norm: the rows the classifier
 * reads) of n tokens run at pos0.. in slot `seq`, in prefill's chunks and arithmetic, so they
 * are the same bits at every tier, thread count and chunk size. Every row (n x dim floats) into
 * `out`, or with last_only the last position's row only (dim floats); out_len is out's size in
 * floats, checked before anything runs. The slot's cache holds the tokens' K/V afterwards. */
if_status if_model_hidden_seq(if_model *m, size_t seq, const int32_t *tokens, size_t n,
                              size_t pos0, int last_only, float *out, size_t out_len, char *err,
                              size_t errlen);
/* ---- sequence slots (a server's concurrent requests) ----
 * A model made with opts.n_seqs = N holds N KV caches, one per slot (if_model_kv_bytes counts
 * them all). if_model_forward / if_model_prefill run in slot 0. */
/* The number of slots. */
size_t if_model_n_seqs(const if_model *m);
/* if_model_prefill into slot `seq`'s cache. */
if_status if_model_prefill_seq(if_model *m, size_t seq, const int32_t *tokens, size_t n,
                               size_t pos0, float *logits, float *all_logits, char *err,
                               size_t errlen);
/* One decode step of n sequences together: row r runs tokens[r] at position pos[r] in slot
 * seqs[r] (slots distinct) and gets logits[r * vocab_size ..]. The projections are one GEMM
 * over the rows (in chunks of ubatch), attention runs per row over its own slot; every row's
 * logits equal those of if_model_forward on that sequence alone, bit for bit. */
if_status if_model_decode_batch(if_model *m, size_t n, const int32_t *tokens,
                                const size_t *seqs, const size_t *pos, float *logits, char *err,
                                size_t errlen);
/* The general step (continuous batching with chunked prefill in the same call): rows of any
 * slots, a slot's rows at rising positions (row r sees its slot's keys at positions <= pos[r]:
 * those written before and by its earlier rows here), e.g. one decode row of each running
 * sequence plus a chunk of a new prompt. Logits only for the rows with want[r] != 0 (want
 * NULL: every row), packed in row order into logits. Every wanted row's logits equal those of
 * the same sequence run alone (if_model_prefill / if_model_forward), bit for bit. */
if_status if_model_batch(if_model *m, size_t n, const int32_t *tokens, const size_t *seqs,
                         const size_t *pos, const uint8_t *want, float *logits, char *err,
                         size_t errlen);
/* Threads used by this model's pool. */
size_t if_model_threads(const if_model *m);
/* The kernel tables this model runs: decode (M = 1) and prefill (M > 1). */
const if_kernel_table *if_model_gemv(const if_model *m);
const if_kernel_table *if_model_gemm(const if_model *m);

/* ---------------------------------------------------------------------------------------
 * Sampler, exactly llama2.c run.c's (csrc/sampler.c).
 * ------------------------------------------------------------------------------------- */

/* xorshift* step as run.c's random_u32. */
uint32_t if_random_u32(uint64_t *state);
/* Uniform float in [0, 1) as run.c's random_f32. */
float if_random_f32(uint64_t *state);
/* In-place softmax as run.c's (max subtracted, expf, sequential sum, divide). */
void if_softmax(float *x, size_t n);
/* Sample a token from logits (modified in place) as run.c's sample(): temperature 0 is
 * argmax (first maximum); otherwise logits /= T, softmax, one coin from the RNG, then
 * top-p when 0 < topp < 1 else multinomial. `scratch` holds 2*n 32-bit words. */
int32_t if_sample(float *logits, size_t n, float temperature, float topp, uint64_t *state,
                  uint32_t *scratch);

/* Conversions at load (GGUF tensors to Q8, CQ4 quantization): their own header. */
#include "isaforge_convert.h"

#ifdef __cplusplus
}
#endif
#endif /* ISAFORGE_H */
