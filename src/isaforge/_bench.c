/* _bench.c - CPython binding of the benchmark and testing core (csrc/bench, csrc/testing,
 * isaforge_bench.h): kernel timing cases with the correctness gate, memory bandwidth and peak
 * int8 probes, and the test-only entry points (one kernel call of any table: a tier or a test
 * table such as amx_emulated). A separate extension module from _native so neither the
 * benchmark nor the tests' tables touch the runtime's dispatch. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

#include "_bench.h"
#include "isaforge.h"
#include "isaforge_bench.h"

#define ERRLEN 512

static PyObject *raise_status(if_status st, const char *err) {
    PyErr_SetString(st == IF_ENOMEM   ? PyExc_MemoryError
                    : st == IF_EINVAL ? PyExc_ValueError
                                      : PyExc_RuntimeError,
                    err);
    return NULL;
}

/* A kernel table by name: the test tables (ifb_test_table), else if_tier_find's (a compiled
 * tier this CPU runs). */
static const if_kernel_table *table_named(const char *name) {
    const if_kernel_table *t = ifb_test_table(name);
    if (t) return t;
    char err[256] = "";
    if_status st = if_tier_find(name, 0, &t, err, sizeof err);
    if (st != IF_OK) raise_status(st, err);
    return st == IF_OK ? t : NULL;
}

/* ---- Case ---- */

typedef struct {
    PyObject_HEAD ifb_case *c;
} CaseObject;

static void Case_dealloc(CaseObject *self) {
    ifb_case_free(self->c);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Case_init(CaseObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"op", "M", "N", "K", "gs", "copies", "codebook", NULL};
    const char *op;
    Py_ssize_t M, N, K, gs, copies = 1;
    PyObject *cbo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "snnnn|nO", kwlist, &op, &M, &N, &K, &gs, &copies,
                                     &cbo))
        return -1;
    ifb_op o;
    if (strcmp(op, "q8_gemv") == 0) o = IFB_Q8_GEMV;
    else if (strcmp(op, "q8_gemm") == 0) o = IFB_Q8_GEMM;
    else if (strcmp(op, "quantize") == 0) o = IFB_QUANTIZE;
    else if (strcmp(op, "q4_gemv") == 0) o = IFB_Q4_GEMV;
    else if (strcmp(op, "q4_gemm") == 0) o = IFB_Q4_GEMM;
    else if (strcmp(op, "q4k_gemv") == 0) o = IFB_Q4K_GEMV;
    else if (strcmp(op, "q6k_gemv") == 0) o = IFB_Q6K_GEMV;
    else if (strcmp(op, "q5k_gemv") == 0) o = IFB_Q5K_GEMV;
    else if (strcmp(op, "q4k_gemm") == 0) o = IFB_Q4K_GEMM;
    else if (strcmp(op, "q5k_gemm") == 0) o = IFB_Q5K_GEMM;
    else if (strcmp(op, "q6k_gemm") == 0) o = IFB_Q6K_GEMM;
    else if (strcmp(op, "q40_gemv") == 0) o = IFB_Q40_GEMV;
    else if (strcmp(op, "q41_gemv") == 0) o = IFB_Q41_GEMV;
    else if (strcmp(op, "q50_gemv") == 0) o = IFB_Q50_GEMV;
    else if (strcmp(op, "q51_gemv") == 0) o = IFB_Q51_GEMV;
    else if (strcmp(op, "iq4nl_gemv") == 0) o = IFB_IQ4NL_GEMV;
    else if (strcmp(op, "iq4xs_gemv") == 0) o = IFB_IQ4XS_GEMV;
    else if (strcmp(op, "q40_gemm") == 0) o = IFB_Q40_GEMM;
    else if (strcmp(op, "q41_gemm") == 0) o = IFB_Q41_GEMM;
    else if (strcmp(op, "q50_gemm") == 0) o = IFB_Q50_GEMM;
    else if (strcmp(op, "q51_gemm") == 0) o = IFB_Q51_GEMM;
    else if (strcmp(op, "q80_gemv") == 0) o = IFB_Q80_GEMV;
    else if (strcmp(op, "q80_gemm") == 0) o = IFB_Q80_GEMM;
    else {
        PyErr_Format(PyExc_ValueError,
                     "unknown op '%s' (q8_gemv, q8_gemm, quantize, q4_gemv, q4_gemm, q4k_gemv, "
                     "q5k_gemv, q6k_gemv, q4k_gemm, q5k_gemm, q6k_gemm, q40_gemv, q41_gemv, "
                     "q50_gemv, q51_gemv, iq4nl_gemv, iq4xs_gemv, q40_gemm, q41_gemm, q50_gemm, "
                     "q51_gemm, q80_gemv, q80_gemm)", op);
        return -1;
    }
    if (M < 0 || N < 0 || K < 0 || gs < 0 || copies < 0) {
        PyErr_SetString(PyExc_ValueError, "sizes must be >= 0");
        return -1;
    }
    int8_t cb[16];
    int have_cb = cbo != Py_None;
    if (have_cb) { /* 16 int8 values: bytes-like (read as int8) */
        Py_buffer b;
        if (PyObject_GetBuffer(cbo, &b, PyBUF_C_CONTIGUOUS) != 0) return -1;
        int ok = b.len == 16;
        if (ok) memcpy(cb, b.buf, 16);
        PyBuffer_Release(&b);
        if (!ok) {
            PyErr_SetString(PyExc_ValueError, "codebook: 16 int8 values (16 bytes) expected");
            return -1;
        }
    }
    if ((o == IFB_Q4_GEMV || o == IFB_Q4_GEMM) && !have_cb) {
        PyErr_Format(PyExc_ValueError, "op '%s' needs a codebook (16 int8 values)", op);
        return -1;
    }
    ifb_case_free(self->c);
    self->c = NULL;
    char err[256] = "";
    if_status st;
    const int8_t *cbp = have_cb ? cb : NULL;
    Py_BEGIN_ALLOW_THREADS st = ifb_case_create(o, (size_t)M, (size_t)N, (size_t)K, (size_t)gs,
                                                (size_t)copies, cbp, &self->c, err, sizeof err);
    Py_END_ALLOW_THREADS if (st != IF_OK) {
        raise_status(st, err);
        return -1;
    }
    return 0;
}

