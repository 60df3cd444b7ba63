/* _native.c - the thin CPython binding over the pure-C core in csrc/: the module, its
 * functions and the argument helpers; the Model type is _native_model_type.c (_native.h).
 *
 * It only converts arguments: buffers (numpy arrays, mmaps) are borrowed through the buffer
 * protocol and held for the model's lifetime; the GIL is released while C computes. */
#include "_native.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

/* ---- buffers ---- */

const void *ifpy_borrow(bufset *bs, PyObject *obj, size_t bytes, int writable,
                        const char *what) {
    if (bs->n == bs->cap) {
        size_t cap = bs->cap ? 2 * bs->cap : 16;
        Py_buffer *v = PyMem_Realloc(bs->v, cap * sizeof(Py_buffer));
        if (!v) {
            PyErr_NoMemory();
            return NULL;
        }
        bs->v = v;
        bs->cap = cap;
    }
    Py_buffer *view = &bs->v[bs->n];
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) != 0) return NULL;
    if ((size_t)view->len < bytes) {
        PyErr_Format(PyExc_ValueError, "%s: buffer holds %zd bytes, %zu needed", what, view->len,
                     bytes);
        PyBuffer_Release(view);
        return NULL;
    }
    bs->n++;
    return view->buf;
}

void ifpy_release_all(bufset *bs) {
    for (size_t i = 0; i < bs->n; i++) PyBuffer_Release(&bs->v[i]);
    PyMem_Free(bs->v);
    memset(bs, 0, sizeof *bs);
}

PyObject *ifpy_raise_status(if_status st, const char *err) {
    PyObject *type = st == IF_ENOMEM ? PyExc_MemoryError : PyExc_ValueError;
    if (st == IF_ENOTSUP) type = PyExc_RuntimeError;
    PyErr_SetString(type, err[0] ? err : "isaforge core error");
    return NULL;
}

/* ---- config and kernels ---- */

/* The config's named fields as the core's if_config holds them (exported as CONFIG_FIELDS):
 * sizes (required ones must be positive), then the floats, then the optional window. */
typedef struct cfg_field {
    const char *name;
    size_t off;
    int is_float, required;
} cfg_field;
static const cfg_field cfg_fields[] = {
    {"dim", offsetof(if_config, dim), 0, 1},
    {"hidden_dim", offsetof(if_config, hidden_dim), 0, 1},
    {"n_layers", offsetof(if_config, n_layers), 0, 1},
    {"n_heads", offsetof(if_config, n_heads), 0, 1},
    {"n_kv_heads", offsetof(if_config, n_kv_heads), 0, 1},
    {"vocab_size", offsetof(if_config, vocab_size), 0, 1},
    {"seq_len", offsetof(if_config, seq_len), 0, 1},
    {"rope_theta", offsetof(if_config, rope_theta), 1, 1},
    {"norm_eps", offsetof(if_config, norm_eps), 1, 1},
    {"sliding_window", offsetof(if_config, sliding_window), 0, 0},
    {"n_sinks", offsetof(if_config, n_sinks), 0, 0},
    /* the layer description: every one optional, 0 for a Llama layer */
    {"head_dim", offsetof(if_config, head_dim), 0, 0},
    {"act", offsetof(if_config, act), 0, 0},
    {"rope_neox", offsetof(if_config, rope_neox), 0, 0},
    {"swa_pattern", offsetof(if_config, swa_pattern), 0, 0},
    {"rope_theta_swa", offsetof(if_config, rope_theta_swa), 1, 0},
    {"embed_scale", offsetof(if_config, embed_scale), 1, 0},
    {"attn_scale", offsetof(if_config, attn_scale), 1, 0},
    {"logit_softcap", offsetof(if_config, logit_softcap), 1, 0},
};
#define N_CFG_FIELDS (sizeof cfg_fields / sizeof cfg_fields[0])

