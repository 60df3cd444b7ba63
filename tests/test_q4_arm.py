"""The Arm 4-bit kernels under qemu-aarch64 (the tests/test_arm_emulated.py pattern, its
toolchain and driver build): tests/native/q4_native_test.c compares every tier the emulated CPU
runs against the scalar 4-bit kernels and rotation bit for bit on the Q8 conformance grid
(M x N x K x GS with tails, guard pages after the weights, scales and activations, sentinels
past the outputs), SME2 at streaming vector lengths 128, 256 and 512; each tier's objects hold
their instructions (neon: TBL + SMULL/SMLAL2/SADALP and no SDOT; dotprod: TBL + SDOT; i8mm:
TBL + SMMLA; sme2: LUTI4 from ZT0 + SDOT for the GEMV, + SMOPA for the GEMM), the scalar
ones none."""

from __future__ import annotations

import re
import struct
import subprocess
from dataclasses import replace

import numpy as np
import pytest

from test_arm_emulated import (  # noqa: F401
    CPUS,
    asm_count,
    conformance_run,
    drivers,
    q4_trace_log,
    toolchain,
)

# CPU model -> the tiers q4_native_test must run besides scalar
_ALL = ["neon", "dotprod", "i8mm", "sme2"]
EXPECT = {"cortex-a53": ["neon"], "cortex-a76": ["neon", "dotprod"],
          "neoverse-n2": ["neon", "dotprod", "i8mm"],
          "max-sme128": _ALL, "max-sme256": _ALL, "max-sme512": _ALL}
# tier -> its 4-bit GEMV and GEMM
KERNELS = {"neon": ("q4_gemv_1x4_neon", "q4_gemm_4x4_neon"),
           "dotprod": ("q4_gemv_1x4_dotprod", "q4_gemm_1x4_dotprod"),
           "i8mm": ("q4_gemv_1x4_dotprod", "q4_gemm_4x4_i8mm"),
           "sme2": ("q4_gemv_1x1_sme2", "q4_gemm_vlxvl_sme2")}
# tier -> what a whole model's 4-bit decode runs where it is not the GEMV: the GEMM at M = 1
# over the packed copy prefill reads (if_q4_gemm_kernel.decode_packed: one resident copy)
DECODE = {"i8mm": "q4_gemm_4x4_i8mm"}


# Executed-site checks: (function symbol in the driver, {instruction: (mask, value)}) whose
# every site must run during the conformance under qemu (-d in_asm logs each translated
# instruction; qemu translates an instruction only to execute it).
SMOPA_S8 = (0xFFE0001C, 0xA0800000)  # SMOPA ZAda.S, Pn/M, Pm/M, Zn.B, Zm.B (int8, 4-way)
LUTI4_B = (0xFFFFBC00, 0xC0CA0000)  # LUTI4 Zd.B, ZT0, Zn[imm]
EXECUTED = {"sme2": ("q4_gemm_sme2_body", {"smopa": SMOPA_S8, "luti4": LUTI4_B})}