static int case_ready(CaseObject *self) {
    if (self->c) return 1;
    PyErr_SetString(PyExc_RuntimeError, "Case not initialised");
    return 0;
}

static PyObject *Case_check(CaseObject *self, PyObject *args) {
    const char *tier;
    if (!PyArg_ParseTuple(args, "s", &tier) || !case_ready(self)) return NULL;
    const if_kernel_table *t = table_named(tier);
    if (!t) return NULL;
    char err[256] = "";
    if_status st;
    Py_BEGIN_ALLOW_THREADS st = ifb_check(self->c, t, err, sizeof err);
    Py_END_ALLOW_THREADS if (st == IF_OK) Py_RETURN_NONE;
    if (st == IF_EINVAL) return PyUnicode_FromString(err); /* a disagreement, as data */
    return raise_status(st, err);
}

static PyObject *Case_time(CaseObject *self, PyObject *args) {
    const char *tier;
    Py_ssize_t iters;
    if (!PyArg_ParseTuple(args, "sn", &tier, &iters) || !case_ready(self)) return NULL;
    if (iters < 1) {
        PyErr_SetString(PyExc_ValueError, "iters must be >= 1");
        return NULL;
    }
    const if_kernel_table *t = table_named(tier);
    if (!t) return NULL;
    char err[256] = "";
    double sec = 0;
    if_status st;
    Py_BEGIN_ALLOW_THREADS st = ifb_time(self->c, t, (size_t)iters, &sec, err, sizeof err);
    Py_END_ALLOW_THREADS if (st != IF_OK) return raise_status(st, err);
    return PyFloat_FromDouble(sec);
}

static PyObject *Case_weight_bytes(CaseObject *self, void *closure) {
    (void)closure;
    if (!case_ready(self)) return NULL;
    return PyLong_FromSize_t(ifb_case_weight_bytes(self->c));
}

