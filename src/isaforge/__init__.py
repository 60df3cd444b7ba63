"""isaforge: LLM inference on CPUs with per-ISA, run-time dispatched, bit-exact kernels.

    import isaforge
    m = isaforge.load()          # SmolLM2-135M-Instruct, pulled into the cache on first use
    print(m.chat([{"role": "user", "content": "Write a haiku about the sea."}]))

`isaforge.pull.pull(name)` fetches a known model; `isaforge.convert(src, out)` writes .isaf.
"""

from .converter import convert
from .model import Model, load
from .runtime.engine import runtime_info
from .runtime.generate import GenerationConfig, ModelBusyError
from .types import Config, ModelFormatError, Q8Tensor

__version__ = "0.1.0"
__all__ = ["Config", "GenerationConfig", "Model", "ModelBusyError", "ModelFormatError", "Q8Tensor",
           "convert", "load", "runtime_info"]