def _function_code(path, name: str) -> tuple[int, bytes]:
    """(address, code bytes) of the function symbol `name` (local or global) in the ELF64
    executable at path, from its section and symbol tables."""
    d = path.read_bytes()
    shoff, = struct.unpack_from("<Q", d, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", d, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]
    found = []
    for sec in secs:
        if sec[1] != 2:  # SHT_SYMTAB
            continue
        strtab = secs[sec[6]]
        for off in range(sec[4], sec[4] + sec[5], 24):
            st_name, st_info, _, shndx, value, size = struct.unpack_from("<IBBHQQ", d, off)
            start = strtab[4] + st_name
            if st_info & 0xF == 2 and d[start:d.index(b"\0", start)] == name.encode():
                code = secs[shndx]
                found.append((value, d[code[4] + value - code[3]:][:size]))
    assert len(found) == 1, f"{name}: {len(found)} function symbols in {path}"
    return found[0]


def _sites(words: dict[int, int], pattern: tuple[int, int]) -> set[int]:
    return {a for a, w in words.items() if w & pattern[0] == pattern[1]}


@pytest.mark.parametrize("cpu", [c for c in EXPECT if c in CPUS])
def test_q4_kernels_equal_scalar_under_emulation(toolchain, drivers, cpu):  # noqa: F811
    exe = drivers["aarch64"].parent / "q4_native_test-aarch64"
    # the full grid where every tier runs at the widest vector; the others skip the large
    # GEMMs except at M = 1 and 17 (as the Q8 conformance) unless ISAFORGE_ARM_FULL=1
    # (started in the background by test_arm_emulated.py when both modules run; SME CPUs
    # with qemu's -d in_asm log)
    log = q4_trace_log(drivers, cpu)
    trace = any(t in EXECUTED for t in EXPECT[cpu])
    assert trace == (log is not None), (cpu, log)
    r = conformance_run(toolchain, drivers, "q4", cpu)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout[-2000:]
    ran = [ln.split()[1].rstrip(":") for ln in r.stdout.splitlines() if ln.startswith("tier ")]
    assert ran == EXPECT[cpu], r.stdout
    for tier in ran:
        gemv, gemm = KERNELS[tier]
        assert f"tier {tier}: {gemv} {gemm} " in r.stdout, r.stdout
    if not trace:
        return
    ran_words = {}  # address -> instruction word, of every instruction qemu translated
    for m in re.finditer(r"^0x([0-9a-f]+):\s+([0-9a-f]{8})\b", log.read_text(), re.M):
        ran_words[int(m.group(1), 16)] = int(m.group(2), 16)
    for tier in ran:
        if tier not in EXECUTED:
            continue
        sym, patterns = EXECUTED[tier]
        addr, code = _function_code(exe, sym)
        words = {addr + i: struct.unpack_from("<I", code, i)[0] for i in range(0, len(code), 4)}
        for insn, pattern in patterns.items():
            static = _sites(words, pattern)
            ran_sites = _sites({a: w for a, w in ran_words.items() if a in words}, pattern)
            print(f"{cpu} {sym}: {insn} {len(static)} sites, {len(ran_sites)} executed")
            assert static, f"no {insn} in {sym}"
            assert ran_sites == static, f"{insn} sites of {sym} never executed on {cpu}"


@pytest.mark.parametrize("name,present,absent", [
    ("q4_gemv_1x4_neon", ["tbl", "smull", "smlal2", "sadalp"], ["sdot", "smmla", "luti4"]),
    ("q4_gemm_4x4_neon", ["tbl", "smull", "smlal2", "sadalp"], ["sdot", "smmla", "luti4"]),
    ("q4_gemv_1x4_dotprod", ["tbl", "sdot"], ["smmla", "luti4"]),
    ("q4_gemm_4x4_i8mm", ["tbl", "smmla"], ["luti4"]),
    ("q4_gemv_1x1_sme2", ["luti4", "sdot"], ["tbl"]),
    ("q4_gemm_vlxvl_sme2", ["luti4", "smopa"], ["tbl"]),
])
def test_q4_arm_objects_use_their_instructions(drivers, name, present, absent):  # noqa: F811
    counts = {i: asm_count(drivers, name, i) for i in present + absent}
    print(f"{name}.s: {counts}")
    assert all(counts[i] > 0 for i in present), counts
    assert all(counts[i] == 0 for i in absent), counts
    if "luti4" in present:  # the table comes from ZT0, loaded by LDR ZT0
        text = (drivers["aarch64"].parent / "asm-aarch64" / f"{name}.s").read_text().lower()
        assert any(ln.split()[:2] == ["ldr", "zt0,"] for ln in text.splitlines())


def test_q4_scalar_objects_use_none(drivers):  # noqa: F811
    asm = drivers["aarch64"].parent / "asm-aarch64"
    for name in ("q4_gemv_1x1_scalar", "q4_gemm_1x1_scalar"):  # portable: not in asm-aarch64
        assert not (asm / f"{name}.s").exists() or asm_count(drivers, name, "sdot") == 0


# ---- whole 4-bit models: T = 0 generation identical on every Arm tier ----

def _dump(model, path):
    """model (a Llama-layer LoadedModel) in q4_native_test's q4gen dump format."""
    from isaforge.quant.mapped import MappedQ8
    from isaforge.quant.q4 import Q4Tensor
    from isaforge.runtime.engine import LAYER_MATRICES, Engine, _matrix_spec
    from isaforge.types import Q8Tensor
    c, w = model.config, model.weights
    assert not any(v is not None for v in w.vectors.values()) and w.rope_freqs is None
    assert not (c.sliding_window or c.head_dim or c.act or c.rope_neox or c.embed_scale
                or c.attn_scale or c.logit_softcap)
    tied = w.tok_embeddings is w.wcls and isinstance(w.wcls, Q4Tensor)
    out = bytearray(b"IFQ4GEN2")
    out += struct.pack("<7Q2fQ", c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                       c.vocab_size, c.seq_len, c.rope_theta, c.norm_eps, tied)

    def arr(a):
        out.extend(b"\0" * (-len(out) % 64))
        out.extend(np.ascontiguousarray(a).tobytes())

    def mat(t):
        if isinstance(t, MappedQ8):  # the file's bytes: their Q8, as the core makes it
            t = Q8Tensor(t.q, t.s, t.group_size)
        spec = _matrix_spec(t)
        dtype, rows, cols, gs, data, s = spec[:6]
        kpad = spec[8] if dtype == 2 else 0
        signs = spec[7] if dtype == 2 else None
        out.extend(struct.pack("<6Q", dtype, rows, cols, gs, kpad, signs is not None))
        if dtype == 2:
            arr(spec[6])
        arr(data)
        if s is not None:
            arr(s)
        if signs is not None:
            arr(signs)

    # the token rows as the core looks them up (the table is quantized: Q8 or 4-bit rows); a
    # tied 4-bit table is the classifier's matrix itself (the core looks its rows up)
    if not tied:
        arr(Engine(model, threads=1, kernel="scalar").embed(np.arange(c.vocab_size)))
    arr(w.rms_final.astype(np.float32))
    mat(w.wcls)
    for layer in range(c.n_layers):
        arr(np.asarray(w.rms_att[layer], np.float32))
        arr(np.asarray(w.rms_ffn[layer], np.float32))
        for name in LAYER_MATRICES:
            mat(getattr(w, name)[layer])
    path.write_bytes(bytes(out))


def _host_greedy(model, prompt, n):
    """The x86-64 host's T = 0 tokens (scalar tier): prefill, then decode."""
    from isaforge.runtime.engine import Engine
    e = Engine(model, threads=1, kernel="scalar")
    row = e.prefill(prompt, all_logits=True)[-1]
    toks = []
    for i in range(n):
        toks.append(int(np.argmax(row)))
        if i + 1 < n:
            row = e.forward(toks[-1], len(prompt) + i)
    return toks


def _models(tmp_path):
    from conftest import STORIES
    from isaforge.formats.gguf import read_gguf
    from isaforge.model import read_model
    from isaforge.quant.cq4 import quantize_q4_0
    from test_gguf import float_tensors, write_gguf
    out = {}
    stories = STORIES / "stories260K.bin"
    if stories.exists():
        out["stories260K cq4-128"] = (read_model(stories, "cq4-128"), [1, 403, 407, 261, 378])
    t = float_tensors()
    types = {n: "Q4_0" for n in t if n.startswith("blk.") and "norm" not in n}
    p = write_gguf(tmp_path / "q4_0.gguf", t, types=types)
    out["tiny Q4_0 GGUF"] = (read_gguf(p, "cq4"), [1, 5, 9, 3])
    # the same with a 4-bit tied classifier (Q4_0 of the float table), which is the token
    # table: on i8mm its looked-up rows come from the classifier's packed copy
    m, q = out["tiny Q4_0 GGUF"][0], quantize_q4_0(t["token_embd.weight"])
    out["tiny Q4_0 GGUF, tied 4-bit classifier"] = (
        replace(m, weights=replace(m.weights, wcls=q, tok_embeddings=q)), [1, 5, 9, 3])
    return out


@pytest.mark.parametrize("cpu", ["cortex-a53", "neoverse-n2", "max-sme128", "max-sme512"])
def test_q4_generation_identical_across_arm_tiers(toolchain, drivers, tmp_path, cpu):  # noqa: F811
    """Greedy (T = 0) generation of a CQ4 model (stories260K, GS 128, rotated) and of a Q4_0
    GGUF (the file's nibbles): under qemu every tier the CPU runs (prefill with its 4-bit GEMM,
    then decode with its GEMV, or i8mm's GEMM at M = 1 over its packed copy) gives the same
    tokens as the x86-64 host, and the same bits in every logit row they were chosen from."""
    from isaforge.quant.q4 import Q4Tensor
    exe = drivers["aarch64"].parent / "q4_native_test-aarch64"
    n = 24
    for label, (model, prompt) in _models(tmp_path).items():
        assert all(isinstance(x, Q4Tensor) for x in model.weights.w2), label
        want = _host_greedy(model, prompt, n)
        dump = tmp_path / "model.q4gen"
        _dump(model, dump)
        r = subprocess.run([toolchain["ISAFORGE_QEMU_AARCH64"], "-cpu", CPUS[cpu][0], str(exe),
                            "q4gen", str(dump), str(n), *map(str, prompt)],
                           capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout[-2000:]
        gens = {ln.split()[1]: ln for ln in r.stdout.splitlines() if ln.startswith("gen ")}
        assert list(gens) == ["scalar", *EXPECT[cpu]], r.stdout
        digests = set()
        w = model.weights
        tied4 = w.tok_embeddings is w.wcls and isinstance(w.wcls, Q4Tensor)
        for tier, ln in gens.items():
            # token rows from the packed copy: a tied 4-bit table where decode reads it
            assert f" table={'packed' if tied4 and tier in DECODE else 'rows'} " in ln, ln
            gemv, gemm = KERNELS.get(tier, ("q4_gemv_1x1_scalar", "q4_gemm_1x1_scalar"))
            assert f"decode={DECODE.get(tier, gemv)} prefill={gemm}:" in ln, ln
            *ids, digest = ln.split(":", 1)[1].split()
            assert [int(x) for x in ids] == want, (label, tier, ids, want)
            digests.add(digest)
        assert len(digests) == 1, r.stdout  # and every logit row the same bits
