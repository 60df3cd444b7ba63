/* _native_model_type.c - the Model type of the CPython binding: a model's run state
 * (if_model) over weight buffers borrowed from Python, its forward, prefill and batched
 * steps. */
#include "_native.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- Model ---- */

typedef struct {
    PyObject_HEAD if_model *m;
    if_config cfg;
    if_layer_weights *layers;
    bufset bufs;
} ModelObject;

static void Model_dealloc(ModelObject *self) {
    if_model_free(self->m);
    PyMem_Free(self->layers);
    ifpy_release_all(&self->bufs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A GGUF matrix given as the file's bytes: (dtype, rows, cols, ggml_type, raw), dtype IF_KQ or
 * IF_GGML; raw must hold exactly if_ggml_bytes(ggml_type, rows, cols) bytes. */
static int parse_raw_matrix(ModelObject *self, PyObject *spec, if_matrix *w, const char *what) {
    int dtype, type;
    Py_ssize_t rows, cols;
    PyObject *raw;
    if (!PyArg_ParseTuple(spec, "innnO", &dtype, &rows, &cols, &type, &raw)) return 0;
    const char *name = if_ggml_type_name(type);
    const size_t bytes = rows > 0 && cols > 0 ? if_ggml_bytes(type, (size_t)rows, (size_t)cols) : 0;
    if (!name || !bytes ||
        (dtype == IF_KQ && type != IF_GGML_Q4_K && type != IF_GGML_Q5_K &&
         type != IF_GGML_Q6_K && type != IF_GGML_Q4_0 && type != IF_GGML_Q4_1 &&
         type != IF_GGML_Q5_0 && type != IF_GGML_Q5_1 && type != IF_GGML_IQ4_NL &&
         type != IF_GGML_IQ4_XS && type != IF_GGML_Q8_0)) {
        PyErr_Format(PyExc_ValueError, "%s: GGML type %d (%s) cannot be a (%zd, %zd) %s matrix",
                     what, type, name ? name : "unknown", rows, cols,
                     dtype == IF_KQ ? "in-place" : "converted");
        return 0;
    }
    memset(w, 0, sizeof *w);
    w->dtype = (if_dtype)dtype;
    w->rows = (size_t)rows;
    w->cols = (size_t)cols;
    w->ggml_type = type;
    w->raw_bytes = bytes;
    w->raw = ifpy_borrow(&self->bufs, raw, bytes, 0, what);
    return w->raw != NULL;
}

/* A matrix spec is (dtype, rows, cols, group_size, data, scales_or_None); a Q4 one adds
 * (codebook, signs_or_None, kpad): nibbles (rows, kpad / 2) u8, scales (rows, kpad / gs) f32,
 * codebook (16) i8, signs (kpad) f32. IF_KQ and IF_GGML: see parse_raw_matrix. */
static int parse_matrix(ModelObject *self, PyObject *spec, if_matrix *w, const char *what) {
    int dtype;
    Py_ssize_t rows, cols, gs, kpad = 0;
    PyObject *data, *scales, *codebook = NULL, *signs = NULL;
    if (PyTuple_Check(spec) && PyTuple_GET_SIZE(spec) == 5) {
        PyObject *d = PyTuple_GET_ITEM(spec, 0);
        const long dt = PyLong_Check(d) ? PyLong_AsLong(d) : -1;
        if (dt == IF_KQ || dt == IF_GGML) return parse_raw_matrix(self, spec, w, what);
    }
    if (!PyArg_ParseTuple(spec, "innnOO|OOn", &dtype, &rows, &cols, &gs, &data, &scales,
                          &codebook, &signs, &kpad))
        return 0;
    if (dtype == IF_Q4) {
        if (!codebook || gs <= 0 || kpad <= 0 || kpad % 32 || kpad % gs || kpad < cols ||
            rows > PY_SSIZE_T_MAX / kpad) {
            PyErr_Format(PyExc_ValueError,
                         "%s: bad 4-bit matrix spec (group size %zd, padded length %zd, %zd "
                         "columns)", what, gs, kpad, cols);
            return 0;
        }
        memset(w, 0, sizeof *w);
        w->dtype = IF_Q4;
        w->rows = (size_t)rows;
        w->cols = (size_t)cols;
        w->group_size = (size_t)gs;
        w->kpad = (size_t)kpad;
        const size_t n = w->rows * w->kpad;
        w->q4 = ifpy_borrow(&self->bufs, data, n / 2, 0, what);
        if (!w->q4) return 0;
        w->s = ifpy_borrow(&self->bufs, scales, n / w->group_size * sizeof(float), 0, what);
        if (!w->s) return 0;
        w->codebook = ifpy_borrow(&self->bufs, codebook, 16, 0, what);
        if (!w->codebook) return 0;
        if (signs && signs != Py_None) {
            w->signs = ifpy_borrow(&self->bufs, signs, w->kpad * sizeof(float), 0, what);
            if (!w->signs) return 0;
        }
        return 1;
    }
    if (rows <= 0 || cols <= 0 || gs < 0 || (dtype != IF_F32 && dtype != IF_Q8)) {
        PyErr_Format(PyExc_ValueError, "%s: bad matrix spec", what);
        return 0;
    }
    memset(w, 0, sizeof *w);
    w->dtype = (if_dtype)dtype;
    w->rows = (size_t)rows;
    w->cols = (size_t)cols;
    w->group_size = (size_t)gs;
    size_t n = w->rows * w->cols;
    if (dtype == IF_F32) {
        w->f32 = ifpy_borrow(&self->bufs, data, n * sizeof(float), 0, what);
        return w->f32 != NULL;
    }
    if (gs == 0 || w->cols % w->group_size) {
        PyErr_Format(PyExc_ValueError, "%s: group size %zd does not divide %zd", what, gs, cols);
        return 0;
    }
    w->q = ifpy_borrow(&self->bufs, data, n, 0, what);
    if (!w->q) return 0;
    w->s = ifpy_borrow(&self->bufs, scales, n / w->group_size * sizeof(float), 0, what);
    return w->s != NULL;
}

/* The row-major int8 (a 4-bit matrix: nibbles) of one matrix, numbered as for
 * if_model_unpack. */
static const void *matrix_q(const ModelObject *self, const if_weights *w, size_t idx) {
    const size_t L = self->cfg.n_layers;
    const if_matrix *m = idx == L * IF_N_LAYER_MATRICES
                             ? &w->wcls
                             : if_layer_matrix(&self->layers[idx / IF_N_LAYER_MATRICES],
                                               idx % IF_N_LAYER_MATRICES);
    return m->dtype == IF_Q4 ? (const void *)m->q4 : (const void *)m->q;
}

/* if_model_opts.on_packed: matrix idx is packed and its row-major int8 will not be read again.
 * Release our view of it and tell Python (`released(idx)`), so it can drop the array before
 * the next matrix is packed: the peak holds one matrix twice, not all of them. */
typedef struct packed_ctx {
    ModelObject *self;
    const if_weights *w;
    PyObject *released; /* callable or NULL */
    int failed;
} packed_ctx;

static void on_packed(void *ctx, size_t idx) {
    packed_ctx *p = ctx;
    PyGILState_STATE g = PyGILState_Ensure();
    const void *q = matrix_q(p->self, p->w, idx);
    for (size_t i = 0; i < p->self->bufs.n; i++)
        if (p->self->bufs.v[i].obj && p->self->bufs.v[i].buf == q) {
            PyBuffer_Release(&p->self->bufs.v[i]); /* obj NULL after: release_all skips */
            break;
        }
    if (p->released && !p->failed) {
        PyObject *r = PyObject_CallFunction(p->released, "n", (Py_ssize_t)idx);
        if (r)
            Py_DECREF(r);
        else
            p->failed = 1; /* the exception stays set on this thread; raised after create */
    }
    PyGILState_Release(g);
}

/* vectors: None or a dict {name in LAYER_VECTORS: list of n_layers float32 buffers or None}
 * (IF_LAYER_VECTORS: absent names and None entries are layers without that vector). */
static int parse_vectors(ModelObject *self, PyObject *vectors, const if_config *c) {
    if (!vectors || vectors == Py_None) return 1;
    if (!PyDict_Check(vectors)) {
        PyErr_SetString(PyExc_TypeError, "vectors must be a dict of LAYER_VECTORS names");
        return 0;
    }
    const size_t D = c->dim, HS = if_config_head_size(c), Q = HS * c->n_heads,
                 KV = HS * c->n_kv_heads, L = c->n_layers;
#define IF_VEC_NAME_(name, len) #name,
    static const char *names[] = {IF_LAYER_VECTORS(IF_VEC_NAME_)};
#undef IF_VEC_NAME_
#define IF_VEC_LEN_(name, len) len,
    const size_t lens[] = {IF_LAYER_VECTORS(IF_VEC_LEN_)};
#undef IF_VEC_LEN_
    PyObject *key, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(vectors, &pos, &key, &val)) {
        const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        size_t i = 0;
        while (k && i < IF_N_LAYER_VECTORS && strcmp(k, names[i]) != 0) i++;
        if (!k || i == IF_N_LAYER_VECTORS) {
            PyErr_Format(PyExc_ValueError, "vectors: unknown name %R", key);
            return 0;
        }
        if (!PyList_Check(val) || (size_t)PyList_GET_SIZE(val) != L) {
            PyErr_Format(PyExc_ValueError, "vectors[%s]: expected a list of n_layers=%zu", k, L);
            return 0;
        }
        for (size_t l = 0; l < L; l++) {
            PyObject *item = PyList_GET_ITEM(val, l);
            if (item == Py_None) continue;
            const float *v = ifpy_borrow(&self->bufs, item, lens[i] * sizeof(float), 0, names[i]);
            if (!v) return 0;
            *if_layer_vector(&self->layers[l], i) = v;
        }
    }
    return 1;
}

static int Model_init(ModelObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"config", "tok_embeddings", "rms_final", "rms_att", "rms_ffn",
                             "matrices", "n_threads", "ubatch", "kv_type", "tier", "disabled",
                             "released", "vectors", "rope_freqs", "n_seqs",
                             "gemv_rows_per_thread", "par_min_work", "sme2_workers",
                             "q4_arena", "kq_arena", NULL};
    PyObject *cfg, *tok, *rms_final, *rms_att, *rms_ffn, *mats, *released = NULL;
    PyObject *vectors = NULL, *rope_freqs = NULL;
    Py_ssize_t n_threads = 1, ubatch = 0, n_seqs = 1, gemv_rows = 0, min_work = 0, sme2 = 0;
    int kv_type = IF_KV_F32, q4_arena = 0, kq_arena = 0;
    const char *tier = NULL, *disabled = NULL;
    if (self->m) {
        PyErr_SetString(PyExc_RuntimeError, "Model already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOO|nnizzOOOnnnnpi", kwlist, &cfg, &tok,
                                     &rms_final, &rms_att, &rms_ffn, &mats, &n_threads, &ubatch,
                                     &kv_type, &tier, &disabled, &released, &vectors,
                                     &rope_freqs, &n_seqs, &gemv_rows, &min_work, &sme2,
                                     &q4_arena, &kq_arena))
        return -1;
    if (kq_arena < 0 || kq_arena > 2) {
        PyErr_Format(PyExc_ValueError, "kq_arena must be 0, 1 or 2, got %d", kq_arena);
        return -1;
    }
    if (sme2 < 0) {
        PyErr_Format(PyExc_ValueError, "sme2_workers must be >= 0, got %zd", sme2);
        return -1;
    }
    if (gemv_rows < 0 || min_work < 0) {
        PyErr_Format(PyExc_ValueError, "%s must be >= 0, got %zd",
                     gemv_rows < 0 ? "gemv_rows_per_thread" : "par_min_work",
                     gemv_rows < 0 ? gemv_rows : min_work);
        return -1;
    }
    if (n_seqs < 1) {
        PyErr_Format(PyExc_ValueError, "n_seqs must be >= 1, got %zd", n_seqs);
        return -1;
    }
    if (released == Py_None) released = NULL;
    if (released && !PyCallable_Check(released)) {
        PyErr_SetString(PyExc_TypeError, "released must be callable or None");
        return -1;
    }
    if_config c;
    if (!ifpy_parse_config(cfg, &c)) return -1;
    self->cfg = c;
    size_t L = c.n_layers;
    if (!PyList_Check(rms_att) || !PyList_Check(rms_ffn) || !PyList_Check(mats) ||
        (size_t)PyList_GET_SIZE(rms_att) != L || (size_t)PyList_GET_SIZE(rms_ffn) != L ||
        (size_t)PyList_GET_SIZE(mats) != IF_N_LAYER_MATRICES * L + 1) {
        PyErr_SetString(PyExc_ValueError, "expected n_layers norms and n_layers * "
                                          "len(LAYER_MATRICES) + 1 matrices");
        return -1;
    }
    self->layers = PyMem_Calloc(L, sizeof(if_layer_weights));
    if (!self->layers) {
        PyErr_NoMemory();
        return -1;
    }
    if_weights w;
    memset(&w, 0, sizeof w);
    /* the token table: a matrix spec (F32, Q8 or Q4), None (tied: the classifier's matrix, one
     * copy) or a float32 buffer */
    if (PyTuple_Check(tok)) {
        if (!parse_matrix(self, tok, &w.tok, "tok_embeddings")) return -1;
    } else if (tok != Py_None) {
        w.tok_embeddings = ifpy_borrow(&self->bufs, tok, c.vocab_size * c.dim * sizeof(float),
                                       0, "tok_embeddings");
        if (!w.tok_embeddings) return -1;
    }
    w.rms_final = ifpy_borrow(&self->bufs, rms_final, c.dim * sizeof(float), 0, "rms_final");
    if (!w.rms_final) return -1;
    for (size_t l = 0; l < L; l++) {
        if_layer_weights *lw = &self->layers[l];
        lw->rms_att = ifpy_borrow(&self->bufs, PyList_GET_ITEM(rms_att, l),
                                  c.dim * sizeof(float), 0, "rms_att");
        if (!lw->rms_att) return -1;
        lw->rms_ffn = ifpy_borrow(&self->bufs, PyList_GET_ITEM(rms_ffn, l),
                                  c.dim * sizeof(float), 0, "rms_ffn");
        if (!lw->rms_ffn) return -1;
        for (size_t i = 0; i < IF_N_LAYER_MATRICES; i++) {
#define MAT_NAME_(name, rows, cols) #name,
            static const char *const names[] = {IF_LAYER_MATRICES(MAT_NAME_)};
#undef MAT_NAME_
            char what[48]; /* errors name the matrix */
            snprintf(what, sizeof what, "layer %zu %s", l, names[i]);
            if_matrix *dst = (if_matrix *)if_layer_matrix(lw, i); /* lw is ours to fill */
            if (!parse_matrix(self, PyList_GET_ITEM(mats, IF_N_LAYER_MATRICES * l + i), dst,
                              what))
                return -1;
        }
    }
    if (!parse_matrix(self, PyList_GET_ITEM(mats, IF_N_LAYER_MATRICES * L), &w.wcls,
                      "classifier"))
        return -1;
    if (tok == Py_None) w.tok = w.wcls;
    if (!parse_vectors(self, vectors, &c)) return -1;
    w.layers = self->layers;
    if (rope_freqs && rope_freqs != Py_None) {
        w.rope_freqs = ifpy_borrow(&self->bufs, rope_freqs,
                                   if_config_head_size(&c) / 2 * sizeof(float), 0, "rope_freqs");
        if (!w.rope_freqs) return -1;
    }
    char err[ERRLEN] = "";
    if_model_opts opts = {.n_threads = n_threads > 0 ? (size_t)n_threads : 1,
                          .ubatch = ubatch > 0 ? (size_t)ubatch : 0,
                          .kv_type = (if_kv_type)kv_type};
    uint32_t mask;
    if (!ifpy_choose(tier, disabled, &opts.kernels, &mask)) return -1;
    packed_ctx pctx = {self, &w, released, 0};
    opts.on_packed = on_packed;
    opts.n_seqs = (size_t)n_seqs;
    opts.gemv_rows_per_thread = (size_t)gemv_rows;
    opts.par_min_work = (size_t)min_work;
    opts.sme2_workers = (size_t)sme2;
    opts.q4_arena = q4_arena;
    opts.kq_arena = kq_arena;
    opts.on_packed_ctx = &pctx;
    if_status st;
    Py_BEGIN_ALLOW_THREADS st = if_model_create_opts(&c, &w, &opts, &self->m, err, sizeof err);
    Py_END_ALLOW_THREADS if (pctx.failed) return -1; /* released(idx) raised */
    if (st != IF_OK) {
        ifpy_raise_status(st, err);
        return -1;
    }
    if (!if_model_reads_rowmajor(self->m)) {
        /* one resident copy: the core reads only its packed copy, so let the row-major int8
         * arrays go (views on other weights, the scales included, stay borrowed) */
        for (size_t i = 0; i < self->bufs.n; i++) {
            const void *buf = self->bufs.v[i].buf;
            int q = buf == w.wcls.q;
            for (size_t l = 0; l < L && !q; l++)
                for (size_t k = 0; k < IF_N_LAYER_MATRICES && !q; k++)
                    q = buf == if_layer_matrix(&self->layers[l], k)->q;
            if (q) PyBuffer_Release(&self->bufs.v[i]); /* obj NULL after: release_all skips */
        }
    }
    return 0;
}

