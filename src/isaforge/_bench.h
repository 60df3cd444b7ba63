/* _bench.h - what _bench.c and _bench_kq.c, the two halves of the _bench module, share. */
#ifndef IFPY_BENCH_H
#define IFPY_BENCH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "isaforge.h"

/* The kernel table of `tier`, or with NULL the automatic choice's decode (prefill 0) or prefill
 * table; NULL with a Python error set. */
const if_kernel_table *ifb_table_for(const char *tier, int prefill);
/* C-contiguous views of objs[0..n) (the last `writable` ones writable) each of at least
 * need[i] bytes; 0 with ValueError and nothing held otherwise. */
int ifb_get_views(PyObject *const *objs, const size_t *need, int n, int writable, Py_buffer *v);

/* _bench_kq.c */
PyObject *py_kq_kernel(PyObject *mod, PyObject *args);
PyObject *py_kq_gemm(PyObject *mod, PyObject *args);
PyObject *py_pack_groups(PyObject *mod, PyObject *args);
PyObject *py_group_row(PyObject *mod, PyObject *args);
PyObject *py_k8_quantize(PyObject *mod, PyObject *args);

#endif
