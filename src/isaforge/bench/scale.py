"""Renderings of benchmarks/scale.py's results (benchmarks/results/<machine>/scale.json):
isaforge against llama.cpp on random-weight GGUFs at Llama-3.2-1B / 3B and Llama-3.1-8B
shapes. docs/performance.md gets a table per machine with every figure; the README's summary
the largest thread count's (the headline: the sizes people run)."""

from __future__ import annotations

import re
import shlex
import textwrap

SCRIPT = "python3 benchmarks/scale.py"
UPDATE_COMMAND = "isaforge bench report --update-readme"


def _fill(text: str, width: int) -> str:
    return textwrap.fill(text, width=width, break_long_words=False, break_on_hyphens=False)


def _table(head: list[str], rows: list[list[str]], left: int) -> list[str]:
    align = ["---"] * left + ["---:"] * (len(head) - left)
    return (["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |"]
            + ["| " + " | ".join(r) + " |" for r in rows])


def _pair(d: dict | None, spec: str) -> str:
    """"isaforge / llama.cpp" of a summary entry, "-" for a missing side."""
    if not d:
        return "-"
    f = lambda v: "-" if v is None else format(v, spec)  # noqa: E731
    return f"{f(d.get('isaforge'))} / {f(d.get('llama.cpp'))}"


def bench_tests(doc: dict) -> tuple[str, str, int]:
    """(prompt test, generation test, depth) as the run's method records them (pp512, tg128,
    4096 by default)."""
    speed = (doc.get("method") or {}).get("speed", "")
    pp = re.search(r"\bpp(\d+)", speed)
    tg = re.search(r"\btg(\d+)", speed)
    depth = re.search(r"after a (\d+)-token context", speed)
    return (f"pp{pp.group(1) if pp else 512}", f"tg{tg.group(1) if tg else 128}",
            int(depth.group(1)) if depth else 4096)


def _regen_one(command: str, out: str | None) -> str:
    """One recorded scale.py command as one reruns it: without --conditions and --out (the
    results go to this machine's folder), then --out `out` where the results are not the
    default scale.json (scale.py puts a bare file name in that folder)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    kept, i = [], 0
    while i < len(words):
        if words[i] in ("--conditions", "--out"):
            i += 2
            continue
        if not words[i].startswith(("--conditions=", "--out=")):
            kept.append(words[i])
        i += 1
    kept += ["--out", out] if out else []
    return " ".join(shlex.quote(w) for w in kept)


def regen_command(doc: dict, name: str = "scale") -> str:
    """The scale.py commands that made the file's rows, in row order (a file keeps rows of other
    sizes and types from earlier runs, each row naming its own command), joined by "; "; the
    file's last command where rows name none. name: the results file's stem (scale_avx2_tier
    for benchmarks/results/<machine>/scale_avx2_tier.json); a command recorded with tiers
    switched off (ISAFORGE_DISABLE_FEATURES=... ahead of it) keeps that."""
    last = (doc.get("provenance") or {}).get("command") or doc.get("command") or SCRIPT
    commands = list(dict.fromkeys(r.get("command") or last for r in doc.get("rows", [])))
    out = None if name == "scale" else f"{name}.json"
    return "; ".join(_regen_one(c, out) for c in commands or [last])


def _threads(doc: dict) -> list[int]:
    return sorted({t for r in doc["rows"] for t in r["threads"]})


def _model(row: dict) -> str:
    return row["model"].replace(" shapes", "")


def _depth(s: dict, threads: list[int]) -> dict | None:
    return next((s[k] for k in (f"depth_tg_tps_{t}t" for t in reversed(threads)) if k in s),
                None)


def _decode_gbps(row: dict, t: int) -> str:
    """Decode's read rate, GB/s (its % of the best stream probe reading), isaforge / llama.cpp:
    tokens/s x each engine's own weight bytes per token."""
    s, wb = row["summary"], row.get("weight_bytes_per_token") or {}
    tg, frac = s.get(f"tg_tps_{t}t") or {}, s.get(f"tg_fraction_of_bandwidth_{t}t") or {}
    cells = []
    for e in ("isaforge", "llama.cpp"):
        tps, b, f = tg.get(e), wb.get(e), frac.get(e)
        cells.append("-" if not (tps and b) else f"{tps * b / 1e9:.1f}" + (
            f" ({100 * f:.0f}%)" if f is not None else ""))
    return " / ".join(cells)


def _percent(d: dict | None) -> dict | None:
    return d and {e: None if d.get(e) is None else 100 * d[e] for e in ("isaforge", "llama.cpp")}


