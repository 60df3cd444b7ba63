"""benchmarks/scale.py's own parts: its shapes are the published models' (with Llama 3's
vocabulary the parameter counts come out exact), the random GGUF it writes reads back with
the shapes, RoPE divisors and SmolLM2 tokenizer it was given, a measured child's peak RSS is
its own and not the (large) parent's, and the table renders a row."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

_spec = importlib.util.spec_from_file_location(
    "scale_bench", Path(__file__).parents[1] / "benchmarks" / "scale.py")
scale = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = scale  # its dataclass resolves annotations through the module
_spec.loader.exec_module(scale)

LLAMA3_VOCAB = 128256


@pytest.mark.parametrize("size, params", [("1b", 1_235_814_400), ("3b", 3_212_749_824),
                                          ("8b", 8_030_261_248)])
def test_shapes_give_the_published_parameter_counts(size, params):
    s = scale.SHAPES[size]
    norms = s.layers * 2 * s.dim + s.dim
    assert s.params(LLAMA3_VOCAB) + norms == params


def test_random_gguf_reads_back(smollm2_gguf, tmp_path):
    import isaforge
    from isaforge.formats.hf import llama3_rope_divisors

    shape = scale.Shape("Tiny", 128, 256, 2, 4, 2, 32, 500000.0, False, 8.0)
    path = tmp_path / "tiny.gguf"
    scale.write_f16(shape, path, vocab_from=smollm2_gguf)
    m = isaforge.load(path, threads=1, ctx=64)
    c = m.config
    assert (c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size) == \
        (128, 256, 2, 4, 2, 49152)
    assert not c.shared_classifier and c.rope_theta == 500000.0
    want = llama3_rope_divisors(32, 500000.0, {"factor": 8.0}, path)
    np.testing.assert_array_equal(m.loaded.weights.rope_freqs, want)
    ref = isaforge.load(smollm2_gguf, threads=1, ctx=64)
    text = "Hello, world! <|im_start|>"
    assert m.encode(text) == ref.encode(text)
    assert m.chat_template == ref.chat_template
    assert np.isfinite(m.logits(m.encode("Hello there"))).all()


def test_child_peak_rss_is_its_own():
    big = np.ones(300 << 20, np.uint8)  # the parent's high-water mark: 300 MiB more
    small = scale.run_child([sys.executable, "-c", "print('x')"], timeout=60)
    grow = scale.run_child([sys.executable, "-c", "import numpy as np; a = np.ones(200 << 20, "
                            "np.uint8); print(int(a[::4096].sum()))"], timeout=60)
    del big
    assert small["rc"] == 0 and small["stdout"] == "x\n" and small["first_byte_s"] > 0
    assert small["peak_rss_mib"] < 100
    assert 200 < grow["peak_rss_mib"] < 300


def test_table_renders_a_row():
    row = {"size": "1b", "model": "Llama-3.2-1B shapes", "type": "q4_0", "threads": [1, 2],
           "weight_bytes_per_token": {"isaforge": 2e9, "llama.cpp": 1e9},
           "stream_gbps": {"1": [10.0, 12.0, 11.0], "2": [20.0]},
           "engines": {e: {"start_warm": {"first_token_s": [2.0 * k], "peak_rss_mib": [
               1000.0 * k]}, "start_cold": {"first_token_s": [], "peak_rss_mib": []},
               "speed": {t: {"pp_tps": [10.0 * k], "tg_tps": [5.0], "depth_tg_tps": [],
                             "depth_prefill_tps": []} for t in ("1", "2")}}
               for e, k in (("isaforge", 2), ("llama.cpp", 1))}}
    row["engines"]["isaforge"]["speed"]["2"]["depth_tg_tps"] = [4.0]
    s = scale.summarize(row)
    assert s["start_warm_first_token_s"]["ratio"] == 2.0
    assert s["start_peak_rss_mib"] == {"isaforge": 2000.0, "llama.cpp": 1000.0, "ratio": 2.0}
    assert s["tg_fraction_of_bandwidth_1t"]["isaforge"] == round(5.0 * 2e9 / 12e9, 4)
    assert s["tg_fraction_of_bandwidth_1t"]["stream_gbps_median"] == 11.0
    row["summary"] = s
    md = scale.table({"rows": [row]})
    assert md.count("\n") == 3
    assert "| Llama-3.2-1B | Q4_0 | 4.00 / 2.00 / 2.0 | 2000 / 1000 / 2.0 |" in md
    assert "4.00 / -" in md  # tg128 after 4096 tokens: isaforge only
