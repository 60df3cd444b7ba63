"""Make a GGUF of another type with llama-cpp-python's own quantize API (the peer's quantizer,
so both engines read the same bytes): the Q8_0 file of the 8-bit comparison and the Q4_0 file
of the 4-bit comparison.

    python3 benchmarks/peer_gguf.py SRC.gguf OUT.gguf --type q8_0   # or q4_0

`--pure` (the default) gives every matrix the chosen type (llama.cpp otherwise keeps the
embeddings / output in a type of its choosing). Needs llama-cpp-python
(`bash scripts/install_peers.sh`)."""

from __future__ import annotations

import argparse
import os
import sys

FTYPES = {"q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--type", choices=sorted(FTYPES), default="q8_0")
    ap.add_argument("--no-pure", dest="pure", action="store_false",
                    help="let llama.cpp choose the embeddings' / output's type")
    a = ap.parse_args(argv)
    if not os.path.isfile(a.src):
        ap.error(f"{a.src}: no such file")
    try:
        import llama_cpp
    except ImportError:
        print("peer_gguf: llama-cpp-python is not installed (bash scripts/install_peers.sh)",
              file=sys.stderr)
        return 2
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = getattr(llama_cpp, FTYPES[a.type])
    p.allow_requantize = True  # the source may itself be quantized (SmolLM2's is Q4_1)
    p.pure = a.pure
    p.nthread = os.cpu_count() or 1
    rc = llama_cpp.llama_model_quantize(a.src.encode(), a.out.encode(), p)
    if rc != 0:
        print(f"peer_gguf: llama_model_quantize returned {rc}", file=sys.stderr)
        return 1
    print(f"{a.out}: {os.path.getsize(a.out)} bytes ({a.type}, pure={a.pure}, llama-cpp-python "
          f"{llama_cpp.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
