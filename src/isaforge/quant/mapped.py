"""A GGUF matrix held as the file's bytes until the C core makes the model.

The core turns each such matrix into Q8 at group 32 while the model is made (csrc/ggml_intake.c:
straight from the mapped blocks into the packed copy the kernels read, one matrix at a time on
the thread pool), so no Q8 copy of the model exists on this side. Reading `q` or `s` converts
the matrix then, with the same C conversion and so the same bits (for the reference model, the
tools and the tests); nothing is cached, so each access costs one conversion.
"""

from __future__ import annotations

import numpy as np

from .. import _native, settings
from ..types import Q8Tensor

GROUP = 32  # csrc/ggml_intake.c's group: one scale per 32 values, as GGUF's Q8_0


class MappedQ8(Q8Tensor):
    """Q8 at group 32 of the GGML tensor `raw` (its bytes, a view of the mapped file) of type
    `type_id` and shape (rows, cols); `name` is the file's tensor name, for errors."""

    def __init__(self, raw: np.ndarray, type_id: int, shape: tuple[int, int], name: str):
        self.raw, self.type_id, self._shape, self.name = raw, type_id, tuple(shape), name
        self.group_size = GROUP

    def _convert(self) -> tuple[np.ndarray, np.ndarray]:
        rows, cols = self._shape
        q = np.empty((rows, cols), np.int8)
        s = np.empty((rows, cols // GROUP), np.float32)
        try:
            _native.ggml_to_q8(self.type_id, self.raw, rows, cols, GROUP, q, s,
                               threads=settings.default_threads(), keep_q8_0=True)
        except ValueError as e:
            raise ValueError(f"tensor {self.name}: {e}") from None
        return q, s

    @property
    def q(self) -> np.ndarray:
        return self._convert()[0]

    @property
    def s(self) -> np.ndarray:
        return self._convert()[1]

    @property
    def shape(self) -> tuple[int, int]:
        return self._shape

    def dequantize(self) -> np.ndarray:
        return Q8Tensor(*self._convert(), GROUP).dequantize()

    def rows(self, ids) -> np.ndarray:
        q, s = self._convert()
        return Q8Tensor(q[ids], s[ids], GROUP).dequantize()
