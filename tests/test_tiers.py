"""Whole-model identity across kernel tiers: generated text and logits do not depend on the
tier, the thread count, or whether the prompt went through GEMM (prefill) or GEMV (decode).
Also dispatch overrides, and the instructions in the built objects."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from conftest import REPO, cli
from isaforge import _native
from isaforge.runtime.engine import Engine, select_kernel
from isaforge.runtime.generate import Sampler
from isaforge.synthetic import SMOLLM2_135M, random_q8_model

SUPPORTED = [t["name"] for t in _native.info()["tiers"] if t["supported"]]
COMPILED = [t["name"] for t in _native.info()["tiers"]]


@pytest.fixture(autouse=True)
def _restore_dispatch():
    yield
    select_kernel(None)


@pytest.mark.parametrize("flags", [["-t", "0"], ["-t", "1", "-s", "42"]])
def test_stories_q8_text_identical_under_every_tier(stories, stories_q8, flags):
    outs = {}
    for tier in SUPPORTED:
        r = cli("run", str(stories_q8), "-i", "Once upon a time", "--steps", "200",
                "--kernel", tier, *flags)
        assert r.returncode == 0, r.stderr
        assert f"decode={tier}".encode() in r.stderr
        outs[tier] = r.stdout
    assert len(set(outs.values())) == 1, {k: v[:80] for k, v in outs.items()}


@pytest.fixture(scope="module")
def smollm():
    return random_q8_model(SMOLLM2_135M, group_size=32, seq_len=64)


def greedy_and_sampled(engine, prompt, n_new):
    runs = []
    for sampler in (Sampler(0.0, 0.9, 1), Sampler(1.0, 0.9, 42)):
        logits = engine.prefill(prompt, 0).copy()
        first = logits.copy()
        toks = []
        for i in range(n_new):
            t = sampler.sample(logits)
            toks.append(t)
            logits = engine.forward(t, len(prompt) + i)
        runs.append((toks, first.view(np.uint32).copy()))
    return runs


def test_smollm_shaped_tokens_and_logits_identical_under_every_tier(smollm):
    prompt = [1, 500, 17, 30000, 42, 9, 1234, 49151, 77]
    results = {}
    for tier in SUPPORTED:
        select_kernel(tier)
        eng = Engine(smollm, threads=2)
        assert eng.kernels["prefill"]["tier"] == tier
        results[tier] = greedy_and_sampled(eng, prompt, 12)
    base = results["scalar"]
    for tier, runs in results.items():
        for (toks, logits), (btoks, blogits) in zip(runs, base, strict=True):
            assert toks == btoks, tier
            assert np.array_equal(logits, blogits), tier


def test_smollm_shaped_prefill_equals_token_by_token(smollm):
    """Batched prefill (GEMM, in chunks) gives the logits of one decode step per token, bit for
    bit, with the best tiers and a chunk size that leaves a partial last chunk."""
    select_kernel(None)
    tokens = [1, *range(100, 120)]
    batched = Engine(smollm, threads=2, ubatch=8).prefill(tokens, 0, all_logits=True)
    one = Engine(smollm, threads=1)
    stepwise = np.stack([one.forward(t, p).copy() for p, t in enumerate(tokens)])
    assert np.array_equal(batched.view(np.uint32), stepwise.view(np.uint32))


def test_unsupported_or_unknown_tier_is_a_clear_error(stories):
    missing = [t for t in COMPILED if t not in SUPPORTED]
    for tier in missing:
        r = cli("run", str(stories / "stories260K.bin"), "--kernel", tier, "-i", "x")
        assert r.returncode == 2 and b"not supported" in r.stderr and b"Traceback" not in r.stderr
    with pytest.raises(ValueError, match="unknown kernel tier"):
        select_kernel("avx1024")


def test_disable_features_changes_the_choice_and_rejects_unknown_names(stories):
    env = dict(os.environ, ISAFORGE_DISABLE_FEATURES="avx2,avx512f,asimddp")
    r = cli("info", "--json", env=env)
    assert r.returncode == 0, r.stderr
    import json

    info = json.loads(r.stdout)
    assert info["decode"]["tier"] == "scalar" and info["prefill"]["tier"] == "scalar"
    assert "avx2" in info["disabled"]
    env["ISAFORGE_DISABLE_FEATURES"] = "avx2,warp_drive"
    r = cli("run", str(stories / "stories260K.bin"), "-i", "x", env=env)
    assert r.returncode == 2 and b"warp_drive" in r.stderr


def objects() -> dict[str, str]:
    found = {p.name: p for p in REPO.glob("build/**/CMakeFiles/isaforge_core.dir/**/*.o")}
    if not found:
        pytest.fail("no object files under build/: install with the README's set-up command")
    return found


def disasm(path) -> str:
    return subprocess.run(["objdump", "-d", str(path)], capture_output=True, text=True,
                          check=True).stdout.lower()


@pytest.mark.skipif(not shutil.which("objdump"), reason="objdump (binutils) not installed")
@pytest.mark.skipif("avx2" not in COMPILED, reason="x86 tiers not compiled (not x86-64)")
def test_objects_contain_their_isa_instructions_and_scalar_none():
    objs = objects()
    for name in ("q8_gemv_1x1_avx512_vnni.c.o", "q8_gemm_4x32_avx512_vnni.c.o",
                 "q8_gemv_1x8_avx_vnni.c.o", "q8_gemm_4x16_avx_vnni.c.o"):
        assert "vpdpbusd" in disasm(objs[name]), name
    for name in ("q4_gemv_1x16_avx512_vnni.c.o", "q4_gemm_8x16_avx512_vnni.c.o"):
        text = disasm(objs[name])
        assert "vpdpbusd" in text and "vpshufb" in text and "%zmm" in text, name
    for name in ("q8_gemv_1x8_avx2.c.o", "q8_gemm_4x16_avx2.c.o"):
        text = disasm(objs[name])
        assert "vpmaddubsw" in text and "vpdpbusd" not in text, name
    assert "tdpbssd" in disasm(objs["q8_gemm_16x16_amx.c.o"])
    assert "%zmm" in disasm(objs["f32_swiglu_1x1_avx512.c.o"])
    text = disasm(objs["f32_swiglu_1x1_avx2.c.o"])
    assert "%ymm" in text and "%zmm" not in text
    # the AMX 4-bit GEMM: TDPBSSD on B tiles expanded from the nibbles by a 16-lane dword
    # gather and a 512-bit VPSHUFB into the codebook
    text = disasm(objs["q4_gemm_16x16_amx.c.o"])
    assert "tdpbssd" in text and "vpgatherdd" in text, "q4_gemm_16x16_amx"
    assert any("vpshufb" in ln and "%zmm" in ln for ln in text.splitlines()), "q4_gemm_16x16_amx"
    for name in ("q8_gemv_1x1_scalar.c.o", "q8_gemm_1x1_scalar.c.o",
                 "q8_quantize_1x1_scalar.c.o", "q8_gemm_16x16_amx_pack.c.o",
                 "f32_swiglu_1x1_scalar.c.o", "f32_attn_16x64_scalar.c.o",
                 "q4_gemm_1x1_scalar.c.o"):
        text = disasm(objs[name])
        for insn in ("vpdpbusd", "tdpbssd", "vpmaddubsw", "%ymm", "%zmm"):
            assert insn not in text, (name, insn)
