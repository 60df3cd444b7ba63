"""benchmarks/scale.py's models: the shapes measured (Llama-3.2-1B / 3B, Llama-3.1-8B), the
settings every part of the benchmark shares, and the random-weight GGUF files (written as F16
with the `gguf` package, quantized by llama.cpp's quantizer, cached in <isaforge cache>/scale/).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SEED = 20250101
STD = 0.02
VOCAB_SOURCE = "SmolLM2-135M-Instruct (isaforge's default model)"
N_CTX_START = 4096
DEPTH = 4096
N_CTX_SPEED = DEPTH + 256  # the depth test's 4096 + 128 positions, for both engines
MIN_AVAILABLE_MIB = 1024
PROMPT = "Hello"
ENGINES = ("isaforge", "llama.cpp")


@dataclass(frozen=True)
class Shape:
    name: str
    dim: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    theta: float
    tied: bool
    rope_factor: float  # Llama 3 RoPE scaling (rope_freqs): 32 for 3.2, 8 for 3.1
    context: int = 131072

    def matrices(self, vocab: int) -> list[tuple[str, tuple[int, int]]]:
        """(tensor name, numpy shape) of every matrix in llama.cpp's converter's order."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        out = [("token_embd.weight", (vocab, self.dim))]
        for i in range(self.layers):
            out += [(f"blk.{i}.attn_q.weight", (q, self.dim)),
                    (f"blk.{i}.attn_k.weight", (kv, self.dim)),
                    (f"blk.{i}.attn_v.weight", (kv, self.dim)),
                    (f"blk.{i}.attn_output.weight", (self.dim, q)),
                    (f"blk.{i}.ffn_gate.weight", (self.hidden, self.dim)),
                    (f"blk.{i}.ffn_up.weight", (self.hidden, self.dim)),
                    (f"blk.{i}.ffn_down.weight", (self.dim, self.hidden))]
        if not self.tied:
            out.append(("output.weight", (vocab, self.dim)))
        return out

    def params(self, vocab: int) -> int:
        return sum(r * c for _, (r, c) in self.matrices(vocab))


SHAPES = {
    "1b": Shape("Llama-3.2-1B", 2048, 8192, 16, 32, 8, 64, 500000.0, True, 32.0),
    "3b": Shape("Llama-3.2-3B", 3072, 8192, 28, 24, 8, 128, 500000.0, True, 32.0),
    "8b": Shape("Llama-3.1-8B", 4096, 14336, 32, 32, 8, 128, 500000.0, False, 8.0),
}
FTYPES = {"q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M", "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
          "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0"}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def scale_dir() -> Path:
    from isaforge.settings import cache_dir

    return cache_dir() / "scale"


def file_path(size: str, typ: str) -> Path:
    return scale_dir() / f"{SHAPES[size].name.lower()}-random-{typ}.gguf"


# ---------------------------------------------------------------------------------------------
# files


def _tokenizer_fields(src: Path | None = None) -> list[tuple[str, object, object, object]]:
    """(key, value, type, array element type) of every tokenizer.* field of `src` (default:
    the default model's file): vocabulary, merges, token types, special ids, chat template."""
    from gguf import GGUFReader, GGUFValueType

    from isaforge.pull import ensure_model

    r = GGUFReader(str(src or ensure_model()))
    out = []
    for key, f in r.fields.items():
        if key.startswith("tokenizer."):
            sub = f.types[1] if f.types[0] == GGUFValueType.ARRAY else None
            out.append((key, f.contents(), f.types[0], sub))
    return out


