"""isaforge against llama.cpp at the model sizes people run: random-weight GGUFs at the shapes
of Llama-3.2-1B, Llama-3.2-3B and Llama-3.1-8B, quantized by llama.cpp's own quantizer to
Q4_K_M, Q4_0 and Q8_0 (its default mixture, not pure), then measured on the same file.

    python3 benchmarks/scale.py [--sizes 1b,3b,8b] [--types q4_k_m,q4_0,q8_0] [--reps 3]
                                [--threads 1,2] [--only-files] [--cold] [--skip-depth]
                                [--only-start] [--report-only]

At 135M parameters per-token overheads dominate, so a model that small says little about the
files people run; these shapes put the weights' bytes and the loader's work in front.

Files. Each model is written once as F16 with the `gguf` package (normal weights, std 0.02,
norms 1.0, fixed seed; the tokenizer and its metadata are SmolLM2's 49,152-token vocabulary,
copied from the default model's file, so the classifier is smaller than Llama 3's 128,256
rows), tensor by tensor (the 8B F16 never sits in memory), quantized with
`llama_cpp.llama_model_quantize` and cached in `<isaforge cache>/scale/`. The F16 source is
deleted after quantizing unless --keep-f16. Disk: F16 2.2 / 5.9 / 14.8 GB at 1B / 3B / 8B
(only while quantizing), then Q4_K_M + Q4_0 + Q8_0 about 2.4 / 6.7 / 16.5 GB.

Measurements, per size x type, alternating isaforge / llama.cpp (llama-cpp-python), every
measurement a fresh process:
- start-up: wall time from process start to the first generated token's byte on stdout, the
  way a user runs each (`isaforge run FILE "Hello" -n 16 -t 0 --ctx 4096`; llama-cpp-python's
  `Llama(n_ctx=4096)` and a streamed chat completion), warm page cache; with --cold also after
  dropping the page cache (root only; skipped with the reason otherwise). Peak RSS: the
  child's ru_maxrss (os.wait4).
- speed: pp512 and tg128 from an empty context (llama-bench's conventions, random tokens), one
  process per engine and thread count, n_ctx 4352 for both; at the largest thread count also
  tg128 after a 4,096-token context (llama-bench `-d 4096`) unless --skip-depth.
- decode as a fraction of the read bandwidth: weight bytes each engine reads per token (its
  own: isaforge holds non-Q8 GGUF tensors as Q8) x tokens/s over the stream probe's GB/s,
  the probe sampled between the runs (isaforge.bench.limits' buffer size).

Writes benchmarks/results/<machine>/scale.json (rows of other size x type pairs already there
are kept) and prints a markdown table. A measured process is stopped if MemAvailable falls
below --min-available-mib (default 1 GiB; the machine may be shared); the row records it
with the peak RSS it had reached.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import select
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
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


# ---------------------------------------------------------------------------------------------
# children


def mem_available_mib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


# The measured command runs under this small launcher: a forked child starts with its parent's
# high-water RSS (Linux copies it with the address space and keeps it across exec), so the
# measured process must be forked from a process that never grew; the launcher reports the
# command's own rusage.
LAUNCHER = """import json, os, signal, sys
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a SIGTERM to the group ends only the command
_, st, ru = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    json.dump({"status": st, "maxrss_kib": ru.ru_maxrss, "utime_s": ru.ru_utime,
               "stime_s": ru.ru_stime}, f)
