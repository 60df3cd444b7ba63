"""The committed results, one folder per machine (benchmarks/results/<slug>/, one file per
benchmark), and the pages generated from them: the README's short performance table and the
per-machine tables of docs/performance.md.

The README shows one machine: the one whose scale.json (benchmarks/scale.py: the model sizes
people run, against llama.cpp) is the newest by its `created` time; where no machine has one,
the one whose e2e.json is (a new end-to-end run saved with a bare `--save` then moves the
README to the machine it ran on). A/B records (the `ab/` folder of a machine) are listed, not
tabled."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from .report import (
    _README_WIDTH,
    BEGIN,
    END,
    UPDATE_COMMAND,
    e2e_rows,
    limits_lines,
    readme_block,
    replace_block,
)
from .scale import readme_scale_block, scale_notes, scale_table
from .schema import SCHEMA_ID

DOC_BEGIN, DOC_END = "<!-- results:begin -->", "<!-- results:end -->"
# the order of a machine's sections; a file of another name still gets its provenance line
ORDER = ["scale", "e2e", "kernels", "kernels_cold", "quant", "peak_rss", "decode_profile",
         "prefill_ttft", "serve_load", "grammar_cost", "agreement", "eval"]
WRAP = 100


def load(results: Path) -> dict[str, dict[str, dict]]:
    """{slug: {name: document}} of every results folder (A/B records under "ab/<name>")."""
    out: dict[str, dict[str, dict]] = {}
    for d in sorted(p for p in results.iterdir() if p.is_dir()) if results.is_dir() else []:
        docs = {}
        for f in sorted(d.rglob("*.json")):
            docs[f.relative_to(d).with_suffix("").as_posix()] = json.loads(f.read_text())
        if docs:
            out[d.name] = docs
    return out


def provenance(doc: dict) -> dict:
    """machine, command, commit, created (or committed) and conditions of a results file: a
    bench document's own fields, or the `provenance` object the other files carry."""
    if doc.get("schema") == SCHEMA_ID:
        m = doc["machine"]
        return {"machine": m.get("slug"), "command": doc["command"],
                "commit": m.get("git_commit"), "dirty": m.get("git_dirty"),
                "created": doc.get("created"),
                "conditions": doc.get("conditions")}
    return doc.get("provenance") or {}


def readme_source(results: dict[str, dict[str, dict]]) -> tuple[str, str] | None:
    """(machine, "scale" or "e2e") of the README's block: the newest scale.json (by its
    created time), else the newest e2e.json; None when there is neither."""
    for name in ("scale", "e2e"):
        dated = [(provenance(docs[name]).get("created") or docs[name].get("created") or "",
                  slug) for slug, docs in results.items() if name in docs]
        if dated:
            return max(dated)[1], name
    return None


def readme_machine(results: dict[str, dict[str, dict]]) -> str | None:
    """The README's machine (readme_source's)."""
    src = readme_source(results)
    return src[0] if src else None


def _when(p: dict) -> str:
    t = p.get("created")
    if t:
        return t[:16].replace("T", " ") + " UTC"
    return f"committed {p['committed'][:10]}" if p.get("committed") else "time not recorded"


def provenance_line(slug: str, name: str, doc: dict) -> str:
    p = provenance(doc)
    commit = (p.get("commit") or "unknown")[:12] + ("+dirty" if p.get("dirty") else "")
    parts = [f"Machine `{slug}`, commit `{commit}`, {_when(p)}"]
    if p.get("conditions"):
        parts.append(f"conditions: {p['conditions']}")
    if p.get("recovered"):
        parts.append(f"recovered after the run: {p['recovered']}")
    text = "; ".join(parts) + f". Command: `{p.get('command', '?')}`."
    return _fill(f"[{name}.json](../../benchmarks/results/{slug}/{name}.json): {text}")


def _fill(text: str, width: int = WRAP) -> str:
    return textwrap.fill(text, width=width, break_long_words=False, break_on_hyphens=False)


def _table(head: list[str], rows: list[list[str]], left: int = 1) -> list[str]:
    align = ["---"] * left + ["---:"] * (len(head) - left)
    return (["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |"]
            + ["| " + " | ".join(r) + " |" for r in rows])


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


# ---- end to end ----

def _tps(r: dict | None, digits: int = 1) -> str:
    return "-" if r is None else f"{r['mean_tps']:.{digits}f} ± {r['stddev_tps']:.{digits}f}"


def _ratios(tests: list[str], by: dict) -> str:
    vals = [by.get(t, {}).get("ratio_vs_llama_cpp") for t in tests]
    return "-" if all(v is None for v in vals) else " / ".join(
        "-" if v is None else f"{v:.2f}x" for v in vals)