static PyMethodDef Case_methods[] = {
    {"check", (PyCFunction)Case_check, METH_VARARGS,
     "check(tier) -> None if tier's output equals scalar bit for bit, else the difference"},
    {"time", (PyCFunction)Case_time, METH_VARARGS,
     "time(tier, iters) -> seconds for iters back-to-back calls (monotonic clock, in C)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Case_getset[] = {
    {"weight_bytes", (getter)Case_weight_bytes, NULL, "bytes of one weight copy", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject CaseType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "isaforge._bench.Case",
    .tp_basicsize = sizeof(CaseObject),
    .tp_dealloc = (destructor)Case_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Case(op, M, N, K, gs, copies=1, codebook=None): one kernel op at one shape, for "
              "timing (q4_gemv / q4_gemm need codebook: 16 int8 values as bytes)",
    .tp_methods = Case_methods,
    .tp_getset = Case_getset,
    .tp_init = (initproc)Case_init,
    .tp_new = PyType_GenericNew,
};

/* ---- one kernel call, for the tests (any table: a tier or a test table) ---- */

/* The kernel table of `tier` (table_named), or with NULL the automatic choice's
 * decode/prefill table. */
const if_kernel_table *ifb_table_for(const char *tier, int prefill) {
    if (tier) return table_named(tier);
    if_kernel_set ks;
    char err[ERRLEN] = "";
    if_status st = if_kernels_choose(NULL, 0, &ks, err, sizeof err);
    if (st != IF_OK) return (const if_kernel_table *)raise_status(st, err);
    return prefill ? ks.gemm : ks.gemv;
}

static PyObject *py_quantize_q8(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *x, *q, *s;
    Py_ssize_t gs;
    const char *tier = NULL;
    if (!PyArg_ParseTuple(args, "OnOO|z", &x, &gs, &q, &s, &tier)) return NULL;
    const if_kernel_table *t = ifb_table_for(tier, 0);
    if (!t) return NULL;
    Py_buffer xv, qv, sv;
    if (PyObject_GetBuffer(x, &xv, PyBUF_C_CONTIGUOUS) != 0) return NULL;
    size_t K = (size_t)xv.len / sizeof(float);
    PyObject *ret = NULL;
    if (gs <= 0 || K % (size_t)gs) {
        PyErr_SetString(PyExc_ValueError, "group size must divide the row length");
    } else if (PyObject_GetBuffer(q, &qv, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) == 0) {
        if (PyObject_GetBuffer(s, &sv, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) == 0) {
            if ((size_t)qv.len < K || (size_t)sv.len < K / (size_t)gs * sizeof(float)) {
                PyErr_SetString(PyExc_ValueError, "output buffers too small");
            } else {
                t->quantize->run(qv.buf, sv.buf, xv.buf, K, (size_t)gs);
                ret = Py_NewRef(Py_None);
            }
            PyBuffer_Release(&sv);
        }
        PyBuffer_Release(&qv);
    }
    PyBuffer_Release(&xv);
    return ret;
}

/* swiglu(x, g, tier=None): x = silu(x) * g in place with `tier`'s SwiGLU kernel (tests);
 * geglu(x, g, tier=None): x = gelu_tanh(x) * g with its GeGLU kernel. */
static PyObject *gated(PyObject *args, int gelu) {
    PyObject *x, *g;
    const char *tier = NULL;
    if (!PyArg_ParseTuple(args, "OO|z", &x, &g, &tier)) return NULL;
    const if_kernel_table *t = ifb_table_for(tier, 1);
    if (!t) return NULL;
    if_swiglu_fn fn = gelu ? t->geglu->run : t->swiglu->run;
    Py_buffer xv, gv;
    if (PyObject_GetBuffer(x, &xv, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) return NULL;
    PyObject *ret = NULL;
    if (PyObject_GetBuffer(g, &gv, PyBUF_C_CONTIGUOUS) == 0) {
        if (xv.len != gv.len || xv.len % (Py_ssize_t)sizeof(float)) {
            PyErr_SetString(PyExc_ValueError, "x and g must be float32 of one length");
        } else {
            fn(xv.buf, gv.buf, (size_t)xv.len / sizeof(float));
            ret = Py_NewRef(Py_None);
        }
        PyBuffer_Release(&gv);
    }
    PyBuffer_Release(&xv);
    return ret;
}

static PyObject *py_swiglu(PyObject *mod, PyObject *args) {
    (void)mod;
    return gated(args, 0);
}

static PyObject *py_geglu(PyObject *mod, PyObject *args) {
    (void)mod;
    return gated(args, 1);
}

/* q8_gemm(xq, xs, M, w, ws, N, K, gs, out, tier=None): out (M, N) with the GEMM kernel of
 * `tier` (M == 1 uses the GEMV kernel). For tests and kernel benchmarks. */
static PyObject *py_q8_gemm(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *xq, *xs, *w, *ws, *out;
    Py_ssize_t M, N, K, gs;
    const char *tier = NULL;
    if (!PyArg_ParseTuple(args, "OOnOOnnnO|z", &xq, &xs, &M, &w, &ws, &N, &K, &gs, &out, &tier))
        return NULL;
    if (M <= 0 || N <= 0 || K <= 0 || gs <= 0 || K % gs)
        return PyErr_Format(PyExc_ValueError, "bad shape M=%zd N=%zd K=%zd gs=%zd", M, N, K, gs);
    const if_kernel_table *t = ifb_table_for(tier, M > 1);
    if (!t) return NULL;
    size_t m = (size_t)M, n = (size_t)N, k = (size_t)K, g = (size_t)gs;
    size_t need[5] = {m * k, m * k / g * sizeof(float), n * k, n * k / g * sizeof(float),
                      m * n * sizeof(float)};
    PyObject *objs[5] = {xq, xs, w, ws, out};
    Py_buffer v[5];
    int got = 0;
    PyObject *ret = NULL;
    for (; got < 5; got++) {
        int fl = PyBUF_C_CONTIGUOUS | (got == 4 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objs[got], &v[got], fl) != 0) break;
        if ((size_t)v[got].len < need[got]) {
            PyErr_Format(PyExc_ValueError, "argument %d: buffer too small", got);
            got++;
            break;
        }
    }
    if (got == 5 && !PyErr_Occurred()) {
        /* a tier with a packed GEMM layout gets its weights packed here, as at model load */
        int8_t *packed = NULL;
        const int8_t *wq = v[2].buf;
        const if_q8_gemm_kernel *gk = t->q8_gemm;
        if (m > 1 && gk->pack) {
            size_t bytes = (gk->pack_size(n, k, g) + 63) / 64 * 64;
            packed = aligned_alloc(64, bytes ? bytes : 64);
            if (!packed) {
                PyErr_NoMemory();
                got = -got; /* release below */
            } else {
                gk->pack(packed, v[2].buf, n, k, g);
                wq = packed;
            }
        }
        if (got > 0) {
            Py_BEGIN_ALLOW_THREADS if (m == 1) t->q8_gemv->run(v[4].buf, v[0].buf, v[1].buf, wq,
                                                               v[3].buf, 0, n, k, g);
            else gk->run(v[4].buf, n, v[0].buf, v[1].buf, m, wq, v[3].buf, 0, n, k, g);
            Py_END_ALLOW_THREADS ret = Py_NewRef(Py_None);
        } else {
            got = -got;
        }
        free(packed);
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    return ret;
}

/* attention(q, k, v, pos0, n_heads, n_kv_heads, head_size, window, n_sinks, cap, kv_type,
 * out, tier=None): one attention call for tests. k, v: (pos0 + n, kv_dim) float32, the keys and
 * values of positions 0 .. pos0+n-1, stored in order into a cache of `cap` slots of type
 * kv_type (a ring behind n_sinks sinks when cap is smaller than pos0 + n); then the n query
 * rows q (n, n_heads*head_size) at positions pos0.. attend, all heads in one kernel call
 * (tiles of rows and kv groups inside), with the kernel a model of that tier would use (the
 * matrix-engine one for an int8 cache when the tier has it). out: (n, n_heads*head_size)
 * float32. keys_t: the keys stored block-transposed (if_kv_layer.keys_t; a float32 cache whose
 * cap is a multiple of IF_ATTN_KEY_BLOCK), as a model stores them where it can. */
static PyObject *py_attention(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *qo, *ko, *vo, *out;
    Py_ssize_t pos0, nh, nkv, hsz, window, sinks, cap;
    int kv_type, keys_t = 0;
    const char *tier = NULL;
    if (!PyArg_ParseTuple(args, "OOOnnnnnnniO|zp", &qo, &ko, &vo, &pos0, &nh, &nkv, &hsz,
                          &window, &sinks, &cap, &kv_type, &out, &tier, &keys_t))
        return NULL;
    if (keys_t && (kv_type != IF_KV_F32 || cap <= 0 || cap % IF_ATTN_KEY_BLOCK)) {
        PyErr_SetString(PyExc_ValueError, "attention: keys_t needs a float32 cache whose cap "
                                          "is a multiple of IF_ATTN_KEY_BLOCK");
        return NULL;
    }
    const if_kernel_table *t = ifb_table_for(tier, 1);
    if (!t) return NULL;
    Py_buffer v[4];
    PyObject *objs[4] = {qo, ko, vo, out};
    int got = 0;
    for (; got < 4; got++)
        if (PyObject_GetBuffer(objs[got], &v[got],
                               PyBUF_C_CONTIGUOUS | (got == 3 ? PyBUF_WRITABLE : 0)) != 0)
            break;
    PyObject *ret = NULL;
    void *kc = NULL, *vc = NULL;
    float *ks = NULL, *vs = NULL, *scratch = NULL;
    if (got < 4) goto done;
    if (nh <= 0 || nkv <= 0 || nh % nkv || hsz <= 0 || hsz % 2 || pos0 < 0 || window < 0 ||
        sinks < 0 || cap <= 0 || kv_type < 0 || kv_type > 2 || (sinks && !window)) {
        PyErr_SetString(PyExc_ValueError, "attention: bad head counts, positions or cache");
        goto done;
    }
    size_t dim_q = (size_t)v[0].len / sizeof(float), T = (size_t)v[1].len / sizeof(float);
    size_t n = (size_t)v[3].len / sizeof(float);
    /* q and out are (n, nh*hs); k and v are (pos0 + n, nkv*hs) */
    size_t hs = (size_t)hsz, rows = dim_q / ((size_t)nh * hs);
    if (!rows || rows * (size_t)nh * hs != dim_q || n != dim_q ||
        (size_t)v[2].len != T * sizeof(float) || T != (rows + (size_t)pos0) * (size_t)nkv * hs) {
        PyErr_SetString(PyExc_ValueError, "attention: q/out (n, n_heads*hs) and k/v "
                                          "(pos0+n, n_kv_heads*hs) shapes disagree");
        goto done;
    }
    size_t kv_dim = (size_t)nkv * hs, total = (size_t)pos0 + rows, el = kv_type == 0 ? 4
                                                                       : kv_type == 1 ? 2 : 1;
    size_t need = window ? (size_t)sinks + (size_t)window + rows - 1 : total;
    if ((size_t)cap < (need < total ? need : total)) {
        PyErr_Format(PyExc_ValueError, "attention: cap %zd below the %zu slots needed", cap,
                     need < total ? need : total);
        goto done;
    }
    size_t group = 0;
    if (kv_type == IF_KV_I8)
        for (group = 32; hs % group;) group /= 2;
    kc = calloc((size_t)cap * kv_dim, el);
    vc = calloc((size_t)cap * kv_dim, el);
    if (group) {
        ks = calloc((size_t)cap * kv_dim / group, sizeof(float));
        vs = calloc((size_t)cap * kv_dim / group, sizeof(float));
    }
    size_t sn = if_attn_scratch_floats(hs, (size_t)nh, (size_t)(nh / nkv), (size_t)cap);
    scratch = malloc(sn * sizeof(float));
    if (!kc || !vc || !scratch || (group && (!ks || !vs))) {
        PyErr_NoMemory();
        goto done;
    }
    if_kv_layer kv = {(if_kv_type)kv_type, kc, vc, ks, vs, (size_t)cap, kv_dim, group,
                      window ? (size_t)sinks : 0, keys_t};
    if_attn_job j = {v[0].buf, v[3].buf, (size_t)nh * hs, (size_t)nh * hs, (size_t)pos0,
                     (size_t)nh, (size_t)nkv, hs, (size_t)window, (size_t)sinks, &kv};
    Py_BEGIN_ALLOW_THREADS for (size_t p = 0; p < total; p++) {
        if_kv_store(&kv, 0, p, (const float *)v[1].buf + p * kv_dim);
        if_kv_store(&kv, 1, p, (const float *)v[2].buf + p * kv_dim);
    }
    if_attn_fn fn = (kv_type == IF_KV_I8 ? t->attn_i8 : t->attn)->run;
    fn(&j, 0, rows, 0, (size_t)nh, scratch);
    Py_END_ALLOW_THREADS ret = Py_NewRef(Py_None);
done:
    free(kc);
    free(vc);
    free(ks);
    free(vs);
    free(scratch);
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    return ret;
}

/* ---- module functions ---- */

static PyObject *py_tiers(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *names = NULL;
    if (!PyArg_ParseTuple(args, "|z", &names)) return NULL;
    uint32_t disabled;
    char err[256] = "";
    if_status st = if_features_mask(names, &disabled, err, sizeof err);
    if (st != IF_OK) return raise_status(st, err);
    PyObject *list = PyList_New(0);
    if (!list) return NULL;
    for (size_t i = 0; i < if_tier_count(); i++) {
        char why[256] = "";
        int ok = if_tier_supported(i, disabled, why, sizeof why);
        const if_kernel_table *t = if_tier_table(i);
        PyObject *d = Py_BuildValue("{s:s,s:O,s:s,s:s,s:s,s:s,s:s}", "name", t->tier,
                                    "supported", ok ? Py_True : Py_False, "reason", why,
                                    "q8_gemv", t->q8_gemv->name, "q8_gemm", t->q8_gemm->name,
                                    "quantize", t->quantize->name, "f32_gemv",
                                    t->f32_gemv->name);
        if (!d || PyList_Append(list, d) != 0) {
            Py_XDECREF(d);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(d);
    }
    return list;
}

static PyObject *py_stream_read(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_ssize_t bytes, threads, reps;
    if (!PyArg_ParseTuple(args, "nnn", &bytes, &threads, &reps)) return NULL;
    if (bytes < 0 || threads < 1 || reps < 1) {
        PyErr_SetString(PyExc_ValueError, "stream_read: bytes >= 0, threads >= 1, reps >= 1");
        return NULL;
    }
    char err[256] = "";
    double g = 0;
    if_status st;
    Py_BEGIN_ALLOW_THREADS st = ifb_stream_read((size_t)bytes, (size_t)threads, (size_t)reps, &g,
                                                err, sizeof err);
    Py_END_ALLOW_THREADS if (st != IF_OK) return raise_status(st, err);
    return PyFloat_FromDouble(g);
}

/* peak_int8 / mix_int8: a (tier, threads, iters) int8 probe (same signature) -> GOP/s. */
typedef if_status (*int8_probe_fn)(const char *, size_t, size_t, double *, char *, size_t);

static PyObject *int8_probe(PyObject *args, const char *name, int8_probe_fn fn) {
    const char *tier;
    Py_ssize_t threads, iters;
    if (!PyArg_ParseTuple(args, "snn", &tier, &threads, &iters)) return NULL;
    if (threads < 1 || iters < 1) {
        PyErr_Format(PyExc_ValueError, "%s: threads >= 1, iters >= 1", name);
        return NULL;
    }
    char err[256] = "";
    double g = 0;
    if_status st;
    Py_BEGIN_ALLOW_THREADS st = fn(tier, (size_t)threads, (size_t)iters, &g, err, sizeof err);
    Py_END_ALLOW_THREADS if (st != IF_OK) return raise_status(st, err);
    return PyFloat_FromDouble(g);
}

static PyObject *py_peak_int8(PyObject *mod, PyObject *args) {
    (void)mod;
    return int8_probe(args, "peak_int8", ifb_peak_int8);
}

static PyObject *py_mix_int8(PyObject *mod, PyObject *args) {
    (void)mod;
    return int8_probe(args, "mix_int8", ifb_mix_int8);
}

static PyObject *py_now(PyObject *mod, PyObject *args) {
    (void)mod, (void)args;
    return PyFloat_FromDouble(ifb_now());
}

/* The buffers of a kernel test call: each object's C-contiguous view, checked to hold at
 * least need[i] bytes (the last `writable` ones writable). 0 with an exception and nothing
 * held, else 1 (the caller releases all n). */
int ifb_get_views(PyObject *const *objs, const size_t *need, int n, int writable,
                  Py_buffer *v) {
    for (int i = 0; i < n; i++) {
        int fl = PyBUF_C_CONTIGUOUS | (i >= n - writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objs[i], &v[i], fl) != 0 || (size_t)v[i].len < need[i]) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_ValueError, "argument %d: buffer too small", i);
                PyBuffer_Release(&v[i]);
            }
            for (int j = 0; j < i; j++) PyBuffer_Release(&v[j]);
            return 0;
        }
    }
    return 1;
}

