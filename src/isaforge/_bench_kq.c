/* _bench_kq.c - the _bench module's K-quant entry points for the tests (_bench.c registers
 * them): one call of a table's K-quant, legacy-block, IQ4 or row-group kernel, the K8 activation
 * quantizer, and the row-group layouts the weight arena writes. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_bench.h"
#include "isaforge.h"

/* kq_gemm(type, xq, xd, xsum, M, w, N, K, out, tier=None, gemm=0): out (M, N) with `tier`'s
 * K-quant kernel of type "q4_k" / "q5_k" / "q6_k" over the file's blocks w (N, K / 256 blocks): its
 * GEMV when M == 1 and not gemm, else its GEMM. k8_quantize(x, q, d, bsum, tier=None): one
 * activation row to the K8 form. A tier without a K-quant kernel runs the scalar one. */
static const char *const kq_names[] = {"q4_k", "q5_k", "q6_k", "q4_0", "q4_1", "q5_0", "q5_1",
                                        "iq4_nl", "iq4_xs", "q8_0", "q4_kx8", "q8_0x16",
                                        "q6_kx8", "q4_kx16", "q6_kx16", "q4_0x16"};
#define KQ_X8 10  /* "q4_kx8": Q4_K on 8-row groups (if_kq_pack_x8), N a multiple of 8 */
#define KQ_X16 11 /* "q8_0x16": Q8_0 on 16-row groups (if_q80_pack_x16), N of 16, K of 64 */
#define KQ_X8_6 12 /* "q6_kx8": Q6_K on 8-row groups (if_kq_pack_x8), N a multiple of 8 */
#define KQ_X16_4 13 /* "q4_kx16": Q4_K on 16-row groups (if_kq_pack_x16), N a multiple of 16 */
#define KQ_X16_6 14 /* "q6_kx16": Q6_K on 16-row groups (if_kq_pack_x16), N a multiple of 16 */
#define KQ_X16_40 15 /* "q4_0x16": Q4_0 on 16-row groups (if_q40_pack_x16), N of 16, K of 64 */
#define KQ_N 16

/* Table t's GEMV and GEMM of block type kq_names[ti], the scalar tier's where t has none. */
static void kq_pick(const if_kernel_table *t, int ti, const if_kq_gemv_kernel **gv,
                    const if_kq_gemm_kernel **gm) {
    const if_kernel_table *t0 = if_tier_table(0);
#define PICK(f) (t->f ? t->f : t0->f)
    const if_kq_gemv_kernel *gvs[] = {PICK(q4k_gemv), PICK(q5k_gemv), PICK(q6k_gemv),
                                      PICK(q40_gemv), PICK(q41_gemv), PICK(q50_gemv),
                                      PICK(q51_gemv), PICK(iq4nl_gemv), PICK(iq4xs_gemv),
                                      PICK(q80_gemv)};
    const if_kq_gemm_kernel *gms[] = {PICK(q4k_gemm), PICK(q5k_gemm), PICK(q6k_gemm),
                                      PICK(q40_gemm), PICK(q41_gemm), PICK(q50_gemm),
                                      PICK(q51_gemm), PICK(iq4nl_gemm), PICK(iq4xs_gemm),
                                      PICK(q80_gemm)};
#undef PICK
    /* on 8-row groups: the table's own kernels or none (no scalar kernel reads the layout) */
    *gv = ti == KQ_X8 ? t->q4kx8_gemv : ti == KQ_X8_6 ? t->q6kx8_gemv
          : ti == KQ_X16 ? t->q80x16_gemv : ti == KQ_X16_4 ? t->q4kx16_gemv
          : ti == KQ_X16_6 ? t->q6kx16_gemv : ti == KQ_X16_40 ? t->q40x16_gemv : gvs[ti];
    *gm = ti == KQ_X8 ? t->q4kx8_gemm : ti == KQ_X8_6 ? t->q6kx8_gemm
          : ti == KQ_X16 ? t->q80x16_gemm : ti == KQ_X16_4 ? t->q4kx16_gemm
          : ti == KQ_X16_6 ? t->q6kx16_gemm : ti == KQ_X16_40 ? t->q40x16_gemm : gms[ti];
}

static int kq_type(const char *type) {
    for (int i = 0; i < KQ_N; i++)
        if (strcmp(type, kq_names[i]) == 0) return i;
    PyErr_Format(PyExc_ValueError, "unknown K-quant type '%s' (q4_k, q5_k, q6_k, q4_0, q4_1, "
                 "q5_0, q5_1, iq4_nl, iq4_xs, q8_0, q4_kx8, q8_0x16, q6_kx8, q4_kx16, q6_kx16, "
                 "q4_0x16)",
                 type);
    return -1;
}

/* kq_kernel(type, tier=None, gemm=0) -> the name of the kernel kq_gemm runs with these
 * arguments at M > 1 or gemm (its GEMM) or else at M = 1 (its GEMV): tests use it to see that a
 * table's own kernel runs, not the scalar fallback. */
