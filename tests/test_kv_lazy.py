"""The KV cache and the run state are reserved, not written, when an engine is made: their
pages become resident only as positions and rows are used, so a long --ctx costs address
space, not memory (as llama.cpp's RSS is its file plus what it uses). Measured in a fresh
process from /proc/self/status (Linux)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(),
                                reason="needs Linux /proc/self/status")

PROBE = r"""
import json, sys
import numpy as np
from isaforge.runtime.engine import Engine
from isaforge.synthetic import random_q8_model
from isaforge.types import Config

def anon_kib():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])

c = Config(dim=64, hidden_dim=96, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=256,
           seq_len=1 << 20, rope_theta=10000.0)
model = random_q8_model(c, group_size=32)
before = anon_kib()
e = Engine(model, threads=1, kv_cache=sys.argv[1])
made = anon_kib()
logits = e.prefill(list(range(40))).copy()
used = anon_kib()
print(json.dumps({"kv": e.kv_cache_bytes, "made": made - before, "used": used - before,
                  "logits": logits[:4].tolist()}))
"""


@pytest.mark.parametrize("kv_cache", ["f32", "f16", "int8"])
def test_a_long_context_reserves_the_kv_cache_without_touching_it(kv_cache):
    r = subprocess.run([sys.executable, "-c", PROBE, kv_cache], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    # 2 layers x 2^20 positions x kv_dim 32, keys and values: 512 MiB of f32 (int8: 128 + scales)
    el = {"f32": 4, "f16": 2, "int8": 1}[kv_cache]
    n = 2 * (1 << 20) * 32 * 2
    assert out["kv"] == n * el + (2 * (n // 2 // 16) * 4 if kv_cache == "int8" else 0)
    # made: the weights (a few KiB) and the touched heap, not the cache's 160-512 MiB
    assert out["made"] < 16 * 1024, out
    # 40 positions of 2 layers: a few KiB of cache; the chunk's rows: well under 16 MiB
    assert out["used"] < 32 * 1024, out
    assert all(abs(x) < 1e30 for x in out["logits"])
