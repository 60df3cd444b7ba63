/* _bench.c - CPython binding of the benchmark core (csrc/bench, isaforge_bench.h): kernel
 * timing cases with the correctness gate, memory bandwidth and peak int8 probes. A separate
 * extension module from _native so the benchmark never touches the runtime's dispatch. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "isaforge.h"
#include "isaforge_bench.h"

static PyObject *raise_status(if_status st, const char *err) {
    PyErr_SetString(st == IF_ENOMEM   ? PyExc_MemoryError
                    : st == IF_EINVAL ? PyExc_ValueError
                                      : PyExc_RuntimeError,
                    err);
    return NULL;
}

/* A kernel table by name: the benchmark's test tables, else if_tier_find's (a compiled tier
 * this CPU runs, or a core test table). */
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
    static char *kwlist[] = {"op", "M", "N", "K", "gs", "copies", NULL};
    const char *op;
    Py_ssize_t M, N, K, gs, copies = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "snnnn|n", kwlist, &op, &M, &N, &K, &gs, &copies))
        return -1;
    ifb_op o;
    if (strcmp(op, "q8_gemv") == 0) o = IFB_Q8_GEMV;
    else if (strcmp(op, "q8_gemm") == 0) o = IFB_Q8_GEMM;
    else if (strcmp(op, "quantize") == 0) o = IFB_QUANTIZE;
    else {
        PyErr_Format(PyExc_ValueError, "unknown op '%s' (q8_gemv, q8_gemm, quantize)", op);
        return -1;
    }
    if (M < 0 || N < 0 || K < 0 || gs < 0 || copies < 0) {
        PyErr_SetString(PyExc_ValueError, "sizes must be >= 0");
        return -1;
    }
    ifb_case_free(self->c);
    self->c = NULL;
    char err[256] = "";
    if_status st;
    Py_BEGIN_ALLOW_THREADS st = ifb_case_create(o, (size_t)M, (size_t)N, (size_t)K, (size_t)gs,
                                                (size_t)copies, &self->c, err, sizeof err);
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
    .tp_doc = "Case(op, M, N, K, gs, copies=1): one kernel op at one shape, for timing",
    .tp_methods = Case_methods,
    .tp_getset = Case_getset,
    .tp_init = (initproc)Case_init,
    .tp_new = PyType_GenericNew,
};

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

static PyObject *py_peak_int8(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *tier;
    Py_ssize_t threads, iters;
    if (!PyArg_ParseTuple(args, "snn", &tier, &threads, &iters)) return NULL;
    if (threads < 1 || iters < 1) {
        PyErr_SetString(PyExc_ValueError, "peak_int8: threads >= 1, iters >= 1");
        return NULL;
    }
    char err[256] = "";
    double g = 0;
    if_status st;
    Py_BEGIN_ALLOW_THREADS st = ifb_peak_int8(tier, (size_t)threads, (size_t)iters, &g, err,
                                              sizeof err);
    Py_END_ALLOW_THREADS if (st != IF_OK) return raise_status(st, err);
    return PyFloat_FromDouble(g);
}

static PyObject *py_now(PyObject *mod, PyObject *args) {
    (void)mod, (void)args;
    return PyFloat_FromDouble(ifb_now());
}

static PyMethodDef module_methods[] = {
    {"tiers", py_tiers, METH_VARARGS,
     "tiers(disabled=None) -> [{name, supported, reason, q8_gemv, q8_gemm, quantize, f32_gemv}]"},
    {"stream_read", py_stream_read, METH_VARARGS,
     "stream_read(bytes, threads, reps) -> best read-only GB/s"},
    {"peak_int8", py_peak_int8, METH_VARARGS,
     "peak_int8(tier, threads, iters) -> GOP/s of the tier's int8 instruction in a tight loop"},
    {"now", py_now, METH_NOARGS, "now() -> monotonic seconds"},
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