PyObject *py_kq_kernel(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *type, *tier = NULL;
    int gemm = 0;
    if (!PyArg_ParseTuple(args, "s|zp", &type, &tier, &gemm)) return NULL;
    const int ti = kq_type(type);
    if (ti < 0) return NULL;
    const if_kernel_table *t = ifb_table_for(tier, gemm);
    if (!t) return NULL;
    const if_kq_gemv_kernel *gv;
    const if_kq_gemm_kernel *gm;
    kq_pick(t, ti, &gv, &gm);
    if (!gv || !gm) Py_RETURN_NONE;
    return PyUnicode_FromString(gemm ? gm->name : gv->name);
}

PyObject *py_kq_gemm(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *objs[5];
    const char *type, *tier = NULL;
    Py_ssize_t M, N, K;
    int gemm = 0;
    if (!PyArg_ParseTuple(args, "sOOOnOnnO|zp", &type, &objs[0], &objs[1], &objs[2], &M,
                          &objs[3], &N, &K, &objs[4], &tier, &gemm))
        return NULL;
    static const size_t bbs[] = {IF_Q4K_BLOCK_BYTES, IF_Q5K_BLOCK_BYTES, IF_Q6K_BLOCK_BYTES,
                                 IF_Q40_BLOCK_BYTES, IF_Q41_BLOCK_BYTES, IF_Q50_BLOCK_BYTES,
                                 IF_Q51_BLOCK_BYTES, IF_IQ4NL_BLOCK_BYTES, IF_IQ4XS_BLOCK_BYTES,
                                 IF_Q80_BLOCK_BYTES, IF_Q4K_BLOCK_BYTES, IF_Q80_BLOCK_BYTES,
                                 IF_Q6K_BLOCK_BYTES, IF_Q4K_BLOCK_BYTES, IF_Q6K_BLOCK_BYTES,
                                 IF_Q40_BLOCK_BYTES};
    const int ti = kq_type(type);
    if (ti < 0) return NULL;
    const size_t qb =
        ti >= 3 && ti != 8 && ti != KQ_X8 && ti != KQ_X8_6 && ti != KQ_X16_4 && ti != KQ_X16_6
            ? IF_QL
            : IF_QK;
    const int g8 = ti == KQ_X8 || ti == KQ_X8_6, g16 = ti == KQ_X16_4 || ti == KQ_X16_6;
    const int l16 = ti == KQ_X16 || ti == KQ_X16_40; /* legacy blocks in 16s: pairs of blocks */
    if (M <= 0 || N <= 0 || K <= 0 || K % (Py_ssize_t)qb || (g8 && N % 8) ||
        (l16 && (N % 16 || K % 64)) || (g16 && N % 16))
        return PyErr_Format(PyExc_ValueError, "bad shape M=%zd N=%zd K=%zd", M, N, K);
    const if_kernel_table *t = ifb_table_for(tier, M > 1 || gemm);
    if (!t) return NULL;
    size_t m = (size_t)M, n = (size_t)N, k = (size_t)K;
    size_t need[5] = {m * k, m * k / qb * sizeof(float), m * k / 16 * sizeof(int16_t),
                      n * k / qb * bbs[ti], m * n * sizeof(float)};
    const if_kq_gemv_kernel *gv;
    const if_kq_gemm_kernel *gm;
    kq_pick(t, ti, &gv, &gm);
    if (!gv || !gm)
        return PyErr_Format(PyExc_ValueError, "tier %s has no %s kernels", t->tier, type);
    Py_buffer v[5];
    if (!ifb_get_views(objs, need, 5, 1, v)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    if (m == 1 && !gemm) gv->run(v[4].buf, v[0].buf, v[1].buf, v[2].buf, v[3].buf, 0, n, k);
    else gm->run(v[4].buf, n, v[0].buf, v[1].buf, v[2].buf, m, v[3].buf, 0, n, k);
    Py_END_ALLOW_THREADS
    for (int i = 0; i < 5; i++) PyBuffer_Release(&v[i]);
    Py_RETURN_NONE;
}

/* The row groups of type (q4_k, q6_k: 8 rows, K a multiple of 256; q4_kx16: Q4_K in 16 rows;
 * q8_0: 16 rows, K of 64): its GGML type, or -1 with ValueError; *bb, *row (bytes of a row)
 * and *g (rows per group) for (N, K) */
static int group_type(const char *type, Py_ssize_t N, Py_ssize_t K, size_t *bb, size_t *row,
                      int *g) {
    const int x16 = strcmp(type, "q4_kx16") == 0 || strcmp(type, "q6_kx16") == 0;
    const int t = strcmp(type, "q4_k") == 0 || strcmp(type, "q4_kx16") == 0 ? IF_GGML_Q4_K
                  : strcmp(type, "q6_k") == 0 || strcmp(type, "q6_kx16") == 0 ? IF_GGML_Q6_K
                  : strcmp(type, "q8_0") == 0     ? IF_GGML_Q8_0
                  : strcmp(type, "q4_0") == 0     ? IF_GGML_Q4_0
                                                  : -1;
    if (t < 0) {
        PyErr_Format(PyExc_ValueError,
                     "no row groups for type '%s' (q4_k, q6_k, q8_0, q4_0, q4_kx16, q6_kx16)", type);
        return -1;
    }
    const int legacy = t == IF_GGML_Q8_0 || t == IF_GGML_Q4_0;
    *g = legacy || x16 ? 16 : 8;
    const Py_ssize_t g_ = (Py_ssize_t)*g, kq = legacy ? 64 : IF_QK;
    if (N <= 0 || K <= 0 || N % g_ || K % kq) {
        PyErr_Format(PyExc_ValueError, "bad shape N=%zd K=%zd", N, K);
        return -1;
    }
    *bb = t == IF_GGML_Q4_K   ? IF_Q4K_BLOCK_BYTES
          : t == IF_GGML_Q6_K ? IF_Q6K_BLOCK_BYTES
          : t == IF_GGML_Q4_0 ? IF_Q40_BLOCK_BYTES
                              : IF_Q80_BLOCK_BYTES;
    *row = (size_t)K / (legacy ? IF_QL : IF_QK) * *bb;
    return t;
}

/* pack_groups(type, dst, src, N, K): the rows src of type into their row groups at dst (the
 * same size), as the weight arena lays them out (if_kq_pack_x8, if_q80_pack_x16). */
PyObject *py_pack_groups(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *objs[2];
    const char *type;
    Py_ssize_t N, K;
    if (!PyArg_ParseTuple(args, "sOOnn", &type, &objs[0], &objs[1], &N, &K)) return NULL;
    size_t bb, row;
    int g;
    const int t = group_type(type, N, K, &bb, &row, &g);
    if (t < 0) return NULL;
    PyObject *o[2] = {objs[1], objs[0]}; /* the writable one last */
    size_t need[2] = {row * (size_t)N, row * (size_t)N};
    Py_buffer v[2];
    if (!ifb_get_views(o, need, 2, 1, v)) return NULL;
    if (t == IF_GGML_Q8_0) if_q80_pack_x16(v[1].buf, v[0].buf, (size_t)N / 16, (size_t)K);
    else if (t == IF_GGML_Q4_0) if_q40_pack_x16(v[1].buf, v[0].buf, (size_t)N / 16, (size_t)K);
    else if (g == 16) if_kq_pack_x16(v[1].buf, v[0].buf, (size_t)N / 16, (size_t)K, bb);
    else if_kq_pack_x8(v[1].buf, v[0].buf, (size_t)N / 8, (size_t)K, bb);
    PyBuffer_Release(&v[0]);
    PyBuffer_Release(&v[1]);
    Py_RETURN_NONE;
}

/* group_row(type, dst, grouped, r, N, K): row r of pack_groups' output back in the file's bytes
 * (if_group_row, a grouped token table's lookup). */
PyObject *py_group_row(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *objs[2];
    const char *type;
    Py_ssize_t r, N, K;
    if (!PyArg_ParseTuple(args, "sOOnnn", &type, &objs[0], &objs[1], &r, &N, &K)) return NULL;
    size_t bb, row;
    int g;
    const int t = group_type(type, N, K, &bb, &row, &g);
    if (t < 0) return NULL;
    if (r < 0 || r >= N) return PyErr_Format(PyExc_ValueError, "bad shape N=%zd r=%zd", N, r);
    PyObject *o[2] = {objs[1], objs[0]}; /* the writable one last */
    size_t need[2] = {row * (size_t)N, row};
    Py_buffer v[2];
    if (!ifb_get_views(o, need, 2, 1, v)) return NULL;
    if_group_row(v[1].buf, v[0].buf, t, g, (size_t)r, (size_t)K);
    PyBuffer_Release(&v[0]);
    PyBuffer_Release(&v[1]);
    Py_RETURN_NONE;
}

PyObject *py_k8_quantize(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *objs[4];
    const char *tier = NULL;
    if (!PyArg_ParseTuple(args, "OOOO|z", &objs[0], &objs[1], &objs[2], &objs[3], &tier))
        return NULL;
    const if_kernel_table *t = ifb_table_for(tier, 0);
    if (!t) return NULL;
    Py_buffer v[4];
    size_t need[4] = {0, 0, 0, 0};
    if (!ifb_get_views(objs, need, 4, 3, v)) return NULL;
    size_t K = (size_t)v[0].len / sizeof(float);
    PyObject *ret = NULL;
    if (K == 0 || K % IF_QK) {
        PyErr_SetString(PyExc_ValueError, "row length must be a multiple of 256");
    } else if ((size_t)v[1].len < K || (size_t)v[2].len < K / IF_QK * sizeof(float) ||
               (size_t)v[3].len < K / 16 * sizeof(int16_t)) {
        PyErr_SetString(PyExc_ValueError, "output buffers too small");
    } else {
        const if_k8_quantize_kernel *qk = t->k8_quantize ? t->k8_quantize
                                                         : if_tier_table(0)->k8_quantize;
        qk->run(v[1].buf, v[2].buf, v[3].buf, v[0].buf, K);
        ret = Py_NewRef(Py_None);
    }
    for (int i = 0; i < 4; i++) PyBuffer_Release(&v[i]);
    return ret;
}
