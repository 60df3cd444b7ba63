"""benchmarks/scale.py's results: a row's summary (means, ratios, fractions of the read
bandwidth), the machine, the results document (benchmarks/results/<machine>/scale.json) and
its markdown table.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
from pathlib import Path

from scale_files import (
    DEPTH,
    FTYPES,
    N_CTX_SPEED,
    N_CTX_START,
    PROMPT,
    SEED,
    SHAPES,
    STD,
    VOCAB_SOURCE,
)
from scale_measure import BANDWIDTH_METHOD, child_env, command_line, isaforge_cmd

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
    command = command_line(argv)
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
    """--out as given; a bare file name goes into this machine's folder, as scale.json does."""
    folder = Path(__file__).resolve().parent / "results" / machine_slug()
    if a.out:
        return folder / a.out if Path(a.out).name == a.out else Path(a.out)
    return folder / "scale.json"


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
