"""End to end, llama-bench's conventions: tests pp<P> (prefill P tokens) and tg<N> (N decode
steps), each from an empty context; t/s as mean and stddev over repetitions after a warm-up
cycle; configurations (backend x kernel x threads x test) alternate."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..quant.ggml import KQTensor
from ..quant.mapped import MappedQ8
from ..types import LAYER_MATRICES, table_bytes
from .energy import Rapl
from .limits import bandwidth_at, peak_at
from .machine import steal_ms
from .schedule import mean_std, run_alternating

SYNTHETIC = {"smollm2-135m": "SMOLLM2_135M"}


@dataclass
class ModelInfo:
    name: str
    path: str
    format: str
    size_bytes: int
    params: int
    weight_bytes_per_token: int  # weights a decode step reads once
    ops_per_token_decode: int  # 2 x multiply-adds in the matmuls (attention not counted)
    ops_per_token_prefill: int  # the same without the classifier (prefill: last row only)


@dataclass
class Config:
    backend: str  # "isaforge" or "llama.cpp"
    kernel: str  # tier ("auto" resolved to the tier names in `kernels`), or the peer's name
    threads: int
    test: str  # "pp512", "tg128"
    n_tokens: int
    kernels: dict = field(default_factory=dict)  # {"decode": tier, "prefill": tier}
    key: tuple = ()  # the runner (engine or peer context) this config uses

    @property
    def kind(self) -> str:
        return self.test[:2]


def _nbytes(w) -> int:
    """Resident bytes a matmul reads, from shapes where reading q would convert the matrix."""
    if isinstance(w, KQTensor):  # the file's blocks, run in place
        return int(w.raw.nbytes)
    if isinstance(w, MappedQ8):  # made Q8 at group 32 by the core
        rows, cols = w.shape
        return rows * cols + 4 * rows * (cols // w.group_size)
    if hasattr(w, "nibbles"):  # 4-bit (quant.q4.Q4Tensor)
        return int(w.nibbles.nbytes + w.s.nbytes + w.codebook.nbytes)
    if hasattr(w, "q"):
        return int(w.q.nbytes + w.s.nbytes)
    return int(getattr(w, "nbytes", 0))


def _nelem(w) -> int:
    shape = getattr(w, "shape", None)
    return int(np.prod(shape)) if shape is not None else 0


def model_info(loaded, name: str) -> ModelInfo:
    """Sizes from an isaforge LoadedModel."""
    w, c = loaded.weights, loaded.config
    layer = [m for n in LAYER_MATRICES for m in getattr(w, n)]
    mm_bytes = sum(_nbytes(m) for m in layer)
    mm_params = sum(_nelem(m) for m in layer)
    cls_params, cls_bytes = _nelem(w.wcls), _nbytes(w.wcls)
    norms = int(np.size(w.rms_att) + np.size(w.rms_ffn) + np.size(w.rms_final))
    params = mm_params + norms + c.vocab_size * c.dim + (0 if c.shared_classifier else cls_params)
    p = Path(loaded.path)
    size = p.stat().st_size if p.is_file() else mm_bytes + cls_bytes + 4 * norms + (
        0 if c.shared_classifier else table_bytes(w.tok_embeddings))
    return ModelInfo(name, str(loaded.path), loaded.format, int(size), int(params),
                     mm_bytes + cls_bytes + 4 * c.dim, 2 * (mm_params + cls_params),
                     2 * mm_params)


def gguf_info(path: Path) -> ModelInfo:
    """Sizes of a GGUF file from its tensor table (for a peer when isaforge cannot load it)."""
    from gguf import GGUFReader

    r = GGUFReader(str(path))
    names = {t.name: t for t in r.tensors}
    params = sum(int(t.n_elements) for t in r.tensors)
    mats = [t for t in r.tensors if len(t.shape) == 2 and t.name != "token_embd.weight"]
    layer = [t for t in mats if t.name.startswith("blk.")]
    emb = names.get("token_embd.weight")
    cls = names.get("output.weight", emb)
    mm = sum(int(t.n_elements) for t in layer)
    wbytes = sum(int(t.n_bytes) for t in layer) + (int(cls.n_bytes) if cls is not None else 0)
    cls_params = int(cls.n_elements) if cls is not None else 0
    return ModelInfo(path.name, str(path), "gguf", path.stat().st_size, params, wbytes,
                     2 * (mm + cls_params), 2 * mm)


def load_model(spec: str, seq_len: int, group_size: int = 32, quant: str = "auto"):
    """(LoadedModel or None, ModelInfo, reason isaforge cannot run it or None)."""
    from ..model import read_model
    from ..types import ModelFormatError

    if spec.startswith("synthetic:"):
        from .. import synthetic

        key = spec.split(":", 1)[1]
        if key not in SYNTHETIC:
            raise ValueError(f"unknown synthetic model {key!r} (known: {', '.join(SYNTHETIC)})")
        cfg = getattr(synthetic, SYNTHETIC[key])
        loaded = synthetic.random_q8_model(cfg, group_size=group_size, seq_len=seq_len)
        return loaded, model_info(loaded, f"{key} random Q8 gs{group_size}"), None
    p = Path(spec)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such model file")
    try:
        loaded = read_model(p, quant)
    except ModelFormatError as e:
        if p.suffix.lower() != ".gguf":
            raise
        return None, gguf_info(p), f"isaforge cannot load it yet: {e}"
    if loaded.config.seq_len < seq_len:
        raise ValueError(f"{p}: the test needs {seq_len} positions, the model's context is "
                         f"{loaded.config.seq_len}")
    return loaded, model_info(loaded, p.name), None


def bench_tokens(n: int, vocab: int, seed: int) -> list[int]:
    """Deterministic pseudo-random token ids (llama-bench also feeds random tokens)."""
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(1, vocab, size=n)]


@dataclass
class E2ERun:
    """Everything end to end: configs, engines and peers, the alternating measurement."""

    loaded: object
    info: ModelInfo
    n_prompt: int
    n_gen: int
    reps: int
    threads: list[int]
    kernels: list[str]
    ubatch: int = 0
    gguf_path: str | None = None  # run llama.cpp on it when its peer is available
    isaforge_reason: str | None = None
    log: Callable[[str], None] = field(default=lambda s: None)  # progress lines
    rapl: Rapl = field(default_factory=Rapl.probe)
    kv_cache: str = "f32"

    def build(self) -> tuple[list[Config], dict, list[dict]]:
        from ..runtime.engine import Engine
        from .peers import LlamaCppRunner, llama_cpp_status

        configs, runners = [], {}
        tests = []
        if self.n_prompt > 0:
            tests.append(("pp", f"pp{self.n_prompt}", self.n_prompt))
        if self.n_gen > 0:
            tests.append(("tg", f"tg{self.n_gen}", self.n_gen))
        if self.loaded is not None:
            for k in self.kernels:
                for t in self.threads:
                    eng = Engine(self.loaded, threads=t, ubatch=self.ubatch,
                                 kv_cache=self.kv_cache, kernel=None if k == "auto" else k)
                    kt = eng.kernels
                    ks = {"decode": kt["decode"]["tier"], "prefill": kt["prefill"]["tier"],
                          "decode_q8_gemv": kt["decode"]["q8_gemv"],
                          "decode_q4_gemv": kt["decode"]["q4_gemv"],
                          "prefill_q4_gemm": kt["prefill"]["q4_gemm"],
                          "prefill_q8_gemm": kt["prefill"]["q8_gemm"],
                          "quantize": kt["prefill"]["quantize"],
                          "packed_bytes": eng.packed_bytes}
                    name = k if k != "auto" else (
                        ks["prefill"] if ks["decode"] == ks["prefill"]
                        else f"{ks['prefill']}/{ks['decode']}")
                    runners[("isaforge", k, t)] = eng
                    for _, test, n in tests:
                        configs.append(Config("isaforge", name, t, test, n, ks,
                                              ("isaforge", k, t)))
        peer = llama_cpp_status() if self.gguf_path else None
        if peer and peer["status"] == "ok":
            for t in self.threads:
                runners[("llama.cpp", "llama.cpp", t)] = LlamaCppRunner(
                    self.gguf_path, t, max(self.n_prompt, self.n_gen) + 8, max(self.n_prompt, 1))
                for _, test, n in tests:
                    configs.append(Config("llama.cpp", "llama.cpp", t, test, n, {},
                                          ("llama.cpp", "llama.cpp", t)))
        return configs, runners, ([peer] if peer else [])

    def run(self, limits: dict | None) -> tuple[list[dict], list[dict], list[dict]]:
        """(results, peers, skipped backends)."""
        configs, runners, peers = self.build()
        vocab = self.loaded.config.vocab_size if self.loaded is not None else None
        toks: dict = {}

        def tokens_for(c: Config) -> list[int]:
            v = vocab if c.backend == "isaforge" else runners[c.key].n_vocab
            key = (v, c.kind)
            if key not in toks:
                toks[key] = bench_tokens(c.n_tokens, v, seed=1 if c.kind == "pp" else 2)
            return toks[key]

        calls = [0]
        # the stream probe (the limits' buffer size), one sample per decode thread count per
        # cycle in the same alternation: the VM's read bandwidth moved by a third within minutes,
        # so a probe taken once before the runs is the limit of another moment
        nbytes = (limits or {}).get("stream_bytes")
        probes = [("stream", t) for t in sorted({c.threads for c in configs if c.kind == "tg"})
                  ] if nbytes and limits.get("bandwidth") else []
        entries = list(configs) + probes

        def measure(c) -> dict:
            if isinstance(c, tuple):  # ("stream", threads)
                from .. import _bench

                return {"gbps": _bench.stream_read(nbytes, c[1], 1)}
            if calls[0] % len(configs) == 0:
                cyc = calls[0] // len(configs)
                self.log(f"bench: cycle {cyc + 1}/{self.reps + 1}" + (" (warm-up, discarded)"
                                                                    if cyc == 0 else ""))
            calls[0] += 1
            r = runners[c.key]
            tok = tokens_for(c)
            e0 = self.rapl.read() if (self.rapl.available and c.kind == "tg") else None
            st0 = steal_ms()
            if c.backend == "isaforge":
                t0 = time.perf_counter()
                if c.kind == "pp":
                    r.prefill(tok, 0)
                else:
                    for pos, t in enumerate(tok):
                        r.forward(t, pos)
                dt = time.perf_counter() - t0
            else:
                dt = r.pp(tok) if c.kind == "pp" else r.tg(tok)
            s = {"tps": c.n_tokens / dt, "seconds": dt}
            st1 = steal_ms()
            if st0 is not None and st1 is not None:
                s["steal_ms"] = st1 - st0
            if c.kind == "pp":
                s["ttft_ms"] = dt * 1000
            if e0 is not None:
                s["joules_per_token"] = self.rapl.joules(e0, self.rapl.read()) / c.n_tokens
            return s

        self.log(f"bench: {len(configs)} configurations x ({self.reps} repetitions + 1 warm-up "
                 "cycle), alternating")
        samples = run_alternating(entries, self.reps, measure, warmup=1)
        for r in runners.values():
            if hasattr(r, "close"):
                r.close()
        stream = {p[1]: [x["gbps"] for x in s] for p, s in zip(probes, samples[len(configs):],
                                                                strict=True)}
        results = [self._result(c, s, limits, stream.get(c.threads))
                   for c, s in zip(configs, samples[:len(configs)], strict=True)]
        _add_ratios(results)
        skipped = []
        if self.loaded is None:
            skipped.append({"backend": "isaforge", "reason": self.isaforge_reason})
        return results, peers, skipped

    def _result(self, c: Config, s: list[dict], limits: dict | None,
                stream: list[float] | None = None) -> dict:
        tps = [x["tps"] for x in s]
        mean, std = mean_std(tps)
        info = self.info
        if c.backend == "llama.cpp" and self.gguf_path:  # its own tensor types' bytes
            info = gguf_info(Path(self.gguf_path))
        limit, kind = None, None
        if c.kind == "tg":
            bw = bandwidth_at(limits, c.threads)
            if bw:
                limit, kind = bw * 1e9 / info.weight_bytes_per_token, "bandwidth"
        else:
            tier = c.kernels.get("prefill") if c.backend == "isaforge" else _best_tier(limits)
            peak = peak_at(limits, tier, c.threads) if tier else None
            if peak:
                limit, kind = peak * 1e9 / info.ops_per_token_prefill, f"peak_int8:{tier}"
        r = {
            "backend": c.backend, "kernel": c.kernel, "kernels": c.kernels or None,
            "threads": c.threads, "test": c.test, "n_tokens": c.n_tokens, "status": "ok",
            "samples_tps": [round(x, 4) for x in tps], "mean_tps": round(mean, 4),
            "stddev_tps": round(std, 4),
            "ttft_ms": round(mean_std([x["ttft_ms"] for x in s])[0], 3) if c.kind == "pp"
            else None,
            "samples_ttft_ms": [round(x["ttft_ms"], 3) for x in s] if c.kind == "pp" else None,
            "joules_per_token": [round(x["joules_per_token"], 6) for x in s
                                 if "joules_per_token" in x] or None,
            "limit_tps": round(limit, 3) if limit else None, "limit_kind": kind,
            "fraction_of_limit": round(mean / limit, 4) if limit else None,
            "ratio_vs_llama_cpp": None,
        }
        if all("steal_ms" in x for x in s):  # the hypervisor's steal during each sample
            r["samples_steal_ms"] = [round(x["steal_ms"], 1) for x in s]
        if c.kind == "tg" and stream:  # the limit at the probe sampled between the runs
            med = statistics.median(stream)
            same = med * 1e9 / info.weight_bytes_per_token
            r.update(stream_same_run_gbps=[round(x, 3) for x in stream],
                     limit_same_run_tps=round(same, 3),
                     fraction_of_limit_same_run=round(mean / same, 4))
        return r


def _best_tier(limits: dict | None) -> str | None:
    best = None
    for r in (limits or {}).get("peak_int8", []):
        if r["gops"] and (best is None or r["gops"] > best[1]):
            best = (r["tier"], r["gops"])
    return best[0] if best else None


def _add_ratios(results: list[dict]) -> None:
    ref = {(r["threads"], r["test"]): r["mean_tps"] for r in results
           if r["backend"] == "llama.cpp"}
    for r in results:
        peer = ref.get((r["threads"], r["test"]))
        if r["backend"] == "isaforge" and peer:
            r["ratio_vs_llama_cpp"] = round(r["mean_tps"] / peer, 4)
