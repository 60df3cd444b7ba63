"""Weight quantization."""

from isaforge.quant.q8 import QuantizeSummary, pick_group_size, quantize_model, quantize_q8

__all__ = ["QuantizeSummary", "pick_group_size", "quantize_model", "quantize_q8"]
