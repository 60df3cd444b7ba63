"""Renderings of a bench document: markdown (llama-bench's table), CSV, JSON lines, JSON,
and the README's performance block (generated from the README machine's e2e.json)."""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
import textwrap
from pathlib import Path

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
UPDATE_COMMAND = "isaforge bench report --update-readme"
_README_WIDTH = 110

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


def e2e_rows(doc: dict) -> tuple[list[str], list[tuple[str, str, int, dict]]]:
    """(tests in order, [(backend, kernel, threads, {test: result row})])."""
    tests = list(dict.fromkeys(r["test"] for r in doc["results"]))
    rows: dict = {}
    for r in doc["results"]:
        rows.setdefault((r["backend"], r["kernel"], r["threads"]), {})[r["test"]] = r
    return tests, [(b, k, t, v) for (b, k, t), v in rows.items()]


def regen_command(command: str) -> str:
    """A recorded `isaforge bench` command as one reruns it on any machine: the home folder
    as ~, without --conditions, --plot, -o and -q, and a bare --save (this machine's results
    folder) in place of --save FILE."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    out, i = [], 0
    while i < len(words):
        w = words[i]
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if w in ("--conditions", "--plot", "-o") or (w == "--save" and nxt.endswith(".json")):
            i += 2
            continue
        if w not in ("-q", "--quiet", "--save"):
            out.append(re.sub(r"^(/root|/home/[^/]+)/", "~/", w))
        i += 1
    return " ".join(w if w.startswith("~/") else shlex.quote(w) for w in out) + " --save"


def readme_block(doc: dict) -> str:
    """The README's performance block, a pure function of one machine's e2e.json: one row per
    kernel and thread count, prefill and decode side by side, then where the data is and the
    commands that regenerate it."""
    m, s = doc["model"], doc.get("settings", {})
    slug = doc["machine"].get("slug") or "unknown"
    tests, rows = e2e_rows(doc)
    pp = next((t for t in tests if t.startswith("pp")), None)
    tg = next((t for t in tests if t.startswith("tg")), None)
    peer = any(b == "llama.cpp" for b, _, _, _ in rows)
    head = ["kernel", "threads"] + [f"{t} t/s" for t in (pp, tg) if t] + (
        [f"{tg} % of limit"] if tg else []) + (
        [f"vs llama.cpp ({' / '.join(t for t in (pp, tg) if t)})"] if peer else [])
    lines = [textwrap.fill(
        f"Measured on `{slug}` ({doc['machine']['cpu']}, {doc['machine']['logical_cores']} "
        f"cores), {m['name']}: {' and '.join(t for t in (pp, tg) if t)} as llama-bench runs "
        f"them, in tokens per second (the mean of {s.get('reps')} alternating runs).",
        width=_README_WIDTH, break_long_words=False, break_on_hyphens=False), "",
        "| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for b, k, th, by in rows:
        row = [k, str(th)] + [_f(by.get(t, {}).get("mean_tps"), ".1f") for t in (pp, tg) if t]
        if tg:
            frac = by.get(tg, {}).get("fraction_of_limit")
            row.append(_f(None if frac is None else 100 * frac, ".1f"))
        if peer:
            row.append("-" if b == "llama.cpp" else " / ".join(
                _f(by.get(t, {}).get("ratio_vs_llama_cpp"), ".2f") + "x" for t in (pp, tg) if t))
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", textwrap.fill(
        "The decode limit is the measured read bandwidth ÷ the weight bytes per token; every "
        "kernel computes the same bits. "
        f"Data: [benchmarks/results/{slug}/e2e.json](benchmarks/results/{slug}/e2e.json), the "
        "README's machine being the one with the newest e2e.json. Rerun: "
        f"`{regen_command(doc.get('command', 'isaforge bench'))}`, then `{UPDATE_COMMAND}`. "
        "Every machine and benchmark: [docs/performance.md](docs/performance.md).",
        width=_README_WIDTH, break_long_words=False, break_on_hyphens=False)]
    return "\n".join(lines)


def replace_block(path: Path, begin: str, end: str, body: str, check: bool) -> bool:
    """Put `body` between the markers of `path`. True when it was already there; with
    check=True nothing is written."""
    text = path.read_text()
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"{path}: needs exactly one {begin} ... {end} block")
    head, rest = text.split(begin, 1)
    old, tail = rest.split(end, 1)
    new = "\n" + body + "\n"
    if old == new:
        return True
    if not check:
        path.write_text(head + begin + new + end + tail)
    return False


def update_readme(readme: Path, doc: dict, check: bool = False) -> bool:
    """Replace the text between the bench markers with readme_block(doc). Returns True when
    the README already matched. With check=True, never writes."""
    return replace_block(readme, BEGIN, END, readme_block(doc), check)


def readme_current_block(readme: Path) -> str:
    text = readme.read_text()
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")