/* q4_gemm(xq, xs, M, w, ws, cb, N, K, gs, out, tier=None, gemm=0): out (M, N) with the 4-bit
 * GEMM kernel of `tier` (M == 1: its 4-bit GEMV; gemm = 1: the GEMM at M = 1 too, over its
 * packed copy when it packs, as a decode_packed model's decode). w: (N, K/2) nibbles, ws:
 * (N, K/gs), cb: (16). */
static PyObject *py_q4_gemm(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *objs[6];
    Py_ssize_t M, N, K, gs;
    const char *tier = NULL;
    int gemm = 0;
    if (!PyArg_ParseTuple(args, "OOnOOOnnnO|zp", &objs[0], &objs[1], &M, &objs[2], &objs[3],
                          &objs[4], &N, &K, &gs, &objs[5], &tier, &gemm))
        return NULL;
    if (M <= 0 || N <= 0 || K <= 0 || gs <= 0 || gs % 32 || K % gs)
        return PyErr_Format(PyExc_ValueError, "bad shape M=%zd N=%zd K=%zd gs=%zd", M, N, K, gs);
    const if_kernel_table *t = ifb_table_for(tier, M > 1 || gemm);
    if (!t) return NULL;
    size_t m = (size_t)M, n = (size_t)N, k = (size_t)K, g = (size_t)gs;
    size_t need[6] = {m * k, m * k / g * sizeof(float), n * k / 2, n * k / g * sizeof(float), 16,
                      m * n * sizeof(float)};
    Py_buffer v[6];
    if (!ifb_get_views(objs, need, 6, 1, v)) return NULL;
    const if_q4_gemv_kernel *gv = t->q4_gemv ? t->q4_gemv : if_tier_table(0)->q4_gemv;
    const if_q4_gemm_kernel *gm = t->q4_gemm ? t->q4_gemm : if_tier_table(0)->q4_gemm;
    /* a GEMM with a packed layout gets its weights packed here, as at model load */
    uint8_t *packed = NULL;
    const uint8_t *wq = v[2].buf;
    if ((m > 1 || gemm) && gm->pack) {
        packed = malloc(gm->pack_size(n, k, g) + 1);
        if (!packed) {
            for (int i = 0; i < 6; i++) PyBuffer_Release(&v[i]);
            return PyErr_NoMemory();
        }
        gm->pack(packed, wq, n, k, g);
        wq = packed;
    }
    Py_BEGIN_ALLOW_THREADS
    if (m == 1 && !gemm) gv->run(v[5].buf, v[0].buf, v[1].buf, wq, v[3].buf, v[4].buf, 0, n, k, g);
    else gm->run(v[5].buf, n, v[0].buf, v[1].buf, m, wq, v[3].buf, v[4].buf, 0, n, k, g);
    Py_END_ALLOW_THREADS
    free(packed);
    for (int i = 0; i < 6; i++) PyBuffer_Release(&v[i]);
    Py_RETURN_NONE;
}

