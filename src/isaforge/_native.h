/* _native.h - what the CPython binding's translation units share (internal):
 *   _native.c             the module: its functions (sampler, kernel info, sizes), the
 *                         argument helpers below, the module's constants
 *   _native_model_type.c  the Model type: a model's run state over borrowed weight buffers */
#ifndef ISAFORGE_NATIVE_H
#define ISAFORGE_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>

#include "isaforge.h"

#define ERRLEN 512

/* Buffers borrowed through the buffer protocol, released together. */
typedef struct bufset {
    Py_buffer *v;
    size_t n, cap;
} bufset;

/* Borrow obj's contiguous buffer of at least `bytes` bytes; NULL + exception on failure. */
const void *ifpy_borrow(bufset *bs, PyObject *obj, size_t bytes, int writable,
                        const char *what);
void ifpy_release_all(bufset *bs);
/* Raise the exception of a core status (err: its reason); returns NULL. */
PyObject *ifpy_raise_status(if_status st, const char *err);
/* cfg: a dict of CONFIG_FIELDS (sliding_window and n_sinks may be left out: 0). 0 with an
 * exception naming the unknown, missing or bad field. */
int ifpy_parse_config(PyObject *cfg, if_config *c);
/* The kernel set for (tier, disabled names), as if_kernels_choose makes it; 0 with an exception
 * set on an error. */
int ifpy_choose(const char *tier, const char *disabled, if_kernel_set *ks, uint32_t *mask);
/* A tier's kernel names by op, and its GEMM's step and packed layout, as a dict. */
PyObject *ifpy_table_dict(const if_kernel_table *t);

/* The Model type (_native_model_type.c). */
extern PyTypeObject ifpy_ModelType;

#endif