static PyObject *Model_forward(ModelObject *self, PyObject *args) {
    int token;
    Py_ssize_t pos;
    PyObject *out;
    if (!PyArg_ParseTuple(args, "inO", &token, &pos, &out)) return NULL;
    if (!self->m) return PyErr_Format(PyExc_RuntimeError, "Model not initialised");
    if (pos < 0) return PyErr_Format(PyExc_ValueError, "negative position");
    Py_buffer ov;
    if (PyObject_GetBuffer(out, &ov, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) return NULL;
    if ((size_t)ov.len < self->cfg.vocab_size * sizeof(float)) {
        PyBuffer_Release(&ov);
        return PyErr_Format(PyExc_ValueError, "logits buffer too small");
    }
    char err[ERRLEN] = "";
    if_status st;
    Py_BEGIN_ALLOW_THREADS st = if_model_forward(self->m, token, (size_t)pos, ov.buf, err,
                                                 sizeof err);
    Py_END_ALLOW_THREADS PyBuffer_Release(&ov);
    if (st != IF_OK) return ifpy_raise_status(st, err);
    Py_RETURN_NONE;
}

/* unpack(idx[, nbytes]) -> bytes: matrix idx (layer-major, the classifier last) as row-major
 * int8 (a 4-bit matrix: its row-major nibbles) from the packed copy (for callers that let
 * theirs go). */
static PyObject *Model_unpack(ModelObject *self, PyObject *args) {
    Py_ssize_t idx, nbytes = 0; /* nbytes: the matrix's bytes when the caller knows them (a
                                 * 4-bit classifier: rows * kpad / 2), 0: from its shape */
    if (!PyArg_ParseTuple(args, "n|n", &idx, &nbytes)) return NULL;
    if (!self->m) return PyErr_Format(PyExc_RuntimeError, "Model not initialised");
    size_t L = self->cfg.n_layers;
    if (idx < 0 || (size_t)idx > L * IF_N_LAYER_MATRICES)
        return PyErr_Format(PyExc_IndexError, "matrix index %zd out of range", idx);
    const if_matrix *w = (size_t)idx == L * IF_N_LAYER_MATRICES
                             ? NULL
                             : if_layer_matrix(&self->layers[idx / IF_N_LAYER_MATRICES],
                                               idx % IF_N_LAYER_MATRICES);
    size_t rows = w ? w->rows : self->cfg.vocab_size, cols = w ? w->cols : self->cfg.dim;
    if (w && w->dtype == IF_Q4) cols = w->kpad / 2; /* the nibble bytes */
    if (nbytes > 0 && (size_t)nbytes % rows == 0) cols = (size_t)nbytes / rows;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(rows * cols));
    if (!out) return NULL;
    if_status st = if_model_unpack(self->m, (size_t)idx, (int8_t *)PyBytes_AS_STRING(out),
                                   rows * cols);
    if (st != IF_OK) {
        Py_DECREF(out);
        return ifpy_raise_status(st, "no packed copy to unpack");
    }
    return out;
}