def write_f16(s: Shape, path: Path, vocab_from: Path | None = None) -> None:
    """A model of shapes `s` as an F16 GGUF, written tensor by tensor: every matrix
    normal(0, STD) from a generator seeded by (SEED, tensor index), norms 1.0; the tokenizer
    fields of `vocab_from` (default: the default model's file)."""
    import numpy as np
    from gguf import GGUFWriter

    from isaforge.formats.hf import llama3_rope_divisors

    fields = _tokenizer_fields(vocab_from)
    vocab = len(next(v for k, v, _, _ in fields if k == "tokenizer.ggml.tokens"))
    w = GGUFWriter(str(path), "llama")
    w.add_name(f"{s.name} shapes, random weights (seed {SEED}, std {STD})")
    w.add_file_type(1)  # LLAMA_FTYPE_MOSTLY_F16
    w.add_context_length(s.context)
    w.add_embedding_length(s.dim)
    w.add_block_count(s.layers)
    w.add_feed_forward_length(s.hidden)
    w.add_head_count(s.heads)
    w.add_head_count_kv(s.kv_heads)
    w.add_rope_freq_base(s.theta)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(s.head_dim)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_vocab_size(vocab)
    w.add_quantization_version(2)
    for key, val, vtype, sub in fields:
        w.add_key_value(key, val, vtype, sub_type=sub)
    mats = dict(s.matrices(vocab))
    order = ["token_embd.weight", "rope_freqs.weight"]
    for i in range(s.layers):
        order += [f"blk.{i}.{n}.weight" for n in ("attn_norm", "attn_q", "attn_k", "attn_v",
                                                   "attn_output", "ffn_norm", "ffn_gate",
                                                   "ffn_up", "ffn_down")]
    order += ["output_norm.weight"] + ([] if s.tied else ["output.weight"])
    vec_shape = {"rope_freqs.weight": (s.head_dim // 2,)}
    for name in order:
        if name in mats:
            w.add_tensor_info(name, mats[name], np.dtype(np.float16), 2 * mats[name][0] *
                              mats[name][1])
        else:
            shape = vec_shape.get(name, (s.dim,))
            w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * shape[0])
    w.write_header_to_file(path)
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rope = llama3_rope_divisors(s.head_dim, s.theta, {
        "factor": s.rope_factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}, path)
    for idx, name in enumerate(order):
        if name in mats:
            rows, cols = mats[name]
            rng = np.random.default_rng([SEED, idx])
            a = np.empty((rows, cols), np.float16)
            step = max(1, (1 << 24) // cols)  # 16M values (64 MiB of float32) at a time
            for r0 in range(0, rows, step):
                chunk = rng.standard_normal((min(step, rows - r0), cols), dtype=np.float32)
                chunk *= STD
                a[r0:r0 + len(chunk)] = chunk
            w.write_tensor_data(a)
            del a
        elif name == "rope_freqs.weight":
            w.write_tensor_data(np.ascontiguousarray(rope, np.float32))
        else:
            w.write_tensor_data(np.ones(s.dim, np.float32))
    w.close()


def quantize(src: Path, out: Path, typ: str) -> None:
    """llama.cpp's own quantizer, its default type mixture (not pure)."""
    import llama_cpp

    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = getattr(llama_cpp, FTYPES[typ])
    p.pure = False
    p.nthread = os.cpu_count() or 1
    tmp = out.with_name(out.name + ".part")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), p)
    if rc != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"llama_model_quantize {src} -> {typ} returned {rc}")
    tmp.rename(out)


def make_files(size: str, types: list[str], keep_f16: bool) -> None:
    want = [t for t in types if not file_path(size, t).exists()]
    f16 = file_path(size, "f16")
    if not want:
        return
    scale_dir().mkdir(parents=True, exist_ok=True)
    s = SHAPES[size]
    n = s.params(49152)
    need = 2 * n * (0 if f16.exists() else 1) + int(1.07 * n) * len(want)  # Q8_0 ~ 8.5 bits
    free = shutil.disk_usage(scale_dir()).free
    if free < need * 1.05:
        raise RuntimeError(f"{scale_dir()}: {free / 1e9:.1f} GB free, {s.name} needs about "
                           f"{need / 1e9:.1f} GB")
    if not f16.exists():
        log(f"{s.name}: writing F16 ({2 * s.params(49152) / 1e9:.1f} GB) to {f16}")
        tmp = f16.with_name(f16.name + ".part")
        t0 = time.perf_counter()
        write_f16(s, tmp)
        tmp.rename(f16)
        log(f"{s.name}: F16 written in {time.perf_counter() - t0:.0f} s")
    for t in want:
        t0 = time.perf_counter()
        log(f"{s.name}: quantizing to {t}")
        quantize(f16, file_path(size, t), t)
        log(f"{s.name}: {t} {file_path(size, t).stat().st_size / 1e9:.2f} GB in "
            f"{time.perf_counter() - t0:.0f} s")
    if not keep_f16:
        f16.unlink()
        log(f"{s.name}: F16 source deleted (--keep-f16 keeps it)")