def e2e_table(doc: dict) -> list[str]:
    tests, rows = e2e_rows(doc)
    peer = any(b == "llama.cpp" for b, _, _, _ in rows)
    head = ["backend", "kernel", "threads"]
    for t in tests:
        head += [f"{t} t/s", "% of limit"] + (["TTFT ms"] if t.startswith("pp") else [])
    if peer:
        head.append("vs llama.cpp " + " / ".join(tests))
    body = []
    for b, k, th, by in rows:
        row = [b, k, str(th)]
        for t in tests:
            r = by.get(t)
            row += [_tps(r), _pct(r and r.get("fraction_of_limit"))]
            if t.startswith("pp"):
                row.append("-" if not r or r.get("ttft_ms") is None else f"{r['ttft_ms']:.0f}")
        if peer:
            row.append(_ratios(tests, by))
        body.append(row)
    return _table(head, body, left=2)


def e2e_notes(doc: dict) -> list[str]:
    m, s = doc["model"], doc.get("settings", {})
    out = [f"Model {m['name']} ({m['params'] / 1e6:.1f} M parameters, "
           f"{m['weight_bytes_per_token'] / 2**20:.1f} MiB of weights read per decoded token), "
           f"weights held as {s.get('quant', 'q8')}, KV cache {s.get('kv_cache', 'f32')}; "
           f"{s.get('reps')} repetitions after a warm-up cycle, configurations alternating. "
           "Limits: decode = read bandwidth ÷ weight bytes per token, prefill = the tier's "
           "peak int8 rate ÷ matmul ops per token."]
    out = [_fill(out[0]), ""]
    if doc.get("limits"):
        out += [_fill(f"- {x}.").replace("\n", "\n  ") for x in limits_lines(doc)]
    return out


# ---- kernels ----

def _fmt(r: dict) -> str:
    return f"{r['format']} ({r.get('codebook_mode')})" if r.get("format") else \
        "q8" if r["op"].startswith("q8_") else "-"


def kernel_table(doc: dict) -> list[str]:
    """One row per (op, format, M), one column per tier: GOP/s over the model's matrix shapes
    (their ops ÷ their median times) and, hot, the % of the tier's peak int8 rate (time at
    the limit ÷ time taken); cold, GB/s and the % of the 1-thread read stream."""
    cold = bool(doc.get("settings", {}).get("cold"))
    stream = next((b["gbps"] for b in (doc.get("limits") or {}).get("bandwidth", [])
                   if b["threads"] == 1), None)
    acc: dict = {}
    for r in doc["kernels"]:
        if r["status"] != "ok" or not r.get("ops_per_call") or not r.get("median_gops"):
            continue
        t = r["ops_per_call"] / (r["median_gops"] * 1e9)
        a = acc.setdefault((r["op"], _fmt(r), r["M"]), {}).setdefault(r["tier"], [0, 0.0, 0, 0.0])
        a[0] += r["ops_per_call"]
        a[1] += t
        a[2] += r.get("bytes_per_call") or 0
        a[3] += r["ops_per_call"] / (r["limit_gops"] * 1e9) if r.get("limit_gops") else 0.0
    tiers = list(dict.fromkeys(r["tier"] for r in doc["kernels"] if r["status"] == "ok"))
    body = []
    for (op, fmt, m), by in acc.items():
        row = [op, fmt, str(m)]
        for tier in tiers:
            if tier not in by:
                row.append("-")
                continue
            ops, t, nbytes, at_limit = by[tier]
            if cold:
                gbps = nbytes / t / 1e9
                row.append(f"{gbps:.1f} GB/s" + (f" ({100 * gbps / stream:.0f}%)" if stream
                                                   else ""))
            else:
                row.append(f"{ops / t / 1e9:.1f}" + (f" ({100 * at_limit / t:.0f}%)"
                                                     if at_limit else ""))
        body.append(row)
    return _table(["op", "format", "M"] + tiers, body, left=2)


def kernel_notes(doc: dict) -> list[str]:
    s = doc.get("settings", {})
    what = ("cold: the weights rotate over copies larger than the last-level cache; GB/s and, "
            "in brackets, the % of the 1-thread read stream" if s.get("cold") else
            "hot: the weights may stay in cache; GOP/s and, in brackets, the % of the tier's "
            "peak int8 rate")
    return [_fill(f"{doc['model']['name']}, 1 thread, {s.get('reps')} samples per tier, "
                  f"tiers alternating; {what}. Each row sums the model's matrix shapes "
                  f"(ops ÷ median time per call). Per-shape rows: `isaforge bench report "
                  f"FILE.json`.")]