code = os.waitstatus_to_exitcode(st)
os._exit(code if code >= 0 else 128 - code)
"""


def run_child(argv: list[str], timeout: float, env: dict | None = None,
              min_available_mib: float = MIN_AVAILABLE_MIB) -> dict:
    """Run argv as a fresh process (`env` added to the environment): wall time to its first
    stdout byte and to its exit, its peak RSS (ru_maxrss), exit status, stdout. Stopped if
    MemAvailable drops below `min_available_mib` or it outlives `timeout`: SIGTERM to its
    process group (the launcher outlives it and still reports its peak RSS), SIGKILL 5 s
    later."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    err = tempfile.TemporaryFile()
    fd_ru, ru_path = tempfile.mkstemp(prefix="scale-rusage-", suffix=".json")
    os.close(fd_ru)
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-I", "-c", LAUNCHER, ru_path, *argv],
                         stdout=subprocess.PIPE, stderr=err, env=env, start_new_session=True)
    fd = p.stdout.fileno()
    out, first, killed, low, killed_at = bytearray(), None, None, None, None
    while True:
        ready, _, _ = select.select([fd], [], [], 0.25)
        if ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            if first is None:
                first = time.perf_counter() - t0
            out += chunk
        avail = mem_available_mib()
        if avail is not None:
            low = avail if low is None else min(low, avail)
        if killed is None and avail is not None and avail < min_available_mib:
            killed = f"MemAvailable {avail:.0f} MiB < {min_available_mib:.0f} MiB"
        elif killed is None and time.perf_counter() - t0 > timeout:
            killed = f"timeout {timeout:.0f} s"
        if killed and p.poll() is None:
            now = time.perf_counter()
            sig = signal.SIGTERM if killed_at is None else signal.SIGKILL
            if killed_at is None or now - killed_at > 5:
                killed_at = now if killed_at is None else killed_at
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
    p.wait()
    wall = time.perf_counter() - t0
    p.stdout.close()
    err.seek(0)
    stderr = err.read().decode(errors="replace")
    err.close()
    try:
        ru = json.loads(Path(ru_path).read_text() or "null")
    except (OSError, json.JSONDecodeError):
        ru = None
    os.unlink(ru_path)
    return {"rc": p.returncode, "wall_s": wall, "first_byte_s": first,
            "peak_rss_mib": round(ru["maxrss_kib"] / 1024, 1) if ru else None,
            "cpu_s": round(ru["utime_s"] + ru["stime_s"], 2) if ru else None,
            "killed": killed, "min_mem_available_mib": None if low is None else round(low),
            "stdout": out.decode(errors="replace"), "stderr": stderr}