/* hadamard(x, signs, kpad, gs, out, tier=None): out (kpad) = the tier's rotation of x (K
 * floats; signs (kpad) float32 or None). */
static PyObject *py_hadamard(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *x, *signs, *out;
    Py_ssize_t kpad, gs;
    const char *tier = NULL;
    if (!PyArg_ParseTuple(args, "OOnnO|z", &x, &signs, &kpad, &gs, &out, &tier)) return NULL;
    if (kpad <= 0 || gs <= 0 || kpad % gs || (signs != Py_None && (gs & (gs - 1))))
        return PyErr_Format(PyExc_ValueError, "bad kpad=%zd gs=%zd", kpad, gs);
    const if_kernel_table *t = ifb_table_for(tier, 0);
    if (!t) return NULL;
    Py_buffer v[3];
    PyObject *objs[3] = {x, signs == Py_None ? x : signs, out};
    size_t need[3] = {0, signs == Py_None ? 0 : (size_t)kpad * sizeof(float),
                      (size_t)kpad * sizeof(float)};
    if (!ifb_get_views(objs, need, 3, 1, v)) return NULL;
    size_t K = (size_t)v[0].len / sizeof(float);
    if (K > (size_t)kpad) {
        for (int i = 0; i < 3; i++) PyBuffer_Release(&v[i]);
        return PyErr_Format(PyExc_ValueError, "x longer than kpad");
    }
    const if_hadamard_kernel *h = t->hadamard ? t->hadamard : if_tier_table(0)->hadamard;
    h->run(v[2].buf, v[0].buf, signs == Py_None ? NULL : v[1].buf, K, (size_t)kpad, (size_t)gs);
    for (int i = 0; i < 3; i++) PyBuffer_Release(&v[i]);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"q4_gemm", py_q4_gemm, METH_VARARGS,
     "q4_gemm(xq, xs, M, w, ws, cb, N, K, gs, out, tier=None, gemm=0): 4-bit codebook matmul "
     "(tests)."},
    {"kq_gemm", py_kq_gemm, METH_VARARGS,
     "kq_gemm(type, xq, xd, xsum, M, w, N, K, out, tier=None, gemm=0): K-quant matmul (tests)."},
    {"group_row", py_group_row, METH_VARARGS,
     "group_row(type, dst, grouped, r, N, K): one row of pack_groups' output back (tests)."},
    {"pack_groups", py_pack_groups, METH_VARARGS,
     "pack_groups(type, dst, src, N, K): Q4_K / Q8_0 rows into their row groups (tests)."},
    {"kq_kernel", py_kq_kernel, METH_VARARGS,
     "kq_kernel(type, tier=None, gemm=0) -> the name of the kernel kq_gemm runs (tests)."},
    {"k8_quantize", py_k8_quantize, METH_VARARGS,
     "k8_quantize(x, q, d, bsum, tier=None): K8 activation quantization (tests)."},
    {"hadamard", py_hadamard, METH_VARARGS,
     "hadamard(x, signs, kpad, gs, out, tier=None): activation rotation (tests)."},
    {"tiers", py_tiers, METH_VARARGS,
     "tiers(disabled=None) -> [{name, supported, reason, q8_gemv, q8_gemm, quantize, f32_gemv}]"},
    {"stream_read", py_stream_read, METH_VARARGS,
     "stream_read(bytes, threads, reps) -> best read-only GB/s"},
    {"peak_int8", py_peak_int8, METH_VARARGS,
     "peak_int8(tier, threads, iters) -> GOP/s of the tier's int8 instruction in a tight loop"},
    {"mix_int8", py_mix_int8, METH_VARARGS,
     "mix_int8(tier, threads, iters) -> GOP/s of the tier's GEMM inner loop over L1 data"},
    {"now", py_now, METH_NOARGS, "now() -> monotonic seconds"},
    {"attention", py_attention, METH_VARARGS,
     "attention(q, k, v, pos0, n_heads, n_kv_heads, head_size, window, n_sinks, cap, kv_type, "
     "out, tier=None, keys_t=False): one attention kernel call over a cache filled with k, v "
     "(tests)."},
    {"swiglu", py_swiglu, METH_VARARGS, "swiglu(x, g, tier=None): x = silu(x) * g in place"},
    {"geglu", py_geglu, METH_VARARGS, "geglu(x, g, tier=None): x = gelu_tanh(x) * g in place"},
    {"quantize_q8", py_quantize_q8, METH_VARARGS,
     "quantize_q8(x_f32, gs, q_out_i8, s_out_f32, tier=None): activation quantization."},
    {"q8_gemm", py_q8_gemm, METH_VARARGS,
     "q8_gemm(xq, xs, M, w, ws, N, K, gs, out, tier=None): out (M, N) float32."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_bench",
                                        "isaforge benchmark core", -1, module_methods};

PyMODINIT_FUNC PyInit__bench(void) {
    if (PyType_Ready(&CaseType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    Py_INCREF(&CaseType);
    if (PyModule_AddObject(m, "Case", (PyObject *)&CaseType) < 0) {
        Py_DECREF(&CaseType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
