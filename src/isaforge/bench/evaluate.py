"""`isaforge eval MODEL [--reference REF] [--text FILE]`: how far a model's next-token
distributions are from a reference's on the same text.

Both models read the same token ids (the model's tokenizer; a reference with another
vocabulary is refused) in windows of --ctx tokens (each window a fresh KV cache, scored from
its second token on). Per scored position: the model's negative log-likelihood of the next
token (perplexity = exp of their mean), the KL divergence KL(reference || model) of the two
softmax distributions (float64), and whether the two argmaxes agree. Reported: perplexity of
both, mean and 99th-percentile KL, top-1 agreement, as a table and as JSON.

The default reference is the same file loaded with --quant f32. The default text is Ambrose
Bierce's The Devil's Dictionary (1911, public domain: human-written English prose, a few verses),
from Debian's dict-devil package, which the set-up pulls (`isaforge pull devils-dictionary`, a
pinned, checksummed .deb; pulled on first use otherwise): its dictd header lines dropped, from
its preface on, the first --chars characters."""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

DEFAULT_CHARS = 40_000  # of the default text: 10,047 SmolLM2 tokens
TEXT_NAME = "devils-dictionary"  # pull.TEXTS


def clean_text(raw: str) -> str:
    """The evaluation text from the pulled file: from the preface on (the dictd header and the
    transcriber's notice before it dropped)."""
    at = raw.find("PREFACE")
    if at < 0:
        raise ValueError(f"{TEXT_NAME}: no PREFACE line; not the expected text")
    return raw[raw.rfind("\n", 0, at) + 1:]


def default_text(chars: int = DEFAULT_CHARS, pull_missing: bool = True) -> str:
    """The first `chars` characters of the default evaluation text (pulled when missing and
    `pull_missing`; FileNotFoundError otherwise)."""
    from .. import pull

    path = pull.model_path(TEXT_NAME)
    if not path.is_file() and not pull_missing:
        raise FileNotFoundError(f"{path}: not pulled (isaforge pull {TEXT_NAME})")
    path = pull.ensure_model(TEXT_NAME)
    return clean_text(path.read_text(encoding="utf-8"))[:chars]


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def score(logits: np.ndarray, ref_logits: np.ndarray, targets: np.ndarray) -> dict:
    """Per-position NLL (model, reference), KL(ref || model) and top-1 agreement of (n, vocab)
    logits predicting `targets` (n,)."""
    lp, lq = _log_softmax(logits), _log_softmax(ref_logits)
    kl = (np.exp(lq) * (lq - lp)).sum(axis=-1)
    idx = np.arange(len(targets))
    return {"nll": -lp[idx, targets], "ref_nll": -lq[idx, targets], "kl": np.maximum(kl, 0.0),
            "top1": logits.argmax(axis=-1) == ref_logits.argmax(axis=-1)}


def summarize(parts: list[dict]) -> dict:
    cat = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    return {"positions": int(len(cat["kl"])),
            "ppl": float(np.exp(cat["nll"].mean())),
            "ref_ppl": float(np.exp(cat["ref_nll"].mean())),
            "kl_mean": float(cat["kl"].mean()),
            "kl_p99": float(np.percentile(cat["kl"], 99)),
            "top1": float(cat["top1"].mean())}


def evaluate(model, reference, tokens: list[int], ctx: int, progress=None) -> dict:
    """Scores of two engines (runtime.engine.Engine) over `tokens` in windows of ctx."""
    parts = []
    windows = [tokens[i:i + ctx] for i in range(0, len(tokens) - 1, ctx)]
    windows = [w for w in windows if len(w) > 1]
    t0 = time.perf_counter()
    for i, w in enumerate(windows):
        a = model.prefill(w, 0, all_logits=True)[:-1]
        b = reference.prefill(w, 0, all_logits=True)[:-1]
        parts.append(score(a, b, np.asarray(w[1:])))
        if progress:
            done = sum(len(x) for x in windows[:i + 1])
            progress(f"\reval: {done}/{len(tokens)} tokens, {time.perf_counter() - t0:.0f} s")
    if progress:
        progress("\n")
    if not parts:
        raise ValueError("the text is shorter than two tokens")
    return summarize(parts)


def bits_per_weight(loaded) -> float:
    """Stored bits per weight of the layer matrices (values, scales, padding; not the
    classifier or the token table)."""
    from ..quant.q4 import Q4Tensor
    from ..types import LAYER_MATRICES, Q8Tensor

    bits = n = 0
    for name in LAYER_MATRICES:
        for m in getattr(loaded.weights, name):
            rows, cols = m.shape
            n += rows * cols
            if isinstance(m, Q4Tensor):
                bits += rows * m.kpad * 4 + m.s.size * 32
            elif isinstance(m, Q8Tensor):
                bits += rows * cols * 8 + m.s.size * 32
            else:
                bits += rows * cols * 32
    return bits / n


