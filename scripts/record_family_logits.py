"""Record llama.cpp's f32 logits of the tiny random model families that tests/test_families.py
writes (gemma3, qwen2, qwen3, llama with Llama 3 RoPE scaling), so the test compares with
llama.cpp without llama-cpp-python installed:

    python scripts/record_family_logits.py [-o tests/data/llamacpp_tiny_families.npz]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parent.parent / "tests"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", default=str(TESTS / "data" / "llamacpp_tiny_families.npz"))
    a = ap.parse_args()
    sys.path.insert(0, str(TESTS))
    import llama_cpp

    import test_families as tf

    out = {}
    with tempfile.TemporaryDirectory() as d:
        for fam in tf.FAMILIES:
            out[fam] = tf._llamacpp_logits(tf.write_family(Path(d) / f"{fam}.gguf", fam))
            print(f"{fam}: {out[fam].shape} logits")
    np.savez_compressed(a.out, llama_cpp_version=np.array(llama_cpp.__version__), **out)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
