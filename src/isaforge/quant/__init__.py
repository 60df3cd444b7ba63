"""Weight quantization (numpy only): tensors to the kernels' formats. Files are formats/' work
(`isaforge quantize` of a llama2.c checkpoint is formats.llama2c.quantize_model)."""

from .q8 import as_q8, pick_group_size, quantize_q8, read_group_size

__all__ = ["as_q8", "pick_group_size", "quantize_q8", "read_group_size"]