def drop_page_cache() -> str | None:
    """Empty the page cache (None), or why it cannot be (a reason)."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return None
    except OSError as e:
        return f"cannot drop the page cache: {e}"


def warm_page_cache(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 24):
            pass


def isaforge_cmd() -> list[str]:
    exe = shutil.which("isaforge")
    return [exe] if exe else [sys.executable, "-m", "isaforge"]


def child_env(engine: str, a) -> dict:
    """llama.cpp's threads meet at OpenMP barriers, and libgomp's default spin-wait slows its
    multi-thread runs by orders of magnitude whenever another process holds one of the cores,
    so on a shared machine it runs with OMP_WAIT_POLICY=passive (--omp-wait-policy)."""
    if engine == "llama.cpp" and a.omp_wait_policy != "default":
        return {"OMP_WAIT_POLICY": a.omp_wait_policy}
    return {}


def start_argv(engine: str, path: Path, threads: int) -> list[str]:
    if engine == "isaforge":
        return isaforge_cmd() + ["run", str(path), PROMPT, "-n", "16", "-t", "0", "--ctx",
                                 str(N_CTX_START), "--threads", str(threads)]
    spec = {"path": str(path), "threads": threads}
    return [sys.executable, str(Path(__file__).resolve()), "_start_llama", json.dumps(spec)]


def _start_llama(spec: dict) -> int:
    """llama-cpp-python as a user runs it: the model at n_ctx 4096, a streamed chat completion
    of PROMPT, greedy, 16 tokens; each piece printed as it comes."""
    from llama_cpp import Llama

    llm = Llama(model_path=spec["path"], n_ctx=N_CTX_START, n_batch=512,
                n_threads=spec["threads"], n_threads_batch=spec["threads"], verbose=False)
    for chunk in llm.create_chat_completion(messages=[{"role": "user", "content": PROMPT}],
                                            max_tokens=16, temperature=0.0, stream=True):
        piece = chunk["choices"][0]["delta"].get("content")
        if piece:
            sys.stdout.write(piece)
            sys.stdout.flush()
    return 0


def _speed(spec: dict) -> int:
    """One engine at one thread count in this process: load, warm up, pp, tg, and (depth)
    tg after a DEPTH-token context. Prints one JSON line."""
    from isaforge.bench.e2e import bench_tokens

    t0 = time.perf_counter()
    out: dict = {"engine": spec["engine"], "threads": spec["threads"]}
    if spec["engine"] == "isaforge":
        import isaforge
        from isaforge.bench.e2e import model_info

        m = isaforge.load(spec["path"], threads=spec["threads"], ctx=N_CTX_SPEED,
                          quant=spec["quant"])
        eng = m.engine
        vocab = m.config.vocab_size
        kt = eng.kernels
        out.update(weight_bytes_per_token=model_info(m.loaded, "").weight_bytes_per_token,
                   kv_cache=eng.kv_cache, kv_cache_bytes=eng.kv_cache_bytes,
                   kernels={"decode": kt["decode"]["tier"], "prefill": kt["prefill"]["tier"]})

        def reset():
            pass

        def pp(tokens, pos0):
            eng.prefill(tokens, pos0)

        def tg(tokens, pos0):
            for i, t in enumerate(tokens):
                eng.forward(t, pos0 + i)
    else:
        from isaforge.bench.peers import LlamaCppRunner

        r = LlamaCppRunner(spec["path"], spec["threads"], N_CTX_SPEED, 512)
        llm, vocab = r.llm, r.n_vocab

        def reset():
            llm.reset()

        def pp(tokens, pos0):
            llm.eval(tokens)

        def tg(tokens, pos0):
            for t in tokens:
                llm.eval([t])
    out["load_s"] = time.perf_counter() - t0

    def timed(fn, *args) -> float:
        t = time.perf_counter()
        fn(*args)
        return time.perf_counter() - t

    warm = bench_tokens(32, vocab, 3)  # the first calls build buffers and touch every weight
    reset()
    pp(warm, 0)
    tg(warm[:4], len(warm))
    p_tok, g_tok = bench_tokens(spec["n_prompt"], vocab, 1), bench_tokens(spec["n_gen"], vocab, 2)
    reset()
    out["pp_s"] = timed(pp, p_tok, 0)
    reset()
    out["tg_s"] = timed(tg, g_tok, 0)
    if spec["depth"]:
        ctx = bench_tokens(DEPTH, vocab, 4)
        reset()
        out["depth_prefill_s"] = timed(pp, ctx, 0)
        out["depth_tg_s"] = timed(tg, g_tok, DEPTH)
    import resource

    out["self_peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(out), flush=True)
    return 0


def speed_argv(engine: str, path: Path, threads: int, depth: bool, a) -> list[str]:
    spec = {"engine": engine, "path": str(path), "threads": threads, "depth": depth,
            "n_prompt": a.n_prompt, "n_gen": a.n_gen, "quant": a.quant}
    return [sys.executable, str(Path(__file__).resolve()), "_speed", json.dumps(spec)]


def _mib(x) -> str:
    return "?" if x is None else f"{x:.0f} MiB"


def _fail(kind: str, engine: str, threads: int, res: dict) -> dict:
    return {"kind": kind, "engine": engine, "threads": threads, "rc": res["rc"],
            "killed": res["killed"], "peak_rss_mib": res["peak_rss_mib"],
            "wall_s": round(res["wall_s"], 2), "stderr_tail": res["stderr"][-1500:]}


# ---------------------------------------------------------------------------------------------
# one size x type


def measure(size: str, typ: str, a) -> dict:
    from isaforge import _bench
    from isaforge.bench.e2e import gguf_info
    from isaforge.bench.limits import stream_bytes
    from isaforge.bench.machine import loadavg

    path = file_path(size, typ)
    top = max(a.threads)
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    row: dict = {"size": size, "model": SHAPES[size].name + " shapes",
                 "shape": asdict(SHAPES[size]), "type": typ, "file": path.name,
                 "file_bytes": path.stat().st_size,
                 "created": created, "loadavg_start": loadavg(), "reps": a.reps,
                 "threads": a.threads, "start_threads": top, "failures": []}
    info = gguf_info(path)
    row["params"] = info.params
    bpt = {"llama.cpp": info.weight_bytes_per_token}
    eng_rows = {e: {k: {"first_token_s": [], "exit_s": [], "peak_rss_mib": [], "cpu_s": []}
                    for k in ("start_warm", "start_cold")} | {
                    "speed": {str(t): {"load_s": [], "peak_rss_mib": [], "pp_tps": [],
                                       "tg_tps": [], "depth_prefill_tps": [],
                                       "depth_tg_tps": []} for t in a.threads}}
                for e in ENGINES}
    stream = {str(t): [] for t in a.threads}
    nbytes = stream_bytes()
    cold_reason = None
    log(f"{path.name}: {path.stat().st_size / 1e9:.2f} GB, warming the page cache")
    warm_page_cache(path)
    for rep in range(a.reps):
        for kind in (["start_warm", "start_cold"] if a.cold else ["start_warm"]):
            for e in ENGINES:
                if kind == "start_cold":
                    cold_reason = drop_page_cache()
                    if cold_reason:
                        log(cold_reason)
                        continue
                res = run_child(start_argv(e, path, top), a.child_timeout, child_env(e, a),
                                a.min_available_mib)
                ok = res["rc"] == 0 and not res["killed"] and res["first_byte_s"] is not None
                log(f"rep {rep + 1}/{a.reps} {kind} {e}: first token "
                    f"{res['first_byte_s'] or float('nan'):.2f} s, exit {res['wall_s']:.2f} s, "
                    f"peak RSS {_mib(res['peak_rss_mib'])}" + ("" if ok else " FAILED"))
                if not ok:
                    row["failures"].append(_fail(kind, e, top, res))
                    continue
                d = eng_rows[e][kind]
                d["first_token_s"].append(round(res["first_byte_s"], 3))
                d["exit_s"].append(round(res["wall_s"], 3))
                d["peak_rss_mib"].append(res["peak_rss_mib"])
                d["cpu_s"].append(res["cpu_s"])
                if e == "isaforge" and "run_stats" not in row:
                    row["run_stats"] = res["stderr"].strip().splitlines()[-3:]
                if rep == 0 and kind == "start_warm":
                    row.setdefault("first_output", {})[e] = res["stdout"][:200]
            if kind == "start_cold":
                warm_page_cache(path)
        for t in [] if a.only_start else a.threads:
            depth = t == top and not a.skip_depth
            for e in ENGINES:
                res = run_child(speed_argv(e, path, t, depth, a), a.child_timeout,
                                child_env(e, a), a.min_available_mib)
                line = next((x for x in reversed(res["stdout"].splitlines())
                             if x.startswith("{")), None)
                if res["rc"] != 0 or res["killed"] or line is None:
                    log(f"rep {rep + 1}/{a.reps} speed {e} {t}t: FAILED "
                        f"({res['killed'] or res['rc']})")
                    row["failures"].append(_fail("speed", e, t, res))
                    continue
                r = json.loads(line)
                if e == "isaforge":
                    bpt["isaforge"] = r["weight_bytes_per_token"]
                    row["isaforge_engine"] = {k: r[k] for k in ("kv_cache", "kv_cache_bytes",
                                                                 "kernels")}
                d = eng_rows[e]["speed"][str(t)]
                d["load_s"].append(round(r["load_s"], 3))
                d["peak_rss_mib"].append(res["peak_rss_mib"])
                d["pp_tps"].append(round(a.n_prompt / r["pp_s"], 3))
                d["tg_tps"].append(round(a.n_gen / r["tg_s"], 3))
                if depth:
                    d["depth_prefill_tps"].append(round(DEPTH / r["depth_prefill_s"], 3))
                    d["depth_tg_tps"].append(round(a.n_gen / r["depth_tg_s"], 3))
                log(f"rep {rep + 1}/{a.reps} speed {e} {t}t: load {r['load_s']:.1f} s, "
                    f"pp{a.n_prompt} {d['pp_tps'][-1]:.2f} t/s, "
                    f"tg{a.n_gen} {d['tg_tps'][-1]:.2f} t/s"
                    + (f", pp{DEPTH} {d['depth_prefill_tps'][-1]:.2f} t/s, tg{a.n_gen}@{DEPTH} "
                       f"{d['depth_tg_tps'][-1]:.2f} t/s" if depth else "")
                    + f", peak RSS {_mib(res['peak_rss_mib'])}")
            for t2 in a.threads:  # the bandwidth probe in the same alternation as the runs
                stream[str(t2)].append(round(_bench.stream_read(nbytes, t2, 1), 3))
    row.update(engines=eng_rows, weight_bytes_per_token=bpt, stream_gbps=stream,
               stream_bytes=nbytes, cold=(cold_reason or "measured") if a.cold else None,
               loadavg_end=loadavg())
    row["summary"] = summarize(row)
    return row


def _mean(xs):
    return round(statistics.fmean(xs), 3) if xs else None


def _std(xs):
    return round(statistics.stdev(xs), 3) if len(xs) > 1 else (0.0 if xs else None)


def _ratio(x, y):
    return round(x / y, 3) if x is not None and y else None


BANDWIDTH_METHOD = (
    "tg t/s x the engine's weight bytes per token / the best stream probe reading "
    "(isaforge._bench.stream_read, one pass over a buffer of 4x the last-level cache, one "
    "sample after every speed pair) at that thread count; decode re-reads the same weights "
    "every token, so where the last-level cache keeps a sizeable part of them the fraction "
    "can exceed 1")


def summarize(row: dict) -> dict:
    """Means (stddev over processes), isaforge / llama.cpp ratios, fractions of bandwidth
    (over the best stream probe reading, as isaforge.bench.limits takes a limit: what the
    machine can reach; the median is kept beside it)."""
    e = row["engines"]
    s: dict = {}
    for kind in ("start_warm", "start_cold"):
        fi, fl = (e[x][kind]["first_token_s"] for x in ENGINES)
        if fi or fl:
            s[kind + "_first_token_s"] = {"isaforge": _mean(fi), "llama.cpp": _mean(fl),
                                          "ratio": _ratio(_mean(fi), _mean(fl))}
    ri, rl = (max(e[x]["start_warm"]["peak_rss_mib"], default=None) for x in ENGINES)
    s["start_peak_rss_mib"] = {"isaforge": ri, "llama.cpp": rl, "ratio": _ratio(ri, rl)}
    for t in map(str, row["threads"]):
        for test in ("pp_tps", "tg_tps", "depth_tg_tps", "depth_prefill_tps"):
            xi, xl = (e[x]["speed"][t][test] for x in ENGINES)
            if not (xi or xl):
                continue
            s[f"{test}_{t}t"] = {"isaforge": _mean(xi), "isaforge_std": _std(xi),
                                 "llama.cpp": _mean(xl), "llama.cpp_std": _std(xl),
                                 "ratio": _ratio(_mean(xi), _mean(xl))}
        probe = row["stream_gbps"][t]
        bw = max(probe) if probe else None
        frac = {}
        for x in ENGINES:
            tps, b = _mean(e[x]["speed"][t]["tg_tps"]), row["weight_bytes_per_token"].get(x)
            frac[x] = round(tps * b / (bw * 1e9), 4) if tps and b and bw else None
        s[f"tg_fraction_of_bandwidth_{t}t"] = dict(
            frac, stream_gbps_best=bw,
            stream_gbps_median=round(statistics.median(probe), 3) if probe else None)
    return s


# ---------------------------------------------------------------------------------------------
# machine, document, table


def machine_slug() -> str:
    """Short name of this machine, `<microarchitecture>-<widest int8 ISA>`. Every benchmark's
    results folder should come from isaforge.bench.machine.machine_slug; this fallback makes
    the same name where the installed package lacks it."""
    try:
        from isaforge.bench.machine import machine_slug as slug

        return slug()
    except ImportError:
        pass
    c = cpuinfo()
    intel = {85: "skylake-x", 106: "icelake-x", 143: "sapphirerapids", 207: "emeraldrapids",
             173: "graniterapids"}
    vendor, fam, model = c.get("vendor_id"), c.get("cpu family"), c.get("model")
    if vendor == "GenuineIntel" and fam == 6:
        arch = intel.get(model, f"intel-f{fam}m{model}")
    elif vendor == "AuthenticAMD" and fam is not None:
        zen4 = any(model in r for r in (range(0x10, 0x20), range(0x60, 0x80), range(0xA0, 0xB0)))
        arch = {23: "zen2", 25: "zen4" if zen4 else "zen3", 26: "zen5"}.get(fam, f"amd-f{fam}")
    else:
        arch = os.uname().machine
    flags = set(c.get("flags", []))
    isa = next((n for f, n in (("amx_int8", "amx"), ("avx512f", "avx512"), ("avx2", "avx2"),
                               ("asimd", "neon")) if f in flags), "base")
    return f"{arch}-{isa}"


def cpuinfo() -> dict:
    out: dict = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        k, sep, v = line.partition(":")
        k, v = k.strip(), v.strip()
        if not sep or k in out:
            continue
        if k in ("cpu family", "model"):
            try:
                out[k] = int(v)
            except ValueError:
                pass
        elif k in ("flags", "Features"):
            out["flags"] = v.split()
        elif k in ("vendor_id", "model name"):
            out[k] = v
    return out


def script_commit() -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), "rev-parse",
                            "HEAD"], capture_output=True, text=True, timeout=5)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def document(rows: list[dict], a, argv: list[str]) -> dict:
    import isaforge
    from isaforge.bench.machine import loadavg, machine_info
    from isaforge.bench.peers import llama_cpp_status

    m = machine_info()
    c = cpuinfo()
    m["cpuinfo"] = {"vendor": c.get("vendor_id"), "model_name": c.get("model name"),
                    "family": c.get("cpu family"), "model": c.get("model"),
                    "flags": c.get("flags", [])}
    try:
        m["mem_total_mib"] = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20
    except (ValueError, OSError):
        pass
    peer = llama_cpp_status()
    command = "python3 benchmarks/scale.py " + " ".join(shlex.quote(x) for x in argv)
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return {
        "schema": "isaforge-scale/1",
        # what every results file carries (bench.schema.json's provenance definition)
        "provenance": {"machine": machine_slug(), "command": command,
                       "commit": m.get("git_commit"), "dirty": m.get("git_dirty"),
                       "created": created, "conditions": a.conditions},
        "command": command,
        "created": created,
        "script_commit": script_commit(),
        "isaforge": {"file": isaforge.__file__, "commit": m.get("git_commit"),
                     "dirty": m.get("git_dirty"), "cli": isaforge_cmd(), "quant": a.quant},
        "llama_cpp": peer,
        "machine_slug": machine_slug(),
        "machine": m,
        "conditions": {"text": a.conditions, "nice": os.nice(0),
                       "llama_cpp_env": child_env("llama.cpp", a),
                       "page_cache": "warm (the file read once before the runs)"
                       + ("; cold start-up after drop_caches" if a.cold else "")},
        "method": {
            "files": f"random normal(0, {STD}) weights, norms 1.0, seed {SEED}; F16 written "
                     "with gguf, quantized by llama_cpp.llama_model_quantize (pure=False); "
                     f"tokenizer and vocabulary from {VOCAB_SOURCE}",
            "start": f"wall time from process start to the first byte of generated text on "
                     f"stdout; isaforge: `isaforge run FILE {PROMPT!r} -n 16 -t 0 --ctx "
                     f"{N_CTX_START} --threads T`; llama.cpp: llama-cpp-python Llama(n_ctx="
                     f"{N_CTX_START}) and a streamed create_chat_completion (16 tokens, "
                     f"temperature 0); peak RSS = the child's ru_maxrss",
            "speed": f"one process per engine and thread count, n_ctx {N_CTX_SPEED} for both; "
                     f"after a 32-token warm-up, pp{a.n_prompt} and tg{a.n_gen} from an empty "
                     f"context, random tokens (isaforge.bench.e2e.bench_tokens); at the largest "
                     f"thread count tg{a.n_gen} after a {DEPTH}-token context; isaforge through "
                     f"isaforge.load + Engine.prefill/forward, llama.cpp through "
                     f"isaforge.bench.peers.LlamaCppRunner (Llama.eval)",
            "bandwidth": BANDWIDTH_METHOD,
            "order": "per repetition: start-up isaforge, llama.cpp; then per thread count "
                     "speed isaforge, llama.cpp, and a stream probe sample",
            "ratio": "isaforge / llama.cpp (time and RSS: > 1 means isaforge takes more; t/s: "
                     "> 1 means isaforge is faster)",
        },
        "loadavg_end": loadavg(),
        "rows": rows,
    }


def _cell(d: dict | None, key: str = "isaforge", fmt: str = "{:.1f}") -> str:
    if not d:
        return "-"
    f = lambda v: "-" if v is None else fmt.format(v)  # noqa: E731
    return f"{f(d.get('isaforge'))} / {f(d.get('llama.cpp'))}"


def table(doc: dict) -> str:
    rows = doc["rows"]
    threads = sorted({t for r in rows for t in r["threads"]})
    head = ["model", "type", "first token s (isf / llama / ratio)",
            "peak RSS MiB (isf / llama / ratio)"]
    head += [f"pp512 {t}t" for t in threads] + [f"tg128 {t}t" for t in threads]
    head += ["tg128 @4096", "tg % of read bw " + "/".join(f"{t}t" for t in threads)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        s = r["summary"]
        st, rss = s.get("start_warm_first_token_s"), s.get("start_peak_rss_mib")
        cells = [r["model"].replace(" shapes", ""), r["type"].upper(),
                 (_cell(st, fmt="{:.2f}") + f" / {st['ratio']}") if st else "-",
                 (_cell(rss, fmt="{:.0f}") + f" / {rss['ratio']}") if rss else "-"]
        cells += [_cell(s.get(f"pp_tps_{t}t")) for t in threads]
        cells += [_cell(s.get(f"tg_tps_{t}t"), fmt="{:.2f}") for t in threads]
        dk = next((k for k in (f"depth_tg_tps_{t}t" for t in reversed(threads)) if k in s), None)
        cells.append(_cell(s.get(dk), fmt="{:.2f}") if dk else "-")
        fr = []
        for t in threads:
            f = s.get(f"tg_fraction_of_bandwidth_{t}t") or {}
            fr.append(_cell({k: (v * 100 if isinstance(v, float) else v) for k, v in f.items()},
                            fmt="{:.0f}%"))
        cells.append("; ".join(fr))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def results_path(a) -> Path:
    if a.out:
        return Path(a.out)
    return Path(__file__).resolve().parent / "results" / machine_slug() / "scale.json"


def save(rows: list[dict], a, argv: list[str]) -> dict:
    """Write the document; rows of other size x type pairs already in the file stay."""
    path = results_path(a)
    old = []
    if path.exists():
        try:
            old = json.loads(path.read_text()).get("rows", [])
        except (OSError, json.JSONDecodeError):
            old = []
    mine = {(r["size"], r["type"]) for r in rows}
    keep = [r for r in old if (r["size"], r["type"]) not in mine]
    order = {k: i for i, k in enumerate((s, t) for s in SHAPES for t in FTYPES)}
    allrows = sorted(keep + rows, key=lambda r: order.get((r["size"], r["type"]), 99))
    doc = document(allrows, a, argv)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.rename(path)
    return doc


def _list(choices):
    def parse(text: str) -> list[str]:
        vals = [x.strip().lower() for x in text.split(",") if x.strip()]
        bad = [v for v in vals if v not in choices]
        if not vals or bad:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of "
                                             f"{', '.join(choices)}, got {text!r}")
        return list(dict.fromkeys(vals))
    return parse


def _ints(text: str) -> list[int]:
    try:
        vals = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers, got {text!r}") from None
    if not vals or vals[0] < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return vals


def main(argv: list[str]) -> int:
    if argv[:1] == ["_speed"]:
        return _speed(json.loads(argv[1]))
    if argv[:1] == ["_start_llama"]:
        return _start_llama(json.loads(argv[1]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=_list(list(SHAPES)), default=list(SHAPES))
    ap.add_argument("--types", type=_list(list(FTYPES)), default=list(FTYPES))
    ap.add_argument("--reps", type=int, default=3, help="processes per engine and test")
    ap.add_argument("--threads", type=_ints, default=[1, 2])
    ap.add_argument("-p", dest="n_prompt", type=int, default=512)
    ap.add_argument("-n", dest="n_gen", type=int, default=128)
    ap.add_argument("--quant", default="q8", help="isaforge's --quant (default q8, its default)")
    ap.add_argument("--only-files", action="store_true", help="make the files, measure nothing")
    ap.add_argument("--keep-f16", action="store_true", help="keep the F16 source files")
    ap.add_argument("--cold", action="store_true",
                    help="also measure start-up after dropping the page cache (root)")
    ap.add_argument("--skip-depth", action="store_true", help=f"no tg after {DEPTH} tokens")
    ap.add_argument("--only-start", action="store_true",
                    help="measure start-up and peak RSS only (no pp / tg)")
    ap.add_argument("--omp-wait-policy", choices=("passive", "active", "default"),
                    default="passive", help="OMP_WAIT_POLICY of llama.cpp's processes "
                    "(default passive; default: leave it unset)")
    ap.add_argument("--child-timeout", type=float, default=3600.0)
    ap.add_argument("--min-available-mib", type=float, default=MIN_AVAILABLE_MIB,
                    help="stop a measured process when MemAvailable falls below this (MiB; "
                    f"default {MIN_AVAILABLE_MIB}): the machine may be shared")
    ap.add_argument("--conditions", default=None, help="free text stored with the results")
    ap.add_argument("--out", default=None, help="results file (default benchmarks/results/"
                    "<machine>/scale.json)")
    ap.add_argument("--report-only", action="store_true",
                    help="measure nothing: recompute the summaries of the results file and "
                    "print its table")
    a = ap.parse_args(argv)
    if a.reps < 1:
        ap.error("--reps must be >= 1")
    if a.report_only:
        doc = json.loads(results_path(a).read_text())
        for row in doc["rows"]:
            row["summary"] = summarize(row)
        doc["method"]["bandwidth"] = BANDWIDTH_METHOD
        results_path(a).write_text(json.dumps(doc, indent=1) + "\n")
        sys.stdout.write(table(doc))
        return 0
    for size in a.sizes:
        make_files(size, a.types, a.keep_f16)
    if a.only_files:
        for size in a.sizes:
            for t in a.types:
                p = file_path(size, t)
                print(f"{p}  {p.stat().st_size / 1e9:.2f} GB")
        return 0
    rows = []
    doc = None
    for size in a.sizes:
        for t in a.types:
            rows.append(measure(size, t, a))
            doc = save(rows, a, argv)
            log(f"saved {results_path(a)}")
    sys.stdout.write(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