# ---- the scripts' files ----

def quant_table(doc: dict) -> list[str]:
    threads = sorted({r["threads"] for r in doc["results"]})
    by: dict = {}
    for r in doc["results"]:
        by.setdefault(r["engine"], {})[r["threads"]] = r
    test = doc["results"][0]["test"] if doc["results"] else "tg"
    body = [[e] + [_tps(v.get(t)) for t in threads] for e, v in by.items()]
    return _table(["engine", *[f"{test} t/s, {t} thr" for t in threads]], body)


def peak_rss_table(doc: dict) -> list[str]:
    body = []
    for label, peaks in doc["peaks_mib"].items():
        s = sorted(peaks)
        body.append([label, f"{s[len(s) // 2]:.1f}", f"{s[0]:.1f}-{s[-1]:.1f}", str(len(s))])
    return [_fill(f"One generation of {doc['n']} tokens at context {doc['ctx']}, each run its "
                  f"own process (ru_maxrss)."), ""] + _table(
        ["run", "peak RSS MiB (median)", "min-max", "runs"], body)


def decode_profile_table(doc: dict) -> list[str]:
    phases = ("matmul", "attention", "elementwise", "wait", "other")
    body = []
    for run in doc["runs"]:
        cpu = run["wall_s"] * run["threads"]
        share = {p: sum(t[f"{p}_s"] for t in run["per_thread"]) / cpu for p in phases}
        lim = run.get("limit_steps_per_s")
        body.append([str(run["threads"]), f"{run['steps_per_s']:.1f}",
                     "-" if not lim else f"{lim:.1f}",
                     "-" if not lim else f"{100 * run['steps_per_s'] / lim:.1f}",
                     *[f"{100 * share[p]:.1f}" for p in phases],
                     f"{run.get('matmul_gbps_per_thread') or 0:.1f}",
                     f"{run.get('stream_gbps_per_thread') or 0:.1f}"])
    return [_fill(f"{doc['model']} held as {doc['quant']}: where a decode step's time goes "
                  f"(perf cpu-clock samples at {doc['hz']} Hz, % of the threads' wall time); "
                  "matmul GB/s: weight bytes per second of matmul time per thread, against "
                  "the read stream per thread."), ""] + _table(
        ["threads", "steps/s", "limit", "% of limit", *[f"{p} %" for p in phases],
         "matmul GB/s/thr", "stream GB/s/thr"], body)


def prefill_ttft_table(doc: dict) -> list[str]:
    body = [[r["tier"], r["attention"], f"{r['token_by_token_s']:.2f}", f"{r['chunked_s']:.2f}",
             f"{r['speedup']:.2f}x", "yes" if r["same_first_token"] else "no"]
            for r in doc["results"]]
    return [_fill(f"Time to first token of a {doc['prompt']}-token prompt, {doc['threads']} "
                  f"threads, ubatch {doc['ubatch']}, KV cache {doc['kv']}, random Q8 weights "
                  "at SmolLM2-135M's shapes."), ""] + _table(
        ["tier", "attention", "token by token s", "chunked s", "speedup", "same first token"],
        body, left=2)


def serve_load_table(doc: dict) -> list[str]:
    body = []
    for server, runs in doc["runs"].items():
        for r in runs:
            body.append([server, str(r["streams"]), f"{r['aggregate_tok_s']:.1f}",
                         f"{1000 * r['ttft_p50_s']:.0f}", f"{1000 * r['ttft_p99_s']:.0f}",
                         f"{r['stream_decode_tok_s']:.1f}"])
    return [_fill(f"{Path(doc['model']).name}: concurrent streaming completions of "
                  f"{doc['max_tokens']} tokens each, {doc['threads']} threads, context "
                  f"{doc['ctx_per_slot']} per slot, best of {doc['rounds']} rounds."), ""] + \
        _table(["server", "streams", "aggregate tok/s", "TTFT p50 ms", "TTFT p99 ms",
                "per-stream tok/s"], body)