int ifpy_parse_config(PyObject *cfg, if_config *c) {
    if (!PyDict_Check(cfg)) {
        PyErr_SetString(PyExc_TypeError, "config must be a dict of the fields in CONFIG_FIELDS");
        return 0;
    }
    PyObject *key, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(cfg, &pos, &key, &val)) {
        const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        size_t i = 0;
        while (k && i < N_CFG_FIELDS && strcmp(k, cfg_fields[i].name) != 0) i++;
        if (!k || i == N_CFG_FIELDS) {
            char known[256] = "";
            for (size_t j = 0, off = 0; j < N_CFG_FIELDS && off < sizeof known; j++)
                off += (size_t)snprintf(known + off, sizeof known - off, "%s%s", j ? ", " : "",
                                        cfg_fields[j].name);
            PyErr_Format(PyExc_ValueError, "config: unknown field %R (fields: %s)", key, known);
            return 0;
        }
    }
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < N_CFG_FIELDS; i++) {
        const cfg_field *f = &cfg_fields[i];
        PyObject *v = PyDict_GetItemString(cfg, f->name); /* borrowed */
        if (!v) {
            if (!f->required) continue;
            PyErr_Format(PyExc_ValueError, "config: missing field '%s'", f->name);
            return 0;
        }
        if (f->is_float) {
            double d = PyFloat_AsDouble(v);
            if (d == -1.0 && PyErr_Occurred()) return 0;
            *(float *)(void *)((char *)c + f->off) = (float)d;
            continue;
        }
        Py_ssize_t n = PyLong_AsSsize_t(v);
        if (n == -1 && PyErr_Occurred()) return 0;
        if (n < 0 || (f->required && n == 0)) {
            PyErr_Format(PyExc_ValueError, "config: %s must be %s, got %zd", f->name,
                         f->required ? "positive" : ">= 0", n);
            return 0;
        }
        *(size_t *)(void *)((char *)c + f->off) = (size_t)n;
    }
    return 1;
}

int ifpy_choose(const char *tier, const char *disabled, if_kernel_set *ks, uint32_t *mask) {
    char err[ERRLEN] = "";
    if_status st = if_features_mask(disabled, mask, err, sizeof err);
    if (st == IF_OK) st = if_kernels_choose(tier, *mask, ks, err, sizeof err);
    if (st != IF_OK) ifpy_raise_status(st, err);
    return st == IF_OK;
}

/* ---- module functions ---- */