def scale_table(doc: dict) -> list[str]:
    """docs/performance.md's table: per size and file type, every figure, isaforge / llama.cpp
    in each cell."""
    pp, tg, depth = bench_tests(doc)
    threads = _threads(doc)
    head = ["model", "type", "start to first token s", "peak RSS MiB"]
    head += [f"{pp} t/s, {t} thr" for t in threads] + [f"{tg} t/s, {t} thr" for t in threads]
    head += [f"{tg} t/s at {depth}, {threads[-1]} thr"]
    head += [f"decode GB/s (% of read bw), {t} thr" for t in threads]
    body = []
    for r in doc["rows"]:
        s = r["summary"]
        row = [_model(r), r["type"].upper(), _pair(s.get("start_warm_first_token_s"), ".2f"),
               _pair(s.get("start_peak_rss_mib"), ".0f")]
        row += [_pair(s.get(f"pp_tps_{t}t"), ".1f") for t in threads]
        row += [_pair(s.get(f"tg_tps_{t}t"), ".2f") for t in threads]
        row.append(_pair(_depth(s, threads), ".2f"))
        row += [_decode_gbps(r, t) for t in threads]
        body.append(row)
    return _table(head, body, left=2)


def _bandwidths(doc: dict, threads: list[int]) -> str:
    """The best stream reading of each row (its fractions' denominator), as a range per
    thread count."""
    out = []
    for t in threads:
        best = [max(r["stream_gbps"][str(t)]) for r in doc["rows"]
                if r.get("stream_gbps", {}).get(str(t))]
        if best:
            lo, hi = min(best), max(best)
            out.append(f"{lo:.1f}" + (f"-{hi:.1f}" if hi > lo else "") + f" GB/s at {t} thr")
    return ", ".join(out) or "not measured"


def scale_notes(doc: dict, width: int, name: str = "scale") -> list[str]:
    pp, tg, depth = bench_tests(doc)
    threads = _threads(doc)
    reps = sorted({r.get("reps") for r in doc["rows"] if r.get("reps")})
    method = doc.get("method") or {}
    text = (f"isaforge against llama.cpp (llama-cpp-python) on the same random-weight GGUF "
            f"files at the published models' shapes, quantized by llama.cpp's quantizer; each "
            f"cell isaforge / llama.cpp, the mean of {'/'.join(map(str, reps)) or '?'} "
            f"alternating processes. Start-up: {method.get('start', '?')}. Speed: "
            f"{pp} and {tg} from an empty context and {tg} after {depth} tokens, as "
            f"llama-bench runs them. Decode GB/s: tokens/s x the weight bytes each engine reads "
            f"per token; in brackets its share of the row's best read-stream reading "
            f"({_bandwidths(doc, threads)}); where the last-level cache keeps part of the "
            f"weights the share can exceed 100%.")
    return [_fill(text, width), "",
            _fill(f"Regenerate: `{regen_command(doc, name)}`, then `{UPDATE_COMMAND}`.", width)]


def readme_scale_block(slug: str, doc: dict, width: int) -> str:
    """The README's performance block from one machine's scale.json: start-up, peak RSS and
    speed at the largest thread count, isaforge / llama.cpp, then where the data is and how
    to regenerate it."""
    pp, tg, depth = bench_tests(doc)
    threads = _threads(doc)
    t = threads[-1]
    m = doc.get("machine") or {}
    head = ["model", "type", "first token s", "peak RSS MiB", f"{pp} t/s", f"{tg} t/s",
            f"{tg} t/s at {depth}", "decode % of read bw"]
    body = []
    for r in doc["rows"]:
        s = r["summary"]
        body.append([_model(r), r["type"].upper(),
                     _pair(s.get("start_warm_first_token_s"), ".2f"),
                     _pair(s.get("start_peak_rss_mib"), ".0f"),
                     _pair(s.get(f"pp_tps_{t}t"), ".1f"), _pair(s.get(f"tg_tps_{t}t"), ".2f"),
                     _pair(_depth(s, threads), ".2f"), _pair(_percent(
                         s.get(f"tg_fraction_of_bandwidth_{t}t")), ".0f")])
    cond = (doc.get("provenance") or {}).get("conditions") or ""
    intro = (f"Measured on `{slug}` ({m.get('cpu', '?')}, {m.get('logical_cores', '?')} cores"
             + ("; a shared VM, timings noisy" if "shared" in cond else "") + f"), {t} threads: "
             "random-weight GGUFs at the shapes of the models people run, quantized by "
             "llama.cpp's quantizer; each cell isaforge / llama.cpp (llama-cpp-python) on the "
             "same file, the mean of alternating processes. First token: process start to the "
             "first generated byte; decode's read rate as a % of the measured read bandwidth.")
    lines = [_fill(intro, width), ""] + _table(head, body, left=2) + ["", _fill(
        f"Data: [benchmarks/results/{slug}/scale.json](benchmarks/results/{slug}/scale.json); "
        f"every figure, 1 thread too: [docs/results/{slug}.md](docs/results/{slug}.md); the "
        "method and every machine: [docs/performance.md](docs/performance.md). "
        f"Regenerate: `{regen_command(doc)}`, then `{UPDATE_COMMAND}`.", width)]
    return "\n".join(lines)