def grammar_cost_table(doc: dict) -> list[str]:
    """A row per configuration of benchmarks/grammar_cost.py, then the plain rows' speed
    beside constrained rows against alone in a batch of the same size."""
    body = [[r["label"], f"{r['tok_s']:.1f}", f"{r['tok_s_row']:.1f}",
             "-" if r["mask_us_per_token"] is None else f"{r['mask_us_per_token']:.0f}",
             _pct(r["mask_share"])] for r in doc["rows"]]
    m = doc["plain_alone_vs_beside"]
    head = _fill(f"{doc['model']} ({doc['vocab_size']:,}-token vocabulary): every row decodes "
                 f"{doc['tokens']} tokens in the batch scheduler, {doc['threads']} threads; the "
                 "constrained rows follow a JSON schema that cannot end within the budget; the "
                 "mask is llguidance's token mask applied to the logits plus the matcher's "
                 f"advance; median of {doc['reps']} runs, configurations alternating. Compiling "
                 f"the schema: {doc['compile_ms']:.0f} ms (the vocabulary's first use included).")
    mixed = _fill(f"Plain rows beside constrained ones ({m['beside']}): "
                  f"{m['plain_tok_s_row_beside']:.1f} tok/s a row, against "
                  f"{m['plain_tok_s_row_alone']:.1f} alone ({m['alone']}, the same batch "
                  f"size): {100 * m['ratio']:.0f} %.")
    return [head, ""] + _table(["rows", "tok/s, all rows", "tok/s a row",
                                "mask µs per constrained token", "mask share %"], body) + \
        ["", mixed]


def agreement_table(doc: dict) -> list[str]:
    pos = sum(p["positions"] for p in doc["prompts"])
    a = doc["agreement_percent"]
    refs = doc.get("disagreements_float64_referee_sides_with") or {
        "f32": doc.get("f32_disagreements_float64_referee_sides_with", {})}
    paths = [q for q in ("auto", "f32", "q8") if q in a]
    return [_fill(f"Teacher-forced top-1 agreement with llama.cpp on {Path(doc['model']).name}, "
                  f"{len(doc['prompts'])} prompts, {pos} positions; where a path disagrees, "
                  "the float64 reference on the file's dequantized weights referees "
                  f"(bar {doc['bar_percent_f32']:.0f} %)."), ""] + _table(
        ["path (--quant)", "top-1 agreement %", "referee sides with"],
        [[q + (" (default)" if q == "auto" else ""), f"{a[q]:.2f}",
          ", ".join(f"{k} {v}" for k, v in refs[q].items()) if q in refs else "-"]
         for q in paths])


def eval_table(doc: dict) -> list[str]:
    rows = doc["rows"]
    r0 = rows[0]
    body = [[r["quant"], f"{r['bits_per_weight']:.2f}", f"{r['ppl']:.2f}", f"{r['kl_mean']:.4f}",
             f"{r['kl_p99']:.3f}", f"{100 * r['top1']:.1f}"] for r in rows]
    return [_fill(f"{Path(r0['model']).name} against its {r0['reference_quant']} load: "
                  f"{r0['positions']} positions of {r0['text']} ({r0['chars']} characters), "
                  f"windows of {r0['ctx']} tokens; the reference's perplexity is "
                  f"{r0['ref_ppl']:.2f}."), ""] + _table(
        ["quant", "bits/weight", "perplexity", "mean KL", "KL p99", "top-1 %"], body)


TITLES = {"e2e": "End to end", "kernels": "Kernels, hot", "kernels_cold": "Kernels, cold",
          "scale": "Llama 3 sizes against llama.cpp", "quant": "Weight formats, decode",
          "peak_rss": "Peak RSS",
          "decode_profile": "Decode profile", "prefill_ttft": "Prefill, time to first token",
          "serve_load": "Server load", "grammar_cost": "Structured output cost",
          "agreement": "Agreement with llama.cpp",
          "eval": "Quality against the f32 reference"}


def _kind(name: str) -> str | None:
    return next((k for k in sorted(ORDER, key=len, reverse=True)
                 if name == k or name.startswith(k + "_")), None)


def section(slug: str, name: str, doc: dict) -> list[str]:
    kind = _kind(name)
    title = TITLES.get(kind or "", name)
    if kind and name != kind:
        title += f" ({name[len(kind) + 1:]})"
    if kind == "scale":
        body = scale_notes(doc, WRAP, name) + [""] + scale_table(doc)
    elif kind == "e2e":
        body = e2e_notes(doc) + [""] + e2e_table(doc)
    elif kind in ("kernels", "kernels_cold"):
        body = kernel_notes(doc) + [""] + kernel_table(doc)
    else:
        table = {"quant": quant_table, "peak_rss": peak_rss_table,
                 "decode_profile": decode_profile_table, "prefill_ttft": prefill_ttft_table,
                 "serve_load": serve_load_table, "grammar_cost": grammar_cost_table,
                 "agreement": agreement_table,
                 "eval": eval_table}.get(kind or "")
        body = table(doc) if table else []
    return [f"## {slug}: {title}", ""] + body + ["", provenance_line(slug, name, doc), ""]


