"""Gemma 3 270M, the real file (`isaforge pull gemma3-270m`; Q4_K_M GGUF): the layer
description on a real model. Skipped without the file unless ISAFORGE_REAL_MODEL_TESTS=1 (then
missing is a failure).

- the fp32-activation path equals the float64 reference within 1e-4 of the largest |logit|;
- greedy continuation of "The capital of France is" with the default options (the file's
  Q5_0 / Q4_K / Q6_K / Q8_0 matrices run in place, the tied Q8_0 table too): all 20 ids equal
  llama.cpp 0.3.36's greedy continuation of the same file; with --quant q8 (every matrix
  requantized) the first 9 do;
- chunked prefill over a prompt longer than the 512-position window equals token by token bit
  for bit, at several chunk sizes, in windowed and global layers alike;
- under --quant q8 the tied 262,144-row classifier runs on the Q8 kernels (the file's Q8_0 table
  as it is).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from isaforge import load, pull
from isaforge.formats import read_gguf, with_context
from isaforge.reference import Reference
from isaforge.runtime.engine import Engine
from isaforge.runtime.generate import GenerationConfig
from isaforge.types import Q8Tensor

PROMPT = "The capital of France is"
PROMPT_IDS = [2, 818, 5279, 529, 7001, 563]  # llama.cpp's tokenize(add_bos=True) too
# greedy, no repetition penalty, default options (Q5_0, Q4_K, Q6_K, Q8_0 in place): " the capital of
# the country of France. It is the largest city in France. It is the capital", llama.cpp's 20
# ids exactly
GREEDY_20 = [506, 5279, 529, 506, 2891, 529, 7001, 236761, 1030, 563, 506, 7488, 3207, 528, 7001,
             236761, 1030, 563, 506, 5279]
# --quant q8: the first 9 as llama.cpp, then " the capital of the country of France. It is"
GREEDY_20_Q8 = [506, 5279, 529, 506, 2891, 529, 7001, 236761, 1030, 563, 506, 5279, 529, 506,
                2891, 529, 7001, 236761, 1030, 563]


@pytest.fixture(scope="module")
def gemma_path():
    path = pull.model_path("gemma3-270m")
    if not path.is_file():
        if os.environ.get("ISAFORGE_REAL_MODEL_TESTS") == "1":
            pytest.fail(f"{path} missing: run `isaforge pull gemma3-270m` first")
        pytest.skip(f"Gemma 3 not in the cache ({path}); run `isaforge pull gemma3-270m`")
    return path


@pytest.fixture(scope="module")
def q8(gemma_path):
    return with_context(read_gguf(gemma_path), 1024)


def test_config_and_quantized_classifier(q8):
    c, w = q8.config, q8.weights
    assert (c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_size, c.vocab_size) == \
        (640, 18, 4, 1, 256, 262144)
    assert (c.act, c.rope_neox, c.sliding_window, c.swa_pattern) == (1, 1, 512, 6)
    assert (c.rope_theta, c.rope_theta_swa, c.attn_scale) == (1e6, 1e4, 1 / 16)
    assert c.embed_scale == pytest.approx(640 ** 0.5)
    assert [i for i in range(18) if c.layer_window(i) == 0] == [5, 11, 17]
    # Gemma's RMSNorm is x * (1 + w): llama.cpp's converter stores 1 + w (its gemma3 graph
    # multiplies by the stored weight), so the reader takes the norms as they are
    assert sorted(w.vectors) == ["k_norm", "q_norm", "rms_post_att", "rms_post_ffn"]
    assert c.shared_classifier and isinstance(w.wcls, Q8Tensor) and w.wcls.shape == (262144, 640)


def test_fp32_path_matches_float64_reference(gemma_path):
    m = with_context(read_gguf(gemma_path, quant="f32"), 16)
    got = Engine(m, threads=2).prefill(PROMPT_IDS, all_logits=True)
    ref = Reference(m.config, m.weights).logits(PROMPT_IDS)
    err = np.abs(got - ref).max(axis=1) / np.abs(ref).max(axis=1)
    assert err.max() < 1e-4, err
    assert (got.argmax(1) == ref.argmax(1)).all()


def test_greedy_continuation(gemma_path):
    model = load(gemma_path, ctx=256, threads=2)
    assert model.encode(PROMPT) == PROMPT_IDS
    config = GenerationConfig(20, None, 0.0, 0.9, None, repeat_penalty=1.0)
    assert [t for _, t in model.pairs(PROMPT_IDS, config)] == GREEDY_20
    text = model.complete(PROMPT_IDS, 20, temperature=0.0, repeat_penalty=1.0)
    assert text == " the capital of the country of France. It is the largest city in France. " \
        "It is the capital"
    q8 = load(gemma_path, ctx=256, threads=2, quant="q8")
    assert [t for _, t in q8.pairs(PROMPT_IDS, config)] == GREEDY_20_Q8


def test_chunked_prefill_over_the_window_equals_token_by_token(q8):
    """600 positions (> the 512-position window): the last 64 positions' logits of prefill in
    chunks of 100 and 512 rows equal 600 decode steps bit for bit."""
    rng = np.random.default_rng(3)
    toks = [2] + [int(t) for t in rng.integers(1000, 200000, 599)]
    step = Engine(q8, threads=2)
    want = np.empty((64, 262144), np.float32)
    for p, t in enumerate(toks):
        logits = step.forward(t, p)
        if p >= 536:
            want[p - 536] = logits
    for ub in (100, 512):
        eng = Engine(q8, threads=2, ubatch=ub)
        eng.prefill(toks[:536])
        got = eng.prefill(toks[536:], pos0=536, all_logits=True)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), ub