static PyObject *py_sample(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *logits;
    float temperature, topp;
    unsigned long long state;
    if (!PyArg_ParseTuple(args, "OffK", &logits, &temperature, &topp, &state)) return NULL;
    Py_buffer lv;
    if (PyObject_GetBuffer(logits, &lv, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) return NULL;
    size_t n = (size_t)lv.len / sizeof(float);
    uint32_t *scratch = PyMem_Malloc((2 * n + 1) * sizeof(uint32_t));
    if (!scratch) {
        PyBuffer_Release(&lv);
        return PyErr_NoMemory();
    }
    uint64_t st = state;
    int32_t tok;
    Py_BEGIN_ALLOW_THREADS tok = if_sample(lv.buf, n, temperature, topp, &st, scratch);
    Py_END_ALLOW_THREADS PyMem_Free(scratch);
    PyBuffer_Release(&lv);
    return Py_BuildValue("iK", (int)tok, (unsigned long long)st);
}

/* random_u32(state) / random_f32(state) -> (value, next state): run.c's xorshift. */
static int parse_state(PyObject *args, uint64_t *st) {
    unsigned long long state;
    if (!PyArg_ParseTuple(args, "K", &state)) return 0;
    *st = state;
    return 1;
}

static PyObject *py_random_u32(PyObject *mod, PyObject *args) {
    uint64_t st;
    if ((void)mod, !parse_state(args, &st)) return NULL;
    const uint32_t r = if_random_u32(&st);
    return Py_BuildValue("kK", (unsigned long)r, (unsigned long long)st);
}

static PyObject *py_random_f32(PyObject *mod, PyObject *args) {
    uint64_t st;
    if ((void)mod, !parse_state(args, &st)) return NULL;
    const float r = if_random_f32(&st); /* before st is read below */
    return Py_BuildValue("fK", r, (unsigned long long)st);
}

static PyObject *py_softmax(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *x;
    if (!PyArg_ParseTuple(args, "O", &x)) return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(x, &v, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) return NULL;
    if_softmax(v.buf, (size_t)v.len / sizeof(float));
    PyBuffer_Release(&v);
    Py_RETURN_NONE;
}

/* A tier's kernel names by op, and its GEMM's step and packed layout. q8_decode: the kernel a
 * decode step's Q8 matmuls run, the tier's GEMM at M = 1 over its packed copy where the GEMM
 * declares decode_packed (one resident copy), else its GEMV; q4_decode likewise for 4-bit. */
static PyObject *table_dict(const if_kernel_table *t);

/* The tier's in-place K-quant kernels by op (the scalar ones where the table has none) into
 * dict d; -1 on error. */
static int kq_names(PyObject *d, const if_kernel_table *t) {
    const char *names[][2] = {
        {"q4k_gemv", t->q4k_gemv ? t->q4k_gemv->name : "q4k_gemv_1x1_scalar"},
        {"q5k_gemv", t->q5k_gemv ? t->q5k_gemv->name : "q5k_gemv_1x1_scalar"},
        {"q6k_gemv", t->q6k_gemv ? t->q6k_gemv->name : "q6k_gemv_1x1_scalar"},
        {"q4k_gemm", t->q4k_gemm ? t->q4k_gemm->name : "q4k_gemm_1x1_scalar"},
        {"q5k_gemm", t->q5k_gemm ? t->q5k_gemm->name : "q5k_gemm_1x1_scalar"},
        {"q6k_gemm", t->q6k_gemm ? t->q6k_gemm->name : "q6k_gemm_1x1_scalar"},
        {"q40_gemv", t->q40_gemv ? t->q40_gemv->name : "q40_gemv_1x1_scalar"},
        {"q41_gemv", t->q41_gemv ? t->q41_gemv->name : "q41_gemv_1x1_scalar"},
        {"q50_gemv", t->q50_gemv ? t->q50_gemv->name : "q50_gemv_1x1_scalar"},
        {"q51_gemv", t->q51_gemv ? t->q51_gemv->name : "q51_gemv_1x1_scalar"},
        {"q80_gemv", t->q80_gemv ? t->q80_gemv->name : "q80_gemv_1x1_scalar"},
        {"q40_gemm", t->q40_gemm ? t->q40_gemm->name : "q40_gemm_1x1_scalar"},
        {"q41_gemm", t->q41_gemm ? t->q41_gemm->name : "q41_gemm_1x1_scalar"},
        {"q50_gemm", t->q50_gemm ? t->q50_gemm->name : "q50_gemm_1x1_scalar"},
        {"q51_gemm", t->q51_gemm ? t->q51_gemm->name : "q51_gemm_1x1_scalar"},
        {"iq4nl_gemv", t->iq4nl_gemv ? t->iq4nl_gemv->name : "iq4nl_gemv_1x1_scalar"},
        {"iq4xs_gemv", t->iq4xs_gemv ? t->iq4xs_gemv->name : "iq4xs_gemv_1x1_scalar"},
        {"iq4nl_gemm", t->iq4nl_gemm ? t->iq4nl_gemm->name : "iq4nl_gemm_1x1_scalar"},
        {"iq4xs_gemm", t->iq4xs_gemm ? t->iq4xs_gemm->name : "iq4xs_gemm_1x1_scalar"},
        {"q80_gemm", t->q80_gemm ? t->q80_gemm->name : "q80_gemm_1x1_scalar"},
        {"k8_quantize", t->k8_quantize ? t->k8_quantize->name : "k8_quantize_1x1_scalar"},
        /* Q4_K on 8- or 16-row groups, Q6_K on 8-row ones, Q8_0 on 16-row ones (None: the
         * tier has none; the weight arena keeps the file's rows) */
        {"q4kx16_gemv", t->q4kx16_gemv ? t->q4kx16_gemv->name : NULL},
        {"q4kx16_gemm", t->q4kx16_gemm ? t->q4kx16_gemm->name : NULL},
        {"q6kx16_gemv", t->q6kx16_gemv ? t->q6kx16_gemv->name : NULL},
        {"q6kx16_gemm", t->q6kx16_gemm ? t->q6kx16_gemm->name : NULL},
        {"q40x16_gemv", t->q40x16_gemv ? t->q40x16_gemv->name : NULL},
        {"q40x16_gemm", t->q40x16_gemm ? t->q40x16_gemm->name : NULL},
        {"q4kx8_gemv", t->q4kx8_gemv ? t->q4kx8_gemv->name : NULL},
        {"q4kx8_gemm", t->q4kx8_gemm ? t->q4kx8_gemm->name : NULL},
        {"q6kx8_gemv", t->q6kx8_gemv ? t->q6kx8_gemv->name : NULL},
        {"q6kx8_gemm", t->q6kx8_gemm ? t->q6kx8_gemm->name : NULL},
        {"q80x16_gemv", t->q80x16_gemv ? t->q80x16_gemv->name : NULL},
        {"q80x16_gemm", t->q80x16_gemm ? t->q80x16_gemm->name : NULL}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        PyObject *v = names[i][1] ? PyUnicode_FromString(names[i][1]) : Py_NewRef(Py_None);
        const int bad = !v || PyDict_SetItemString(d, names[i][0], v) < 0;
        Py_XDECREF(v);
        if (bad) return -1;
    }
    return 0;
}

PyObject *ifpy_table_dict(const if_kernel_table *t) {
    PyObject *d = table_dict(t);
    if (d && kq_names(d, t) < 0) Py_CLEAR(d);
    return d;
}

static PyObject *table_dict(const if_kernel_table *t) {
    const char *q8_decode = if_table_decodes_packed(t) ? t->q8_gemm->name : t->q8_gemv->name;
    const if_q4_gemm_kernel *g4 = t->q4_gemm;
    const int q4_packs = g4 && g4->pack && g4->pack_size && g4->unpack;
    const char *q4_decode = q4_packs && g4->decode_packed ? g4->name
                            : t->q4_gemv                  ? t->q4_gemv->name
                                                          : "q4_gemv_1x1_scalar";
    return Py_BuildValue(
        "{s:s,s:s,s:O,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:(nn),s:O}",
                         "q8_decode", q8_decode, "q4_decode", q4_decode, "q4_gemm_packs",
                         q4_packs ? Py_True : Py_False,
                         "q4_gemv", t->q4_gemv ? t->q4_gemv->name : "q4_gemv_1x1_scalar",
                         "q4_gemm", t->q4_gemm ? t->q4_gemm->name : "q4_gemm_1x1_scalar",
                         "hadamard", t->hadamard ? t->hadamard->name : "f32_hadamard_1x1_scalar",
                         "tier", t->tier,
                         "q8_gemv", t->q8_gemv->name, "q8_gemm", t->q8_gemm->name, "quantize",
                         t->quantize->name, "f32_gemv", t->f32_gemv->name, "attention",
                         t->attn->name, "attention_int8_kv", t->attn_i8->name, "swiglu",
                         t->swiglu->name, "geglu", t->geglu->name, "q8_gemm_step", (Py_ssize_t)t->q8_gemm->mr,
                         (Py_ssize_t)t->q8_gemm->nr, "q8_gemm_packs",
                         t->q8_gemm->pack ? Py_True : Py_False);
}

static PyObject *py_info(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *tier = NULL, *disabled = NULL;
    if (!PyArg_ParseTuple(args, "|zz", &tier, &disabled)) return NULL;
    if_kernel_set ks;
    uint32_t mask;
    if (!ifpy_choose(tier, disabled, &ks, &mask)) return NULL;
    PyObject *tiers = PyList_New(0);
    if (!tiers) return NULL;
    for (size_t i = 0; i < if_tier_count(); i++) {
        char why[256];
        int ok = if_tier_supported(i, mask, why, sizeof why);
        PyObject *t = Py_BuildValue("{s:s,s:O,s:s}", "name", if_tier_name(i), "supported",
                                    ok ? Py_True : Py_False, "reason", why);
        if (!t || PyList_Append(tiers, t) != 0) {
            Py_XDECREF(t);
            Py_DECREF(tiers);
            return NULL;
        }
        Py_DECREF(t);
    }
    char names[256];
    PyObject *d = Py_BuildValue("{s:s,s:s,s:s,s:s,s:s,s:N,s:N,s:N}", "version",
                                ISAFORGE_VERSION, "cpu", if_cpu_name(), "features",
                                if_cpu_features(), "disabled",
                                if_features_string(mask, names, sizeof names), "notes",
                                if_cpu_notes(), "tiers", tiers, "decode",
                                ifpy_table_dict(ks.gemv), "prefill", ifpy_table_dict(ks.gemm));
    return d;
}

static PyObject *py_kv_cache_bytes(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *cfg;
    Py_ssize_t ubatch;
    int kv_type;
    if (!PyArg_ParseTuple(args, "Oni", &cfg, &ubatch, &kv_type)) return NULL;
    if_config c;
    if (!ifpy_parse_config(cfg, &c)) return NULL;
    size_t n = ubatch < 0 ? 0 : if_kv_cache_bytes(&c, (size_t)ubatch, (if_kv_type)kv_type);
    if (!n) {
        PyErr_SetString(PyExc_ValueError, "invalid config, ubatch or KV cache type, or the "
                                          "KV cache size overflows");
        return NULL;
    }
    return PyLong_FromSize_t(n);
}

/* packed_bytes(cfg, group_size, tier=None, disabled=None): bytes a Q8 model would pack at
 * load for the GEMM layout of the kernels (tier, disabled) chooses. */
static PyObject *py_packed_bytes(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *cfg;
    Py_ssize_t gs;
    const char *tier = NULL, *disabled = NULL;
    if (!PyArg_ParseTuple(args, "On|zz", &cfg, &gs, &tier, &disabled)) return NULL;
    if_config c;
    if_kernel_set ks;
    uint32_t mask;
    if (!ifpy_parse_config(cfg, &c) || !ifpy_choose(tier, disabled, &ks, &mask)) return NULL;
    if (gs < 0) return PyErr_Format(PyExc_ValueError, "negative group size");
    return PyLong_FromSize_t(if_packed_weight_bytes(&c, (size_t)gs, ks.gemm));
}

/* trim_heap(): hand the C heap's free memory back to the system (glibc malloc_trim; a no-op
 * elsewhere), after an engine let the row-major weights go: those small arrays came from the
 * heap, and their freed pages otherwise stay resident. */
static PyObject *py_trim_heap(PyObject *mod, PyObject *args) {
    (void)mod;
    (void)args;
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
    Py_RETURN_NONE;
}

/* ggml_to_q8(type, src, rows, cols, gs, q, s, threads=1, keep_q8_0=False, r0=0, r1=rows)
 * -> kept: rows [r0, r1) of the GGML tensor src (exactly its bytes) as Q8 into the writable
 * int8 (rows, cols) q and float32 (rows, cols / gs) s, on `threads` threads, without the GIL.
 * kept: a Q8_0 tensor kept as stored (keep_q8_0 at group 32 and no -128 quant). */
static PyObject *py_ggml_to_q8(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"type", "src", "rows", "cols", "gs", "q", "s", "threads",
                             "keep_q8_0", "r0", "r1", NULL};
    int type, keep = 0;
    PyObject *src, *qo, *so;
    Py_ssize_t rows, cols, gs, threads = 1, r0 = 0, r1 = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iOnnnOO|npnn", kwlist, &type, &src, &rows,
                                     &cols, &gs, &qo, &so, &threads, &keep, &r0, &r1))
        return NULL;
    if (r1 < 0) r1 = rows;
    if (rows <= 0 || cols <= 0 || gs <= 0 || threads <= 0 || r0 < 0 || r0 > r1 || r1 > rows)
        return PyErr_Format(PyExc_ValueError, "ggml_to_q8: bad shape (%zd, %zd), group size "
                            "%zd, threads %zd or row range [%zd, %zd)", rows, cols, gs, threads,
                            r0, r1);
    if ((size_t)rows > SIZE_MAX / (size_t)cols)
        return PyErr_Format(PyExc_ValueError, "ggml_to_q8: %zd x %zd overflows", rows, cols);
    bufset bs = {0};
    Py_buffer sv;
    if (PyObject_GetBuffer(src, &sv, PyBUF_C_CONTIGUOUS) != 0) return NULL;
    const size_t n = (size_t)rows * (size_t)cols;
    int8_t *q = (int8_t *)ifpy_borrow(&bs, qo, n, 1, "q");
    float *s = q ? (float *)ifpy_borrow(&bs, so, n / (size_t)gs * sizeof(float), 1, "s") : NULL;
    if (!s) {
        PyBuffer_Release(&sv);
        ifpy_release_all(&bs);
        return NULL;
    }
    char err[ERRLEN] = "";
    int kept = 0;
    if_status st = IF_ENOMEM;
    Py_BEGIN_ALLOW_THREADS
    if_pool *pool = threads > 1 ? if_pool_create((size_t)threads) : NULL;
    if (threads == 1 || pool)
        st = if_ggml_to_q8(type, sv.buf, (size_t)sv.len, (size_t)rows, (size_t)cols, (size_t)r0,
                           (size_t)r1, (size_t)gs, keep ? IF_GGML_KEEP_Q8_0 : 0, q, s, pool,
                           &kept, err, sizeof err);
    else
        snprintf(err, sizeof err, "cannot start %zd threads", threads);
    if_pool_free(pool);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&sv);
    ifpy_release_all(&bs);
    if (st != IF_OK) return ifpy_raise_status(st, err);
    return PyBool_FromLong(kept);
}