def machine_line(docs: dict[str, dict]) -> str:
    bench = next((d for d in docs.values() if d.get("schema") == SCHEMA_ID), None)
    if bench is None:
        return "No bench document here: the machine is as its files' conditions describe."
    m = bench["machine"]
    llc = f", last-level cache {m['llc_bytes'] >> 20} MiB" if m.get("llc_bytes") else ""
    return _fill(f"{m['cpu']}, {m['logical_cores']} logical cores{llc}; CPU features "
                 f"{m['features']}.")


def machine_page(slug: str, docs: dict[str, dict]) -> str:
    """docs/results/<slug>.md, generated whole: the machine, a table per benchmark with its
    provenance line, then the machine's A/B records."""
    lines = [f"# Results: {slug}", "",
             _fill(f"Generated by `{UPDATE_COMMAND}` from "
                   f"[benchmarks/results/{slug}/](../../benchmarks/results/{slug}/), one file "
                   "per benchmark; edit those, not this page. Under each table: the machine, "
                   "the commit, when, the conditions and the command that produced it. How "
                   "the benchmarks measure: [performance.md](../performance.md)."), "",
             machine_line(docs), ""]
    names = [n for n in docs if not n.startswith("ab/")]
    names.sort(key=lambda n: (ORDER.index(_kind(n)) if _kind(n) else len(ORDER), n))
    for name in names:
        lines += section(slug, name, docs[name])
    ab = [n for n in docs if n.startswith("ab/")]
    if ab:
        lines += [f"## {slug}: A/B records", "",
                  _fill("One-off comparisons of two builds or two settings, kept with "
                        "their commands (scripts in benchmarks/ab/):"), ""]
        for n in ab:
            d = docs[n]
            what = d.get("what") or d.get("kind") or ""
            item = f"- [{n}.json](../../benchmarks/results/{slug}/{n}.json)" + (
                f": {what}." if what else ".")
            lines.append(_fill(item).replace("\n", "\n  "))
    return "\n".join(lines).rstrip("\n") + "\n"


def performance_section(results: dict[str, dict[str, dict]]) -> str:
    """docs/performance.md's generated part: the machines (the README's first), each with its
    page of results, docs/results/<machine>.md."""
    first = readme_machine(results)
    lines = [_fill(f"Generated by `{UPDATE_COMMAND}` from the files under "
                   "[benchmarks/results/](../benchmarks/results/), one folder per machine "
                   "(`isaforge.bench.machine.machine_slug()`: microarchitecture and widest "
                   "int8 ISA), one file per benchmark; each machine's tables are on its own "
                   "page:"), ""]
    for slug in sorted(results, key=lambda s: (s != first, s)):
        names = sorted(n for n in results[slug] if not n.startswith("ab/"))
        item = (f"- [{slug}](results/{slug}.md): {machine_line(results[slug])} "
                f"Benchmarks: {', '.join(names) or 'none'}.")
        lines.append(_fill(item).replace("\n", "\n  "))
    return "\n".join(lines).rstrip("\n")


def update_pages(root: Path, check: bool = False) -> list[Path]:
    """Regenerate README.md's bench block (readme_source's file: the newest scale.json, else
    e2e.json), docs/performance.md's results block (the machines) and each machine's page
    docs/results/<machine>.md under `root`, from root/benchmarks/results. Returns the files
    that were out of date (with check=True, nothing is written)."""
    results = load(root / "benchmarks" / "results")
    src = readme_source(results)
    if src is None:
        raise ValueError(f"{root / 'benchmarks' / 'results'}: no <machine>/scale.json or "
                         "<machine>/e2e.json")
    slug, name = src
    block = (readme_scale_block(slug, results[slug][name], _README_WIDTH) if name == "scale"
             else readme_block(results[slug][name]))
    stale = []
    readme, doc = root / "README.md", root / "docs" / "performance.md"
    if not replace_block(readme, BEGIN, END, block, check):
        stale.append(readme)
    if not replace_block(doc, DOC_BEGIN, DOC_END, performance_section(results), check):
        stale.append(doc)
    pages = root / "docs" / "results"
    want = {pages / f"{s}.md": machine_page(s, docs) for s, docs in results.items()}
    for page in sorted(set(pages.glob("*.md")) | set(want)):
        text = want.get(page)
        if (page.read_text() if page.exists() else None) == text:
            continue
        stale.append(page)
        if check:
            continue
        if text is None:  # a machine whose results are gone
            page.unlink()
        else:
            pages.mkdir(parents=True, exist_ok=True)
            page.write_text(text)
    return stale