/* Prefill tokens into sequence slot seq at pos0.. (if_model_prefill_seq; slot 0 is the slot
 * of a one-sequence model): the last logits into out, every row's into all unless None. */
static PyObject *prefill_into(ModelObject *self, size_t seq, PyObject *tokens, Py_ssize_t pos0,
                              PyObject *out, PyObject *all) {
    if (!self->m) return PyErr_Format(PyExc_RuntimeError, "Model not initialised");
    if (pos0 < 0) return PyErr_Format(PyExc_ValueError, "negative position");
    Py_buffer tv, ov, av;
    if (PyObject_GetBuffer(tokens, &tv, PyBUF_C_CONTIGUOUS) != 0) return NULL;
    size_t n = (size_t)tv.len / sizeof(int32_t), vocab = self->cfg.vocab_size;
    if (PyObject_GetBuffer(out, &ov, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) {
        PyBuffer_Release(&tv);
        return NULL;
    }
    int has_all = all != Py_None;
    if (has_all && PyObject_GetBuffer(all, &av, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) {
        PyBuffer_Release(&tv);
        PyBuffer_Release(&ov);
        return NULL;
    }
    PyObject *ret = NULL;
    if ((size_t)ov.len < vocab * sizeof(float) ||
        (has_all && (size_t)av.len < n * vocab * sizeof(float))) {
        PyErr_SetString(PyExc_ValueError, "logits buffer too small");
    } else {
        char err[ERRLEN] = "";
        if_status st;
        Py_BEGIN_ALLOW_THREADS st = if_model_prefill_seq(self->m, seq, tv.buf, n, (size_t)pos0,
                                                         ov.buf, has_all ? av.buf : NULL, err,
                                                         sizeof err);
        Py_END_ALLOW_THREADS if (st != IF_OK) ifpy_raise_status(st, err);
        else ret = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&tv);
    PyBuffer_Release(&ov);
    if (has_all) PyBuffer_Release(&av);
    return ret;
}

static PyObject *Model_prefill(ModelObject *self, PyObject *args) {
    PyObject *tokens, *out, *all = Py_None;
    Py_ssize_t pos0;
    if (!PyArg_ParseTuple(args, "OnO|O", &tokens, &pos0, &out, &all)) return NULL;
    return prefill_into(self, 0, tokens, pos0, out, all);
}

/* prefill_seq(seq, tokens_i32, pos0, out[, all]): prefill into sequence slot `seq`. */
static PyObject *Model_prefill_seq(ModelObject *self, PyObject *args) {
    PyObject *tokens, *out, *all = Py_None;
    Py_ssize_t seq, pos0;
    if (!PyArg_ParseTuple(args, "nOnO|O", &seq, &tokens, &pos0, &out, &all)) return NULL;
    if (seq < 0) return PyErr_Format(PyExc_ValueError, "negative slot");
    return prefill_into(self, (size_t)seq, tokens, pos0, out, all);
}

/* hidden(seq, tokens_i32, pos0, out_f32, last): the final hidden states of tokens run at
 * pos0.. in slot seq (if_model_hidden_seq; the core checks out's size). */
static PyObject *Model_hidden(ModelObject *self, PyObject *args) {
    PyObject *tokens, *out;
    Py_ssize_t seq, pos0;
    int last;
    if (!PyArg_ParseTuple(args, "nOnOp", &seq, &tokens, &pos0, &out, &last)) return NULL;
    if (!self->m) return PyErr_Format(PyExc_RuntimeError, "Model not initialised");
    if (seq < 0 || pos0 < 0) return PyErr_Format(PyExc_ValueError, "negative slot or position");
    Py_buffer tv, ov;
    if (PyObject_GetBuffer(tokens, &tv, PyBUF_C_CONTIGUOUS) != 0) return NULL;
    if (PyObject_GetBuffer(out, &ov, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) {
        PyBuffer_Release(&tv);
        return NULL;
    }
    char err[ERRLEN] = "";
    if_status st = IF_EINVAL;
    if (tv.len % sizeof(int32_t) || ov.len % sizeof(float)) {
        snprintf(err, sizeof err, "hidden: need int32 tokens and a float32 output");
    } else {
        Py_BEGIN_ALLOW_THREADS st = if_model_hidden_seq(
            self->m, (size_t)seq, tv.buf, (size_t)tv.len / sizeof(int32_t), (size_t)pos0, last,
            ov.buf, (size_t)ov.len / sizeof(float), err, sizeof err);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&tv);
    PyBuffer_Release(&ov);
    if (st != IF_OK) return ifpy_raise_status(st, err);
    Py_RETURN_NONE;
}

/* decode_batch(tokens_i32 (n), seqs_uintp (n), pos_uintp (n), out_f32 (rows, vocab)[, want_u8
 * (n)]): without want one decode step of n distinct slots (rows = n); with want
 * if_model_batch, rows = the number of wanted rows. */
static PyObject *Model_decode_batch(ModelObject *self, PyObject *args) {
    PyObject *objs[5] = {NULL, NULL, NULL, NULL, Py_None};
    if (!PyArg_ParseTuple(args, "OOOO|O", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4]))
        return NULL;
    if (!self->m) return PyErr_Format(PyExc_RuntimeError, "Model not initialised");
    const size_t nb = objs[4] == Py_None ? 4 : 5;
    Py_buffer b[5];
    size_t got = 0;
    PyObject *ret = NULL;
    for (; got < nb; got++)
        if (PyObject_GetBuffer(objs[got], &b[got],
                               PyBUF_C_CONTIGUOUS | (got == 3 ? PyBUF_WRITABLE : 0)) != 0)
            goto done;
    size_t n = (size_t)b[0].len / sizeof(int32_t), vocab = self->cfg.vocab_size, rows = n;
    if (nb == 5) {
        rows = 0;
        for (size_t r = 0; r < (size_t)b[4].len; r++) rows += ((const uint8_t *)b[4].buf)[r] != 0;
    }
    if ((size_t)b[1].len != n * sizeof(size_t) || (size_t)b[2].len != n * sizeof(size_t) ||
        (size_t)b[3].len < rows * vocab * sizeof(float) || (nb == 5 && (size_t)b[4].len != n)) {
        PyErr_SetString(PyExc_ValueError, "decode_batch: tokens (n,) int32, seqs and pos (n,) "
                                          "uintp, out (rows, vocab) float32, want (n,) uint8");
        goto done;
    }
    char err[ERRLEN] = "";
    if_status st;
    const uint8_t *want = nb == 5 ? b[4].buf : NULL;
    Py_BEGIN_ALLOW_THREADS st = want ? if_model_batch(self->m, n, b[0].buf, b[1].buf, b[2].buf,
                                                      want, b[3].buf, err, sizeof err)
                                     : if_model_decode_batch(self->m, n, b[0].buf, b[1].buf,
                                                             b[2].buf, b[3].buf, err,
                                                             sizeof err);
    Py_END_ALLOW_THREADS if (st != IF_OK) ifpy_raise_status(st, err);
    else ret = Py_NewRef(Py_None);
done:
    for (size_t i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return ret;
}

/* Read-only size_t attributes: the C model's value, 0 before it exists. */
#define SIZE_GETTER(attr, fn)                                                 \
    static PyObject *Model_##attr(ModelObject *self, void *closure) {          \
        (void)closure;                                                        \
        return PyLong_FromSize_t(self->m ? fn(self->m) : 0);                  \
    }
SIZE_GETTER(n_seqs, if_model_n_seqs)
SIZE_GETTER(threads, if_model_threads)
SIZE_GETTER(kv_bytes, if_model_kv_bytes)
SIZE_GETTER(packed_bytes, if_model_packed_bytes)
SIZE_GETTER(arena_pending, if_model_arena_pending)

static PyObject *Model_arena_wait(ModelObject *self, PyObject *unused) {
    (void)unused;
    if (self->m) {
        Py_BEGIN_ALLOW_THREADS if_model_arena_wait(self->m);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static PyObject *Model_kernels(ModelObject *self, void *closure) {
    (void)closure;
    if (!self->m) Py_RETURN_NONE;
    return Py_BuildValue("{s:N,s:N}", "decode", ifpy_table_dict(if_model_gemv(self->m)),
                         "prefill", ifpy_table_dict(if_model_gemm(self->m)));
}

/* [(decode kernel, prefill kernel) or None] per matrix, layer-major, the classifier last: the
 * kernels each in-place matrix runs now (if_model_kq_kernel). */
static PyObject *Model_kq_kernels(ModelObject *self, void *closure) {
    (void)closure;
    if (!self->m) Py_RETURN_NONE;
    const size_t n = self->cfg.n_layers * IF_N_LAYER_MATRICES + 1;
    PyObject *out = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; out && i < n; i++) {
        const char *d = if_model_kq_kernel(self->m, i, 0), *p = if_model_kq_kernel(self->m, i, 1);
        PyObject *v = d ? Py_BuildValue("(ss)", d, p) : Py_NewRef(Py_None);
        if (!v) Py_CLEAR(out);
        else PyList_SET_ITEM(out, (Py_ssize_t)i, v);
    }
    return out;
}

static PyObject *Model_reads_rowmajor(ModelObject *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->m ? if_model_reads_rowmajor(self->m) : 1);
}

/* embed(tokens_i32, out (n, dim) f32): the token rows the forward pass starts from. */
static PyObject *Model_embed(ModelObject *self, PyObject *args) {
    PyObject *tokens, *out;
    if (!PyArg_ParseTuple(args, "OO", &tokens, &out)) return NULL;
    if (!self->m) return PyErr_Format(PyExc_RuntimeError, "Model not initialised");
    Py_buffer tv, ov;
    if (PyObject_GetBuffer(tokens, &tv, PyBUF_C_CONTIGUOUS) != 0) return NULL;
    if (PyObject_GetBuffer(out, &ov, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) {
        PyBuffer_Release(&tv);
        return NULL;
    }
    const size_t n = (size_t)tv.len / sizeof(int32_t);
    char err[ERRLEN] = "";
    if_status st = IF_EINVAL;
    if ((size_t)ov.len < n * self->cfg.dim * sizeof(float) || tv.len % sizeof(int32_t))
        snprintf(err, sizeof err, "embed: need int32 tokens and an (n, dim) float32 output");
    else
        st = if_model_embed_rows(self->m, tv.buf, n, ov.buf, err, sizeof err);
    PyBuffer_Release(&tv);
    PyBuffer_Release(&ov);
    if (st != IF_OK) return ifpy_raise_status(st, err);
    Py_RETURN_NONE;
}

static PyObject *Model_embedding(ModelObject *self, void *closure) {
    (void)closure;
    if (!self->m) Py_RETURN_NONE;
    int tied = 0, packed = 0;
    const if_dtype d = if_model_embed_info(self->m, &tied, &packed);
    return Py_BuildValue("{s:s,s:O,s:O}", "dtype", d == IF_F32 ? "f32" : d == IF_Q8 ? "q8" : d == IF_KQ ? "kq" : "q4",
                         "tied", tied ? Py_True : Py_False, "packed", packed ? Py_True : Py_False);
}

static PyObject *Model_attention(ModelObject *self, void *closure) {
    (void)closure;
    if (!self->m) Py_RETURN_NONE;
    return PyUnicode_FromString(if_model_attn_name(self->m));
}

static PyMethodDef Model_methods[] = {
    {"forward", (PyCFunction)Model_forward, METH_VARARGS,
     "forward(token, pos, out): one decode step; writes vocab logits into out (float32)."},
    {"embed", (PyCFunction)Model_embed, METH_VARARGS,
     "embed(tokens_i32, out (n, dim) f32): the token rows the forward pass starts from."},
    {"unpack", (PyCFunction)Model_unpack, METH_VARARGS,
     "unpack(idx[, nbytes]) -> bytes: matrix idx (layer-major, classifier last) as row-major "
     "int8 (a 4-bit matrix: its nibbles)."},
    {"prefill_seq", (PyCFunction)Model_prefill_seq, METH_VARARGS,
     "prefill_seq(seq, tokens_i32, pos0, out[, all]): prefill into sequence slot seq"},
    {"decode_batch", (PyCFunction)Model_decode_batch, METH_VARARGS,
     "decode_batch(tokens_i32, seqs_uintp, pos_uintp, out (rows, vocab)[, want_u8]): one "
     "batched step (see if_model_batch)"},
    {"hidden", (PyCFunction)Model_hidden, METH_VARARGS,
     "hidden(seq, tokens_i32, pos0, out_f32, last): final hidden states (every row, or the "
     "last) of tokens run at pos0.. in slot seq."},
    {"prefill", (PyCFunction)Model_prefill, METH_VARARGS,
     "prefill(tokens_int32, pos0, out_last[, out_all]): run tokens at pos0.. ."},
    {"arena_wait", (PyCFunction)Model_arena_wait, METH_NOARGS,
     "arena_wait(): copy the rest of the in-place matrices into the weight arena now."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Model_getset[] = {
    {"threads", (getter)Model_threads, NULL, "threads in the model's pool", NULL},
    {"kernels", (getter)Model_kernels, NULL, "kernel tables this model runs", NULL},
    {"kv_cache_bytes", (getter)Model_kv_bytes, NULL, "bytes of the KV cache", NULL},
    {"packed_bytes", (getter)Model_packed_bytes, NULL,
     "bytes of weights packed at load into the GEMM kernel's layout (0: none)", NULL},
    {"reads_rowmajor", (getter)Model_reads_rowmajor, NULL,
     "False when decode and prefill read only the packed copy (row-major int8 never read)", NULL},
    {"attention", (getter)Model_attention, NULL, "the attention kernel this model runs", NULL},
    {"embedding", (getter)Model_embedding, NULL,
     "the token table's lookup: {dtype, tied (the classifier's matrix), packed (rows read from "
     "its packed copy)}", NULL},
    {"n_seqs", (getter)Model_n_seqs, NULL, "KV cache sequence slots", NULL},
    {"kq_kernels", (getter)Model_kq_kernels, NULL,
     "[(decode kernel, prefill kernel) or None] per matrix (layer-major, the classifier last): "
     "what each in-place matrix runs now", NULL},
    {"arena_pending", (getter)Model_arena_pending, NULL,
     "in-place matrices not yet moved to their copy in the weight arena", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ifpy_ModelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "isaforge._native.Model",
    .tp_basicsize = sizeof(ModelObject),
    .tp_dealloc = (destructor)Model_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Run state of one model over borrowed weight buffers.",
    .tp_methods = Model_methods,
    .tp_getset = Model_getset,
    .tp_init = (initproc)Model_init,
    .tp_new = PyType_GenericNew,
};