/* cq4_quantize(type, src, rows, cols, gs, signs, codebook, step, nibbles, scales, threads=1)
 * -> None: the (rows, cols) matrix src (a GGML type's bytes, or float32 rows for type -1) as
 * CQ4 into the writable uint8 (rows, cols / 2) nibbles and float32 (rows, cols / gs) scales,
 * on `threads` threads, without the GIL. signs: float32 (cols,) or None (no rotation). */
static PyObject *py_cq4_quantize(PyObject *mod, PyObject *args, PyObject *kw) {
    (void)mod;
    static char *kwlist[] = {"type", "src", "rows", "cols", "gs", "signs", "codebook", "step",
                             "nibbles", "scales", "threads", NULL};
    int type;
    double step;
    PyObject *src, *sg, *cbo, *no, *so;
    Py_ssize_t rows, cols, gs, threads = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iOnnnOOdOO|n", kwlist, &type, &src, &rows,
                                     &cols, &gs, &sg, &cbo, &step, &no, &so, &threads))
        return NULL;
    if (rows <= 0 || cols <= 0 || gs <= 0 || threads <= 0 || cols % gs ||
        (size_t)rows > SIZE_MAX / (size_t)cols / sizeof(float))
        return PyErr_Format(PyExc_ValueError, "cq4_quantize: bad shape (%zd, %zd), group size "
                            "%zd or threads %zd", rows, cols, gs, threads);
    bufset bs = {0};
    Py_buffer sv;
    if (PyObject_GetBuffer(src, &sv, PyBUF_C_CONTIGUOUS) != 0) return NULL;
    const size_t n = (size_t)rows * (size_t)cols;
    const float *signs = sg == Py_None ? NULL
                         : (const float *)ifpy_borrow(&bs, sg, (size_t)cols * sizeof(float), 0,
                                                      "signs");
    const int8_t *cb = sg == Py_None || signs
                           ? (const int8_t *)ifpy_borrow(&bs, cbo, 16, 0, "codebook") : NULL;
    uint8_t *nib = cb ? (uint8_t *)ifpy_borrow(&bs, no, n / 2, 1, "nibbles") : NULL;
    float *sc = nib ? (float *)ifpy_borrow(&bs, so, n / (size_t)gs * sizeof(float), 1, "scales")
                    : NULL;
    if (!sc) {
        PyBuffer_Release(&sv);
        ifpy_release_all(&bs);
        return NULL;
    }
    char err[ERRLEN] = "";
    if_status st = IF_ENOMEM;
    Py_BEGIN_ALLOW_THREADS
    if_pool *pool = threads > 1 ? if_pool_create((size_t)threads) : NULL;
    if (threads == 1 || pool)
        st = if_cq4_quantize(type, sv.buf, (size_t)sv.len, (size_t)rows, (size_t)cols,
                             (size_t)gs, signs, cb, step, nib, sc, pool, err, sizeof err);
    else
        snprintf(err, sizeof err, "cannot start %zd threads", threads);
    if_pool_free(pool);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&sv);
    ifpy_release_all(&bs);
    if (st != IF_OK) return ifpy_raise_status(st, err);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"trim_heap", py_trim_heap, METH_NOARGS,
     "trim_heap(): return the C heap's free pages to the system (glibc; else a no-op)."},
    {"kv_cache_bytes", py_kv_cache_bytes, METH_VARARGS,
     "kv_cache_bytes(cfg, ubatch, kv_type) -> bytes the model's KV cache would take."},
    {"packed_bytes", py_packed_bytes, METH_VARARGS,
     "packed_bytes(cfg, group_size, tier=None, disabled=None) -> bytes of the weights a Q8 "
     "model packs at load for the chosen GEMM kernel's layout (0: it reads them row-major)."},
    {"sample", py_sample, METH_VARARGS,
     "sample(logits_f32, temperature, topp, state) -> (token, state); logits modified."},
    {"random_u32", py_random_u32, METH_VARARGS, "random_u32(state) -> (u32, state)"},
    {"random_f32", py_random_f32, METH_VARARGS, "random_f32(state) -> (f32, state)"},
    {"softmax", py_softmax, METH_VARARGS, "softmax(x_f32): in place, as run.c"},
    {"info", py_info, METH_VARARGS,
     "info(tier=None, disabled=None) -> dict: CPU, features, tiers (supported with the "
     "`disabled` feature names hidden) and the kernels that (tier, disabled) chooses; "
     "ValueError/RuntimeError for an unknown/unsupported tier or an unknown feature"},
    {"ggml_to_q8", (PyCFunction)(void (*)(void))py_ggml_to_q8, METH_VARARGS | METH_KEYWORDS,
     "ggml_to_q8(type, src, rows, cols, gs, q, s, threads=1, keep_q8_0=False, r0=0, r1=rows) "
     "-> kept: rows of a GGML tensor's raw bytes as Q8 into q and s (isaforge.quant.q8's "
     "arithmetic); kept: a Q8_0 tensor taken as stored"},
    {"cq4_quantize", (PyCFunction)(void (*)(void))py_cq4_quantize, METH_VARARGS | METH_KEYWORDS,
     "cq4_quantize(type, src, rows, cols, gs, signs, codebook, step, nibbles, scales, "
     "threads=1): a matrix (GGML bytes, or float32 for type -1) as CQ4, the norm rule of "
     "isaforge.quant.cq4 bit for bit"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_native", "isaforge C core binding", -1, module_methods,
    NULL,                  NULL,      NULL,                      NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&ifpy_ModelType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    Py_INCREF(&ifpy_ModelType);
    if (PyModule_AddObject(m, "Model", (PyObject *)&ifpy_ModelType) < 0) {
        Py_DECREF(&ifpy_ModelType);
        Py_DECREF(m);
        return NULL;
    }
    /* the core's constants, so Python mirrors none of them: the per-layer matrices in the
     * order the core takes them (IF_LAYER_MATRICES), the matrix dtypes, the KV cache types */
#define IF_MAT_NAME_(name, rows, cols) #name,
    static const char *mats[] = {IF_LAYER_MATRICES(IF_MAT_NAME_)};
#undef IF_MAT_NAME_
    PyObject *names = PyTuple_New(IF_N_LAYER_MATRICES);
    for (size_t i = 0; names && i < IF_N_LAYER_MATRICES; i++)
        PyTuple_SET_ITEM(names, (Py_ssize_t)i, PyUnicode_FromString(mats[i]));
#define IF_VEC_NAME_(name, len) #name,
    static const char *vecs[] = {IF_LAYER_VECTORS(IF_VEC_NAME_)};
#undef IF_VEC_NAME_
    PyObject *vnames = PyTuple_New(IF_N_LAYER_VECTORS);
    for (size_t i = 0; vnames && i < IF_N_LAYER_VECTORS; i++)
        PyTuple_SET_ITEM(vnames, (Py_ssize_t)i, PyUnicode_FromString(vecs[i]));
    PyObject *kv = Py_BuildValue("{s:i,s:i,s:i}", "f32", IF_KV_F32, "f16", IF_KV_F16, "int8",
                                 IF_KV_I8);
    PyObject *cfgf = PyTuple_New((Py_ssize_t)N_CFG_FIELDS);
    for (size_t i = 0; cfgf && i < N_CFG_FIELDS; i++)
        PyTuple_SET_ITEM(cfgf, (Py_ssize_t)i, PyUnicode_FromString(cfg_fields[i].name));
    const int bad = !names || !vnames || !kv || !cfgf ||
                    PyModule_AddObjectRef(m, "LAYER_VECTORS", vnames) < 0 ||
                    PyModule_AddObjectRef(m, "LAYER_MATRICES", names) < 0 ||
                    PyModule_AddObjectRef(m, "CONFIG_FIELDS", cfgf) < 0 ||
                    PyModule_AddObjectRef(m, "KV_CACHE_TYPES", kv) < 0 ||
                    PyModule_AddIntConstant(m, "DEFAULT_UBATCH", IF_DEFAULT_UBATCH) < 0 ||
                    PyModule_AddIntConstant(m, "F32", IF_F32) < 0 ||
                    PyModule_AddIntConstant(m, "Q8", IF_Q8) < 0 ||
                    PyModule_AddIntConstant(m, "Q4", IF_Q4) < 0 ||
                    PyModule_AddIntConstant(m, "GGML", IF_GGML) < 0 ||
                    PyModule_AddIntConstant(m, "KQ", IF_KQ) < 0;
    Py_XDECREF(names);
    Py_XDECREF(vnames);
    Py_XDECREF(kv);
    Py_XDECREF(cfgf);
    if (bad) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
