"""Renderings of a bench document: markdown (llama-bench's table), CSV, JSON lines, JSON,
and the README's performance block (generated from one committed JSON)."""

from __future__ import annotations

import csv
import io
import json
import textwrap
from pathlib import Path

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
README_COMMAND = "isaforge bench report benchmarks/results/bench.json --update-readme README.md"

CSV_FIELDS = ["model", "size_bytes", "params", "backend", "kernel", "threads", "test",
              "mean_tps", "stddev_tps", "limit_tps", "fraction_of_limit", "ttft_ms",
              "ratio_vs_llama_cpp", "status", "samples_tps"]
KERNEL_CSV_FIELDS = ["backend", "tier", "op", "format", "codebook_mode", "weights", "M", "N", "K",
                     "gs", "cold", "status", "best_gops", "median_gops", "min_gops", "max_gops",
                     "median_gbps", "limit_gops", "fraction_of_limit", "fraction_of_peak",
                     "fraction_of_peak_same_run", "best_fraction_of_peak_same_run",
                     "fraction_of_stream", "iters", "samples_s", "reason"]


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.2f} MiB"


def _params(n: int) -> str:
    return f"{n / 1e6:.2f} M" if n < 1e9 else f"{n / 1e9:.2f} B"


def _f(x, spec: str = ".2f", none: str = "-") -> str:
    return none if x is None else format(x, spec)


def results_table(doc: dict) -> str:
    """llama-bench's columns (model | size | params | backend | kernel | threads | test | t/s)
    plus the measured limit, the fraction of it (and, for decode rows, of the limit at the
    stream probe sampled in the same alternation, when the run has it), time to first token
    and the llama.cpp ratio when llama.cpp ran."""
    m = doc["model"]
    results = doc.get("results", [])
    peer = any(r["backend"] == "llama.cpp" for r in results)
    same = any("fraction_of_limit_same_run" in r for r in results)
    head = ["model", "size", "params", "backend", "kernel", "threads", "test", "t/s",
            "limit t/s", "% of limit"] + (["% of limit, same run"] if same else []) + [
            "TTFT ms"] + (["vs llama.cpp"] if peer else [])
    align = ["---"] * 5 + ["---:"] * (len(head) - 5)
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |"]
    for r in results:
        frac = r.get("fraction_of_limit")
        row = [m["name"], _mib(m["size_bytes"]), _params(m["params"]), r["backend"], r["kernel"],
               str(r["threads"]), r["test"], f"{r['mean_tps']:.2f} ± {r['stddev_tps']:.2f}",
               _f(r.get("limit_tps"), ".1f"), _f(None if frac is None else 100 * frac, ".1f")]
        if same:  # against the stream probe sampled in the same alternation (decode rows)
            fs = r.get("fraction_of_limit_same_run")
            row.append("-" if fs is None else
                       f"{100 * fs:.1f} (of {r['limit_same_run_tps']:.1f})")
        row.append(_f(r.get("ttft_ms"), ".1f"))
        if peer:
            ratio = r.get("ratio_vs_llama_cpp")
            row.append("-" if ratio is None else f"{ratio:.2f}x")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def kernels_table(doc: dict) -> str:
    """One line per kernel row. format: the 4-bit rows' format and codebook product mode
    (q8 for the Q8 ops); GB/s: bytes a call must move / median time; % of stream: of the
    stream probe's read bandwidth (cold rows); % of peak, same run: median / median and best /
    best against the peak probe sampled in the same alternation (hot rows)."""
    head = ["op", "format", "weights", "M", "N", "K", "backend", "tier", "GOP/s median", "best",
            "min-max", "GB/s", "limit", "% of limit", "% of peak", "% of peak, same run",
            "% of stream", "status"]
    lines = ["| " + " | ".join(head) + " |",
             "| " + " | ".join(["---"] * 3 + ["---:"] * 3 + ["---"] * 2 + ["---:"] * 9 + ["---"])
             + " |"]
    pct = lambda x: _f(None if x is None else 100 * x, ".1f")  # noqa: E731
    for r in doc.get("kernels", []):
        ok = r["status"] == "ok"
        fmt = (f"{r['format']} ({r.get('codebook_mode', '?')})" if r.get("format")
               else "q8" if r["op"].startswith("q8_") else "-")
        lines.append("| " + " | ".join([
            r["op"], fmt, r.get("weights", "-"), str(r["M"]), str(r["N"]), str(r["K"]),
            r["backend"], r["tier"], _f(r.get("median_gops")) if ok else "-",
            _f(r.get("best_gops")) if ok else "-",
            f"{r['min_gops']:.2f}-{r['max_gops']:.2f}" if ok and "min_gops" in r else "-",
            _f(r.get("median_gbps")), _f(r.get("limit_gops"), ".1f"),
            pct(r.get("fraction_of_limit")), pct(r.get("fraction_of_peak")),
            (f"{pct(r['fraction_of_peak_same_run'])} / "
             f"{pct(r['best_fraction_of_peak_same_run'])}" if "peak_same_run" in r else "-"),
            pct(r.get("fraction_of_stream")),
            "ok" if ok else f"{r['status']}: {r.get('reason')}"]) + " |")
    return "\n".join(lines)


