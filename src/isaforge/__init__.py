"""isaforge: LLM inference on CPUs with per-ISA, run-time dispatched, bit-exact kernels.

    import isaforge
    m = isaforge.load()          # SmolLM2-135M-Instruct, pulled into the cache on first use
    print(m.chat([{"role": "user", "content": "Write a haiku about the sea."}]))

`isaforge.pull.pull(name)` fetches a known model; `isaforge.convert(src, out)` writes .isaf.
The names below are imported on first use, so that the `isaforge` command starts (and a
Ctrl-C while it starts is handled) before numpy and the C core are loaded.
"""

import importlib

__version__ = "0.1.0"
_HOMES = {"Config": "types", "GenerationConfig": "runtime.generate", "Model": "model",
          "ModelBusyError": "runtime.generate", "ModelFormatError": "types",
          "Q8Tensor": "types", "StructuredOutputError": "runtime.responses",
          "convert": "converter", "load": "model", "runtime_info": "runtime.engine"}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:  # a submodule (`isaforge.pull`) is an attribute without an import
        if name.startswith("_"):
            raise AttributeError(f"module 'isaforge' has no attribute {name!r}")
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module 'isaforge' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
