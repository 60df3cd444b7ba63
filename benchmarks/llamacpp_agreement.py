"""Teacher-forced top-1 agreement between isaforge and llama.cpp on a GGUF model.

    python benchmarks/llamacpp_agreement.py [--model M.gguf] [--new 64] [-o FILE.json]

The JSON goes to benchmarks/results/<machine>/agreement.json unless -o says otherwise
({machine} in FILE: this machine's slug).

For each of 3 fixed prompts llama.cpp (llama-cpp-python) continues greedily to --new tokens;
then both engines score the whole sequence teacher-forced (one batch each) and we count, over
the positions that predict the continuation, how often isaforge's argmax equals llama.cpp's.
isaforge runs three ways: the default path ("auto": Q4_K / Q6_K / Q8_0 as stored, other types
as Q8), the fp32-activation path (read_gguf(quant="f32"): every matrix dequantized to float32)
and the Q8 path (Q8_0 kept, other types requantized to Q8 groups). The bar (BAR) is >= 97% for
the default and the fp32 paths. Wherever a path and llama.cpp disagree, the float64 numpy
reference (isaforge.reference) on the file's dequantized weights referees: its argmax is
reported per path (llama.cpp quantizes activations to 8 bits for quantized weights, so near
ties can flip there)."""

from __future__ import annotations

import argparse
import json
import platform
import sys

import numpy as np

from isaforge.bench.machine import provenance, save_path, script_command
from isaforge.formats import read_gguf, with_context
from isaforge.reference import Reference
from isaforge.runtime.engine import Engine
from isaforge.settings import default_model_path

PROMPTS = [
    "The capital of France is",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "<|im_start|>user\nGive me three tips for staying healthy.<|im_end|>\n"
    "<|im_start|>assistant\n",
]
BAR = 97.0


def llama_cpp_sequences(model: str, n_new: int, n_ctx: int, threads: int) -> tuple[list, list]:
    """Greedy continuations by llama.cpp, then its teacher-forced logits for each sequence."""
    import llama_cpp

    llm = llama_cpp.Llama(model, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                          logits_all=True, verbose=False)
    add_bos = bool(llm.metadata.get("tokenizer.ggml.add_bos_token", "true") == "true")
    seqs, scores = [], []
    for text in PROMPTS:
        ids = llm.tokenize(text.encode(), add_bos=add_bos, special=True)
        llm.reset()
        llm.eval(ids)
        for _ in range(n_new):
            llm.eval([int(np.argmax(llm.scores[llm.n_tokens - 1]))])
        seq = [int(t) for t in llm.eval_tokens]
        llm.reset()
        llm.eval(seq)  # teacher-forced, one batch, like isaforge's prefill below
        seqs.append((ids, seq, llm.detokenize(seq[len(ids):]).decode("utf-8", "replace")))
        scores.append(np.array(llm.scores[:len(seq)], np.float32))
    return seqs, scores


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(default_model_path()))
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-o", "--out", default="", metavar="FILE.json",
                    help="where the JSON goes (default benchmarks/results/<machine>/"
                    "agreement.json)")
    ap.add_argument("--conditions", default=None, help="free text stored with the results")
    a = ap.parse_args()
    out = save_path(a.out, "agreement")
    n_ctx = 256
    seqs, theirs = llama_cpp_sequences(a.model, a.new, n_ctx, a.threads)
    command = script_command("benchmarks/llamacpp_agreement.py", sys.argv[1:])
    result = {"provenance": provenance(command, a.conditions),
              "model": a.model, "new_tokens": a.new, "bar_percent_f32": BAR,
              "machine": platform.machine(), "prompts": []}
    for i, (ids, seq, text) in enumerate(seqs):
        result["prompts"].append({"prompt": PROMPTS[i], "prompt_tokens": len(ids),
                                  "continuation": text, "tokens": seq})
    totals, referees = {}, {}
    f32 = with_context(read_gguf(a.model, quant="f32"), n_ctx)
    reference = Reference(f32.config, f32.weights)
    ref_logits: dict[int, np.ndarray] = {}  # prompt -> float64 logits, made on first use
    for quant in ("auto", "f32", "q8"):
        model = f32 if quant == "f32" else with_context(read_gguf(a.model, quant=quant), n_ctx)
        engine = Engine(model, threads=a.threads)
        hits = n = 0
        referee = referees[quant] = {"isaforge": 0, "llama.cpp": 0, "neither": 0}
        for i, (ids, seq, _text) in enumerate(seqs):
            ours = engine.prefill(seq, 0, all_logits=True)
            span = slice(len(ids) - 1, len(seq) - 1)  # positions predicting the continuation
            agree = np.argmax(ours[span], 1) == np.argmax(theirs[i][span], 1)
            rel = np.abs(ours[span] - theirs[i][span]).max() / np.abs(theirs[i][span]).max()
            p = result["prompts"][i]
            p[f"agree_{quant}"] = int(agree.sum())
            p["positions"] = int(agree.size)
            p[f"max_rel_logit_diff_{quant}"] = float(rel)
            hits, n = hits + int(agree.sum()), n + agree.size
            for k in [span.start + j for j in np.flatnonzero(~agree)]:
                if i not in ref_logits:
                    ref_logits[i] = reference.logits(seq)
                pick = int(np.argmax(ref_logits[i][k]))
                who = "isaforge" if pick == int(np.argmax(ours[k])) else "llama.cpp" if \
                    pick == int(np.argmax(theirs[i][k])) else "neither"
                referee[who] += 1
            print(f"{quant:>4} prompt {i}: {agree.sum()}/{agree.size} = "
                  f"{100 * agree.mean():.1f}% top-1 agreement, max |dlogit|/max|logit| "
                  f"{rel:.3g}")
        totals[quant] = 100.0 * hits / n
        print(f"{quant:>4} total: {hits}/{n} = {totals[quant]:.2f}%; the float64 reference at "
              f"the disagreements sides with {referee}")
        del engine
    result["agreement_percent"] = totals
    result["disagreements_float64_referee_sides_with"] = referees
    result["f32_disagreements_float64_referee_sides_with"] = referees["f32"]
    result["pass_f32"] = totals["f32"] >= BAR
    result["pass_default"] = totals["auto"] >= BAR
    for q, ok in (("default (auto)", result["pass_default"]), ("fp32", result["pass_f32"])):
        print(f"{q} path {'meets' if ok else 'MISSES'} the {BAR}% bar")
    for i, p in enumerate(result["prompts"]):
        print(f"prompt {i} continuation (llama.cpp): {p['continuation'][:80]!r}")
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
