"""The `isaforge` command: run, quantize, info.

Text goes to stdout exactly as llama2.c's run.c prints it; statistics and errors go to
stderr. Bad flags or files give one line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import argparse
import json
import sys

from .bench import cli as bench_cli
from .types import ModelFormatError


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one clear line, exit 2
        raise UsageError(f"{self.prog}: {message}")


def _int_at_least(low: int):
    """argparse type: an integer >= low."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {v}")
        return v

    return parse


_positive_int, _nonneg_int = _int_at_least(1), _int_at_least(0)


def _build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="isaforge", description="LLM inference with per-ISA quantized kernels.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="generate text from a model (llama2.c run.c compatible)")
    r.add_argument("model", help="model file (llama2.c .bin v0/v1/v2)")
    r.add_argument("-z", dest="tokenizer", help="tokenizer file (default: beside the model)")
    r.add_argument("-t", dest="temperature", type=float, default=1.0,
                   help="temperature, >= 0 (0 = greedy; default 1.0)")
    r.add_argument("-p", dest="top_p", type=float, default=0.9,
                   help="top-p in [0, 1] (default 0.9)")
    r.add_argument("-s", dest="seed", type=int, default=0,
                   help="random seed (<= 0: from the clock, as run.c)")
    g = r.add_mutually_exclusive_group()
    g.add_argument("--steps", type=_nonneg_int, default=None,
                   help="positions to run including the prompt, as run.c's -n "
                        "(default 256; 0 = the whole context)")
    g.add_argument("-n", dest="new_tokens", type=_nonneg_int, default=None,
                   help="number of new tokens to generate (llama.cpp's -n)")
    r.add_argument("-i", dest="prompt", default="", help="prompt")
    r.add_argument("--kernel", default=None, help="force a kernel tier (see `isaforge info`)")
    r.add_argument("--threads", type=_positive_int, default=None,
                   help="threads (default: physical cores)")

    q = sub.add_parser("quantize", help="write a Q8 llama2.c v2 file from a v0/v1 file")
    q.add_argument("input")
    q.add_argument("-o", dest="output", required=True)
    q.add_argument("--group-size", type=_positive_int, default=None,
                   help="Q8 group size (default: largest power of two <= 64 dividing dim and "
                        "hidden_dim)")

    i = sub.add_parser("info", help="CPU features, kernel tiers and the kernels chosen per op")
    i.add_argument("--json", action="store_true")
    bench_cli.add_parser(sub)  # `isaforge bench`
    return p


def _cmd_run(a) -> int:
    from . import load
    from .generate import check_sampling
    from .tokenizer import safe_piece

    check_sampling(a.temperature, a.top_p)
    model = load(a.model, a.tokenizer, threads=a.threads, kernel=a.kernel)
    tok = model.tokenizer
    out = sys.stdout.buffer
    pairs = model.generate_ids(a.prompt, a.new_tokens, a.temperature, a.top_p, a.seed,
                               steps=a.steps if a.new_tokens is None else None,
                               stop_ids=(tok.bos_id,))
    for prev, nxt in pairs:
        out.write(safe_piece(tok.decode(prev, nxt)))
        out.flush()
    out.write(b"\n")
    out.flush()
    s = model.last_stats
    k = model.engine.kernels
    print(f"prompt tokens: {s.prompt_tokens}, new tokens: {s.new_tokens}, "
          f"threads: {model.engine.threads}, kernels: decode={k['decode']['tier']} "
          f"prefill={k['prefill']['tier']}", file=sys.stderr)
    print(f"prefill: {s.prefill_tps:.2f} tok/s, decode: {s.decode_tps:.2f} tok/s, "
          f"time to first token: {s.ttft_s * 1000:.1f} ms", file=sys.stderr)
    return 0


def _cmd_quantize(a) -> int:
    from .quant.q8 import quantize_model

    bar = _ProgressBar() if sys.stderr.isatty() else None
    summary = quantize_model(a.input, a.output, group_size=a.group_size,
                             progress=bar.update if bar else None,
                             log=lambda line: _log(line, bar))
    if bar:
        bar.close()
    how = "chosen automatically" if summary.chosen_automatically else "as requested"
    print(f"wrote {a.output}: Q8 group size {summary.group_size} ({how}), "
          f"{summary.n_tensors} tensors, max quantization error {summary.max_error:.6g}")
    return 0


def _log(line: str, bar) -> None:
    if bar:
        bar.clear()
    print(line, flush=True)


class _ProgressBar:
    def __init__(self, width: int = 30):
        self.width, self.last = width, ""

    def update(self, i: int, n: int) -> None:
        done = self.width * i // max(n, 1)
        self.last = f"\r[{'#' * done}{'.' * (self.width - done)}] {i}/{n}"
        sys.stderr.write(self.last)
        sys.stderr.flush()

    def clear(self) -> None:
        if self.last:
            sys.stderr.write("\r" + " " * len(self.last) + "\r")

    def close(self) -> None:
        self.clear()
        sys.stderr.flush()


def _cmd_info(a) -> int:
    from .engine import runtime_info, select_kernel
    from .settings import default_threads, getenv

    select_kernel(None)
    info = runtime_info()
    info["threads_default"] = default_threads()
    info["override"] = getenv("KERNEL") or None
    if a.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"isaforge {info['version']}")
    print(f"CPU:        {info['cpu']}")
    print(f"features:   {info['features'] or '(none detected)'}")
    if info["disabled"]:
        print(f"disabled:   {info['disabled']} (ISAFORGE_DISABLE_FEATURES)")
    if info["notes"]:
        print(f"notes:      {info['notes']}")
    print("tiers:      " + ", ".join(
        f"{t['name']} ({'yes' if t['supported'] else 'no: ' + t['reason']})"
        for t in info["tiers"]))
    for phase, label in (("decode", "decode (GEMV, M=1)"), ("prefill", "prefill (GEMM, M>1)")):
        k = info[phase]
        print(f"{label}: tier {k['tier']}: {k['q8_gemv'] if phase == 'decode' else k['q8_gemm']}, "
              f"{k['quantize']}, {k['f32_gemv']}")
    print(f"threads:    {info['threads_default']} (physical cores; --threads to change)")
    if info["override"]:
        print(f"override:   ISAFORGE_KERNEL={info['override']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    try:
        a = parser.parse_args(argv)
        return {"run": _cmd_run, "quantize": _cmd_quantize, "info": _cmd_info,
                "bench": bench_cli.main}[a.cmd](a)
    except UsageError as e:
        print(f"{e} (see --help)", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except (ModelFormatError, ValueError, OSError, RuntimeError, MemoryError) as e:
        print(f"isaforge: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
