"""The CLI end to end: llama2.c golden output, Q8 agreement, sampling flags, bad input."""

from __future__ import annotations

import json
import os
import struct

import pytest

from conftest import cli

PROMPT = "Once upon a time"


def run_args(stories, model=None, *extra):
    model = model or stories / "stories260K.bin"
    return ("run", str(model), "-z", str(stories / "tok512.bin"), "-i", PROMPT, *extra)


def test_golden_t0_steps200_is_byte_identical_to_run_c(stories):
    r = cli(*run_args(stories, None, "-t", "0", "--steps", "200"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == (stories / "golden_t0_n200.txt").read_bytes()
    assert b"decode" in r.stderr and b"tok/s" in r.stderr  # statistics go to stderr


@pytest.mark.parametrize("threads", ["1", "2"])
def test_golden_holds_for_every_thread_count(stories, threads):
    r = cli(*run_args(stories, None, "-t", "0", "--steps", "200", "--threads", threads))
    assert r.stdout == (stories / "golden_t0_n200.txt").read_bytes()


@pytest.mark.parametrize("ubatch", ["1", "7", "512"])
def test_golden_holds_for_every_prefill_chunk(stories, ubatch):
    r = cli(*run_args(stories, None, "-t", "0", "--steps", "200", "--ubatch", ubatch))
    assert r.stdout == (stories / "golden_t0_n200.txt").read_bytes()


def test_kv_cache_flag(stories):
    golden = (stories / "golden_t0_n200.txt").read_bytes()
    f16 = cli(*run_args(stories, None, "-t", "0", "--steps", "200", "--kv-cache", "f16"))
    assert f16.returncode == 0 and b"KV cache: f16" in f16.stderr
    assert f16.stdout[:40] == golden[:40]  # an f16 cache moves logits ~1e-3: text stays close
    for bad in (("--kv-cache", "q4"), ("--ubatch", "0")):
        r = cli(*run_args(stories, None, *bad))
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_kernel_scalar_forced_gives_golden(stories):
    r = cli(*run_args(stories, None, "-t", "0", "--steps", "200", "--kernel", "scalar"))
    assert r.stdout == (stories / "golden_t0_n200.txt").read_bytes()


def test_q8_group4_agrees_with_fp32_for_at_least_100_chars(stories, stories_q8):
    golden = (stories / "golden_t0_n200.txt").read_bytes()
    r = cli(*run_args(stories, stories_q8, "-t", "0", "--steps", "200"))
    assert r.returncode == 0, r.stderr
    agree = next((i for i, (a, b) in enumerate(zip(r.stdout, golden, strict=False)) if a != b),
                 min(len(r.stdout), len(golden)))
    print(f"Q8 (gs 4) output agrees with the fp32 golden for {agree} of {len(golden)} bytes")
    assert agree >= 100


def test_new_tokens_flag_counts_sampled_tokens(stories):
    # "Once upon a time" is 5 tokens with BOS: --steps 200 == -n 196
    a = cli(*run_args(stories, None, "-t", "0", "-n", "196"))
    assert a.stdout == (stories / "golden_t0_n200.txt").read_bytes()


def test_steps_shorter_than_prompt_prints_part_of_prompt(stories):
    r = cli(*run_args(stories, None, "-t", "0", "--steps", "2"))
    assert r.stdout == b"Once upon\n"  # positions 0, 1 print tokens 1, 2 ("Once", " upon")


@pytest.mark.parametrize("flags", [["-t", "1", "-p", "0.9", "-s", "42"],
                                   ["-t", "1", "-p", "1", "-s", "42"],
                                   ["-t", "0.8", "-p", "0.95", "-s", "7"]])
def test_sampled_runs_are_deterministic_per_seed(stories, flags):
    a = cli(*run_args(stories, None, *flags, "--steps", "120"))
    b = cli(*run_args(stories, None, *flags, "--steps", "120", "--threads", "1"))
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout and a.stdout.startswith(b"Once upon a time")


def test_info_json_reports_scalar_tier():
    r = cli("info", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    names = [t["name"] for t in info["tiers"]]
    assert names[0] == "scalar" and info["tiers"][0]["supported"] is True
    # a tier decodes with its own ISA's kernels (AMX, a GEMM engine, with AVX-512 VNNI's GEMV);
    # Q8 decode runs the GEMV, or the GEMM at M = 1 where that reads its packed copy
    tier = info["decode"]["tier"]
    assert info["decode"]["q8_gemv"].endswith("_" + {"amx": "avx512_vnni"}.get(tier, tier))
    d = info["decode"]
    q8_packed = ("avx2", "avx_vnni", "amx")
    assert d["q8_decode"] == (d["q8_gemm"] if tier in q8_packed else d["q8_gemv"])
    # 4-bit likewise (the GEMMs of AVX2, i8mm and AVX-512 VNNI read their packed copy at M = 1;
    # the AMX 4-bit GEMM does not pack: AMX decodes with AVX-512 VNNI's GEMV)
    packs = tier in ("avx2", "avx_vnni", "i8mm", "avx512_vnni")
    assert d["q4_decode"] == (d["q4_gemm"] if packs else d["q4_gemv"])
    assert d["q4_gemm_packs"] is packs
    assert info["threads_default"] >= 1
    text = cli("info")
    assert text.returncode == 0 and b"decode (GEMV, M=1)" in text.stdout


def test_info_with_a_model_reports_its_kv_cache_per_type(stories):
    model = str(stories / "stories260K.bin")
    r = cli("info", model, "--json")
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout)["model"]
    # 5 layers x 512 positions x kv_dim 32, K and V; int8 adds a float per 8 values (head 8)
    n = 5 * 512 * 32 * 2
    assert (m["format"], m["n_layers"], m["head_size"], m["ctx"]) == ("llama2c-v0", 5, 8, 512)
    assert m["kv_cache_bytes"] == {"f32": 4 * n, "f16": 2 * n, "int8": n + 4 * n // 8}
    text = cli("info", model, "--ctx", "128").stdout.decode()
    assert "KV cache:   at ctx 128: f32 160.0 KiB, f16 80.0 KiB, int8 60.0 KiB" in text
    run = cli(*run_args(stories, None, "-t", "0", "--steps", "3", "--kv-cache", "int8"))
    assert f"KV cache: int8 ({m['kv_cache_bytes']['int8'] / 2**20:.1f} MiB)" in run.stderr.decode()
    assert_clean_error(cli("info", model, "--ctx", "600"), b"ctx 600 exceeds", b"512")
    assert_clean_error(cli("info", str(stories / "tok512.bin")), b"tok512.bin")


# ---- bad input: one line on stderr, exit 2, no traceback ----

def assert_clean_error(r, *needles: bytes):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert b"Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


@pytest.mark.parametrize("flags,needle", [
    (["-t", "-1"], b"temperature"),
    (["-p", "2"], b"top-p"),
    (["-t", "abc"], b"-t"),
    (["--threads", "0"], b"--threads"),
    (["--steps", "-3"], b"--steps"),
    (["--kernel", "nosuchtier"], b"nosuchtier"),
    (["--bogus"], b"--bogus"),
])
def test_bad_flags(stories, flags, needle):
    assert_clean_error(cli(*run_args(stories, None, *flags)), needle)


def test_unknown_kernel_env_is_an_error(stories):
    env = dict(os.environ, ISAFORGE_KERNEL="avx9000")
    assert_clean_error(cli(*run_args(stories), env=env), b"avx9000")


def test_missing_model_file(stories, tmp_path):
    assert_clean_error(cli(*run_args(stories, tmp_path / "nope.bin")), b"nope.bin")


def test_prompt_longer_than_context(stories):
    long_prompt = " ".join(["upon"] * 600)  # > 512 tokens
    r = cli("run", str(stories / "stories260K.bin"), "-z", str(stories / "tok512.bin"),
            "-i", long_prompt)
    assert_clean_error(r, b"context")


def test_truncated_model_every_sampled_cut(stories, tmp_path):
    data = (stories / "stories260K.bin").read_bytes()
    cuts = sorted({0, 3, 27, 28} | {len(data) * i // 12 for i in range(1, 12)})
    for cut in cuts:  # the 50-cut sweep runs at the API level in test_formats
        p = tmp_path / f"cut{cut}.bin"
        p.write_bytes(data[:cut])
        assert_clean_error(cli(*run_args(stories, p)), str(p).encode())


def test_truncated_tokenizer(stories, tmp_path):
    tok = tmp_path / "tok.bin"
    tok.write_bytes((stories / "tok512.bin").read_bytes()[:3000])
    r = cli("run", str(stories / "stories260K.bin"), "-z", str(tok), "-i", PROMPT)
    assert_clean_error(r, b"tok.bin")


@pytest.mark.parametrize("field,value,needle", [
    (0, 0, b"dim"),                # dim 0
    (3, 7, b"n_heads"),            # n_heads does not divide dim
    (5, 2**31 - 1, b"vocab"),      # absurd vocab
    (6, -5, b"seq_len"),           # negative seq_len
])
def test_absurd_header_values(stories, tmp_path, field, value, needle):
    data = bytearray((stories / "stories260K.bin").read_bytes())
    struct.pack_into("<i", data, 4 * field, value)
    p = tmp_path / "bad.bin"
    p.write_bytes(bytes(data))
    assert_clean_error(cli(*run_args(stories, p)), needle)


def test_wrong_magic(stories, tmp_path):
    p = tmp_path / "magic.bin"
    p.write_bytes(b"GGUF" + b"\0" * 300)
    r = cli(*run_args(stories, p))
    assert r.returncode == 2 and b"Traceback" not in r.stderr and b"magic.bin" in r.stderr


def test_quantize_group_size_64_names_hidden_dim(stories, tmp_path):
    r = cli("quantize", str(stories / "stories260K.bin"), "-o", str(tmp_path / "q.bin"),
            "--group-size", "64")
    assert_clean_error(r, b"hidden_dim", b"172")
    assert not (tmp_path / "q.bin").exists()


def test_quantize_picks_group_size_4_and_says_so(stories, tmp_path):
    r = cli("quantize", str(stories / "stories260K.bin"), "-o", str(tmp_path / "q.bin"))
    assert r.returncode == 0, r.stderr
    assert b"group size 4 (chosen automatically)" in r.stdout
    assert b"max error" in r.stdout  # per-tensor error lines
