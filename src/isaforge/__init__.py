"""isaforge: LLM inference on CPUs with per-ISA, run-time dispatched, bit-exact kernels."""

from .engine import runtime_info
from .model import Model, load
from .types import Config, ModelFormatError, Q8Tensor

__version__ = "0.1.0"
__all__ = ["Config", "Model", "ModelFormatError", "Q8Tensor", "load", "runtime_info"]