def limits_lines(doc: dict) -> list[str]:
    lim = doc.get("limits")
    if not lim:
        return ["limits: not measured"]
    bw = ", ".join(f"{r['gbps']:.1f} GB/s ({r['threads']} thr)" for r in lim["bandwidth"])
    peaks = ", ".join(
        f"{r['tier']} {r['gops']:.0f} ({r['threads']} thr)" if r["gops"] else
        f"{r['tier']} n/a ({r['threads']} thr)" for r in lim["peak_int8"])
    out = [f"memory bandwidth (read-only stream, {lim['stream_bytes'] >> 20} MiB): {bw}",
           f"peak int8 GOP/s (tight loop per tier): {peaks}"]
    if lim.get("mix_int8"):
        mixes = ", ".join(
            f"{r['tier']} {r['gops']:.0f} ({r['threads']} thr)" if r["gops"] else
            f"{r['tier']} n/a ({r['threads']} thr)" for r in lim["mix_int8"])
        out.append(f"GEMM inner-loop mix int8 GOP/s (the kernel's loop from L1, no epilogue): "
                   f"{mixes}")
    return out


def footer_lines(doc: dict) -> list[str]:
    m, s = doc["machine"], doc.get("settings", {})
    out = [f"machine: {m['cpu']}, {m['logical_cores']} logical cores, features "
           f"{m['features']}; isaforge {m['isaforge_version']} "
           f"({(m.get('git_commit') or 'no git')[:12]}{'+dirty' if m.get('git_dirty') else ''})"]
    if doc.get("conditions"):
        out.append(f"conditions: {doc['conditions']}")
    la0, la1 = m.get("loadavg_start"), doc.get("loadavg_end")
    if la0 or la1:
        out.append(f"load average (1, 5, 15 min): {la0} at the start, {la1} at the end")
    if s and doc.get("kind") == "kernels":
        mode = ("cold (weights rotated beyond the LLC)" if s.get("cold")
                else "hot (weights may stay in cache)")
        out.append(f"settings: {s.get('reps')} samples per tier after 1 warm-up cycle, tiers "
                   f"alternating, 1 thread, {mode}")
    elif s:
        out.append(f"settings: {s.get('reps')} repetitions after 1 warm-up cycle, configurations "
                   f"alternating; ubatch {s.get('ubatch') or 'default'}")
        if s.get("kv_cache_bytes"):
            out.append(f"KV cache: {s['kv_cache']}, {s['kv_cache_bytes'] / 2**20:.1f} MiB per "
                       f"isaforge engine (context {s['ctx']})")
    out += limits_lines(doc)
    steal: dict = {}
    for r in doc.get("results") or []:
        if r.get("samples_steal_ms") is not None:
            steal.setdefault(r["threads"], []).extend(r["samples_steal_ms"])
    if steal:  # time the hypervisor ran something else on this VM's CPUs while timing
        out.append("hypervisor steal during the timed samples (/proc/stat): " + ", ".join(
            f"{sum(v):.0f} ms over {len(v)} samples at {t} thr, most {max(v):.0f}"
            for t, v in sorted(steal.items())))
    for p in doc.get("peers", []):
        out.append(f"peer {p['name']}: " + (f"ran (version {p.get('version')})"
                                            if p["status"] == "ok" else
                                            f"skipped: {p['reason']}"))
    for sk in doc.get("skipped", []):
        out.append(f"{sk['backend']}: skipped: {sk['reason']}")
    e = doc.get("energy", {})
    out.append("energy: " + ("RAPL, J/token in the JSON" if e.get("available")
                             else f"n/a ({e.get('reason')})"))
    out.append(f"peak RSS: {doc.get('peak_rss_mib')} MiB (whole process, all configurations)")
    return out


