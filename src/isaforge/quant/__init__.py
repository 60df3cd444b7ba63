"""Weight quantization (numpy only): tensors to the kernels' formats. Files are formats/' work
(`isaforge quantize` of a llama2.c checkpoint is formats.llama2c.quantize_model)."""

from isaforge.quant.q8 import pick_group_size, quantize_q8

__all__ = ["pick_group_size", "quantize_q8"]