def table(rows: list[dict]) -> str:
    head = ("| model | quant | bits/weight | reference | positions | PPL | ref PPL | mean KL | "
            "p99 KL | top-1 |")
    out = [head, "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        out.append(f"| {r['model']} | {r['quant']} | {r['bits_per_weight']:.2f} | "
                   f"{r['reference']} ({r['reference_quant']}) "
                   f"| {r['positions']} | {r['ppl']:.3f} | {r['ref_ppl']:.3f} | "
                   f"{r['kl_mean']:.4f} | {r['kl_p99']:.4f} | {100 * r['top1']:.1f}% |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from ..model import load
    from ..quant.cq4 import QUANT_HELP

    p = argparse.ArgumentParser(prog="isaforge eval", description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--reference", default=None, help="reference model (default: MODEL)")
    p.add_argument("--quant", default=["auto"], nargs="+", help=f"the model's: {QUANT_HELP}; "
                   "several values evaluate each against one reference run")
    p.add_argument("--ref-quant", default="f32", help="the reference's (default f32)")
    p.add_argument("--text", default=None, help="UTF-8 text file (default: The Devil's Dictionary, "
                   f"public domain, `isaforge pull {TEXT_NAME}`)")
    p.add_argument("--chars", type=int, default=DEFAULT_CHARS,
                   help=f"characters of the text used (default {DEFAULT_CHARS})")
    p.add_argument("--ctx", type=int, default=512, help="tokens per window (default 512)")
    p.add_argument("-t", "--threads", type=int, default=None)
    p.add_argument("-z", dest="tokenizer", default=None, help="llama2.c tokenizer")
    p.add_argument("--kernel", default=None)
    p.add_argument("--json", default=None, help="also write the results as JSON here")
    a = p.parse_args(argv)
    if a.ctx < 2:
        p.error("--ctx must be >= 2")
    text = open(a.text, encoding="utf-8").read() if a.text else default_text()
    text = text[:a.chars]
    ref_path = a.reference or a.model
    log = sys.stderr.write if sys.stderr.isatty() else (lambda s: None)
    ref = load(ref_path, a.tokenizer, threads=a.threads, kernel=a.kernel, quant=a.ref_quant,
               ctx=a.ctx)
    tokens = ref.encode(text)
    ref_logits = []
    rows = []
    for q in a.quant:
        m = load(a.model, a.tokenizer, threads=a.threads, kernel=a.kernel, quant=q, ctx=a.ctx)
        if m.encode(text[:2000]) != ref.encode(text[:2000]):
            raise SystemExit("isaforge eval: the model and the reference tokenize differently")
        if not ref_logits:  # the reference's logits once, for every quant
            windows = [tokens[i:i + a.ctx] for i in range(0, len(tokens) - 1, a.ctx)]
            ref_logits = [(w, ref.engine.prefill(w, 0, all_logits=True).copy())
                          for w in windows if len(w) > 1]
        parts = []
        t0 = time.perf_counter()
        for i, (w, rl) in enumerate(ref_logits):
            parts.append(score(m.engine.prefill(w, 0, all_logits=True)[:-1], rl[:-1],
                               np.asarray(w[1:])))
            log(f"\r{q}: window {i + 1}/{len(ref_logits)}, {time.perf_counter() - t0:.0f} s")
        log("\n")
        r = summarize(parts)
        rows.append({"model": a.model, "quant": q,
                     "bits_per_weight": bits_per_weight(m.engine.model), "reference": ref_path,
                     "reference_quant": a.ref_quant, "tokens": len(tokens), "ctx": a.ctx,
                     "text": a.text or TEXT_NAME, "chars": len(text), **r})
        del m
        if a.json:  # after every row: a long run that is cut short keeps what it measured
            with open(a.json, "w") as f:
                json.dump(rows, f, indent=2)
    print(table(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


def add_parser(subparsers) -> None:
    """Register `eval` on the main CLI; everything after it is parsed by main()."""
    p = subparsers.add_parser("eval", help="perplexity, KL divergence and top-1 agreement "
                              "against a reference (default: the f32 load)", add_help=False,
                              prefix_chars="+")
    p.add_argument("eval_argv", nargs="*", help="see `isaforge eval --help`")