def to_markdown(doc: dict) -> str:
    parts = []
    if doc.get("results") is not None and (doc.get("results") or not doc.get("kernels")):
        parts.append(results_table(doc))
    if doc.get("kernels"):
        parts.append(kernels_table(doc))
    parts.append("\n".join(footer_lines(doc)))
    return "\n\n".join(parts) + "\n"


def to_csv(doc: dict) -> str:
    buf = io.StringIO()
    if doc.get("kernels") and not doc.get("results"):
        w = csv.DictWriter(buf, KERNEL_CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for r in doc["kernels"]:
            w.writerow({**r, "samples_s": ";".join(map(str, r.get("samples_s", [])))})
        return buf.getvalue()
    w = csv.DictWriter(buf, CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    m = doc["model"]
    for r in doc.get("results", []):
        w.writerow({**r, "model": m["name"], "size_bytes": m["size_bytes"], "params": m["params"],
                    "samples_tps": ";".join(map(str, r["samples_tps"]))})
    return buf.getvalue()


def to_jsonl(doc: dict) -> str:
    """One object per line: a "run" header (everything but the rows), then "result" and
    "kernel" rows."""
    head = {k: v for k, v in doc.items() if k not in ("results", "kernels")}
    lines = [json.dumps({"type": "run", **head})]
    lines += [json.dumps({"type": "result", **r}) for r in doc.get("results", [])]
    lines += [json.dumps({"type": "kernel", **r}) for r in doc.get("kernels", [])]
    return "\n".join(lines) + "\n"


def to_json(doc: dict) -> str:
    return json.dumps(doc, indent=1) + "\n"


RENDER = {"md": to_markdown, "csv": to_csv, "jsonl": to_jsonl, "json": to_json}


def readme_block(doc: dict) -> str:
    """The README's performance block, a pure function of the JSON document."""
    m, s = doc["model"], doc.get("settings", {})
    intro = (
        f"Generated by `{README_COMMAND}` from the committed "
        f"[benchmarks/results/bench.json](benchmarks/results/bench.json), produced by "
        f"`{doc.get('command', 'isaforge bench')}`. Model: {m['name']} "
        f"({_params(m['params'])} parameters, {_mib(m['weight_bytes_per_token'])} of weights "
        f"read per decoded token). Tests as llama-bench: pp{s.get('n_prompt')} prefills "
        f"{s.get('n_prompt')} tokens, tg{s.get('n_gen')} decodes {s.get('n_gen')} tokens, each "
        "from an empty context; t/s is mean ± stddev over the repetitions. The limit is the "
        "measured one: decode = read bandwidth ÷ weight bytes per token, prefill = the tier's "
        "peak int8 rate ÷ matmul ops per token (attention not counted). Every tier produces "
        "the same bits; only speed differs.")
    lines = [
        textwrap.fill(intro, width=96, break_on_hyphens=False, break_long_words=False),
        "",
        results_table(doc),
        "",
    ]
    lines += [f"- {x}" for x in footer_lines(doc)]
    lines += ["", textwrap.fill(
        "Re-run it: `isaforge bench [MODEL] [-p 512] [-n 128] [-r 5] [--threads 1,2] [--kernel "
        "all] [--kv-cache f32|f16|int8] [-o md|json|csv|jsonl] [--save FILE.json] "
        "[--plot out.png]` (a `.gguf` MODEL also runs llama.cpp on the same file, "
        "interleaved, with the ratio; install it with "
        "`bash scripts/install_peers.sh`); kernel level: `isaforge bench kernels [--cold]` "
        "(GOP/s per tier per op at SmolLM2-135M's shapes, each tier checked bit for bit "
        "against scalar before it is timed); the JSON schema is "
        "`benchmarks/schema/bench.schema.json`.", width=96, break_on_hyphens=False,
        break_long_words=False)]
    return "\n".join(lines)


def update_readme(readme: Path, doc: dict, check: bool = False) -> bool:
    """Replace the text between the bench markers with readme_block(doc). Returns True when
    the README already matched. With check=True, never writes."""
    text = readme.read_text()
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"{readme}: needs exactly one {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN, 1)
    old, tail = rest.split(END, 1)
    new = "\n" + readme_block(doc) + "\n"
    if old == new:
        return True
    if not check:
        readme.write_text(head + BEGIN + new + END + tail)
    return False


def readme_current_block(readme: Path) -> str:
    text = readme.read_text()
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")
