"""`isaforge bench` command line: end to end (default), `kernels`, and `report`.

    isaforge bench [MODEL] [-p 512] [-n 128] [-r 5] [--threads 1,2] [--kernel LIST|all|auto]
                   [-o md|json|csv|jsonl] [--save [FILE.json]] [--plot out.png] [--no-limits]
    isaforge bench kernels [--model-shapes smollm2-135m] [--m 64,512] [--cold] [-r 5] ...
    isaforge bench report FILE.json [-o md|...]
    isaforge bench report --update-readme [--check] [--root DIR]

A bare --save writes benchmarks/results/<machine>/<name>.json (e2e, kernels, kernels_cold),
<machine> being isaforge.bench.machine.machine_slug(); `report --update-readme` regenerates the
README's table, docs/performance.md's list of machines and each machine's page
docs/results/<machine>.md from those files.

Progress goes to stderr, the report to stdout. Bad arguments or files: one line on stderr,
exit status 2."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
from pathlib import Path

from ..settings import int_at_least

DEFAULT_MODEL = "synthetic:smollm2-135m"


class BenchUsageError(ValueError):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise BenchUsageError(f"{self.prog}: {message}")


def add_parser(subparsers) -> None:
    """Register `bench` on the main CLI; everything after it is parsed by main()."""
    p = subparsers.add_parser("bench", help="benchmarks: end to end, kernels, limits, peers",
                              add_help=False, prefix_chars="+")
    p.add_argument("bench_argv", nargs="*", help="see `isaforge bench --help`")


def _int_list(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") \
            from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return list(dict.fromkeys(vals))


_nonneg, _pos = int_at_least(0), int_at_least(1)


def _common(p: argparse.ArgumentParser) -> None:
    from .report import RENDER

    p.add_argument("-o", dest="fmt", choices=sorted(RENDER), default="md",
                   help="output format on stdout (default md)")
    p.add_argument("--save", metavar="FILE", nargs="?", const="",
                   help="also write the JSON document to FILE ({machine} in it: this "
                        "machine's slug); bare --save: benchmarks/results/<machine>/<name>.json")
    p.add_argument("--plot", metavar="PNG", help="draw t/s and a roofline chart (matplotlib)")
    p.add_argument("--no-limits", action="store_true",
                   help="skip measuring memory bandwidth and peak int8 throughput")
    p.add_argument("--conditions", default=None,
                   help="free text stored with the results (e.g. 'machine shared, busy')")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")


def _e2e_parser() -> _Parser:
    p = _Parser(prog="isaforge bench", description="End-to-end benchmark, llama-bench style.")
    p.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                   help=f"model file (llama2.c .bin; a .gguf also runs llama.cpp) or "
                        f"synthetic:smollm2-135m (default {DEFAULT_MODEL})")
    p.add_argument("-p", dest="n_prompt", type=_nonneg, default=512, help="prompt tokens (pp)")
    p.add_argument("-n", dest="n_gen", type=_nonneg, default=128, help="generated tokens (tg)")
    p.add_argument("-r", dest="reps", type=_pos, default=5, help="repetitions (default 5)")
    p.add_argument("--threads", type=_int_list, default=None,
                   help="comma-separated thread counts (default: physical cores)")
    p.add_argument("--kernel", default="auto",
                   help="kernel tiers: auto (best per op), all (every supported tier) or a "
                        "comma-separated list")
    p.add_argument("--ubatch", type=_nonneg, default=0, help="prefill chunk (0: the default)")
    p.add_argument("--kv-cache", choices=("f32", "f16", "int8"), default="f32",
                   help="KV cache type of isaforge's engines (default f32)")
    p.add_argument("--group-size", type=_pos, default=32, help="Q8 group size of synthetic models")
    p.add_argument("--quant", default="auto", help="how a model file's weights are held (as "
                   "`isaforge run --quant`: auto, q8, f32, cq4[-32|-64|-128][-lsq][-norot], q4_0)")
    _common(p)
    return p


def _kernels_parser() -> _Parser:
    from .kernels import KQ_OPS, OPS, Q4_FORMATS

    p = _Parser(prog="isaforge bench kernels",
                description="GOP/s per tier per op at a model's shapes, timed in C.")
    p.add_argument("--model-shapes", default="smollm2-135m",
                   help="smollm2-135m or a model file whose shapes to use")
    p.add_argument("--m", dest="ms", type=_int_list, default=[64, 512],
                   help="GEMM activation rows (default 64,512)")
    p.add_argument("--ops", default=",".join(OPS),
                   help=f"comma-separated ops (default {','.join(OPS)}; also {','.join(KQ_OPS)}, "
                        f"the K-quant GEMVs and GEMMs on GGUF blocks; the 4-bit ones run "
                        f"each of the formats {', '.join(Q4_FORMATS)} at its own group size)")
    p.add_argument("--q4-formats", default=",".join(Q4_FORMATS),
                   help=f"4-bit formats of q4_gemv / q4_gemm (default {','.join(Q4_FORMATS)})")
    p.add_argument("--kernel", default="all", help="tiers: all (supported) or a list")
    p.add_argument("-r", dest="reps", type=_pos, default=5, help="samples per tier (default 5)")
    p.add_argument("--group-size", type=_pos, default=32)
    p.add_argument("--cold", action="store_true",
                   help="rotate over weight copies larger than the last-level cache")
    p.add_argument("--min-time", type=float, default=0.02, help="seconds per sample (~)")
    p.add_argument("--test-inject-broken", action="store_true",
                   help="test hook: also run the deliberately broken kernel table (the gate "
                        "must refuse it)")
    _common(p)
    return p


def _report_parser() -> _Parser:
    from .report import RENDER

    p = _Parser(prog="isaforge bench report",
                description="Render a bench JSON, or regenerate the pages made from the "
                            "committed results (README.md's bench block, docs/performance.md's "
                            "results block, docs/results/<machine>.md).")
    p.add_argument("json_file", nargs="?", help="a bench document to render")
    p.add_argument("-o", dest="fmt", choices=sorted(RENDER), default="md")
    p.add_argument("--update-readme", action="store_true",
                   help="regenerate README.md's bench block (the machine with the newest "
                        "scale.json, else e2e.json), docs/performance.md's results block and "
                        "docs/results/<machine>.md from benchmarks/results/<machine>/")
    p.add_argument("--check", action="store_true",
                   help="with --update-readme: write nothing, exit 1 if a page is out of date")
    p.add_argument("--root", default=None,
                   help="the tree holding README.md, docs/ and benchmarks/results/ (default: "
                        "this source tree, else the current folder)")
    return p


def _tiers(spec: str) -> tuple[list[str], list[dict]]:
    """(tier names to run, skipped tiers with reasons)."""
    from .. import _bench
    from ..settings import disabled_features

    known = {t["name"]: t for t in _bench.tiers(disabled_features())}
    if spec == "auto":
        return ["auto"], []
    if spec == "all":
        run = [n for n, t in known.items() if t["supported"]]
        skip = [{"backend": f"isaforge kernel {n}", "reason": t["reason"]}
                for n, t in known.items() if not t["supported"]]
        return run, skip
    names = [x.strip() for x in spec.split(",") if x.strip()]
    for n in names:
        if n not in known:
            raise ValueError(f"unknown kernel tier {n!r} (compiled: {', '.join(known)})")
        if not known[n]["supported"]:
            raise ValueError(f"kernel tier {n!r} cannot run here: {known[n]['reason']}")
    return list(dict.fromkeys(names)), []


def _doc(kind: str, argv: list[str], a, machine: dict, model: dict, settings: dict,
         **parts) -> dict:
    from .energy import Rapl
    from .machine import loadavg, peak_rss_mib

    doc = {
        "schema": "isaforge-bench/1", "kind": kind,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "isaforge bench " + " ".join(shlex.quote(x) for x in argv),
        "conditions": a.conditions, "machine": machine, "model": model,
        "settings": settings, "results": [], "peers": [], "skipped": [], "limits": None,
        "energy": Rapl.probe().status(),
    }
    doc.update(parts)
    doc["peak_rss_mib"] = peak_rss_mib()
    doc["loadavg_end"] = loadavg()
    return doc


def _emit(doc: dict, a, path: Path | None) -> None:
    from .report import RENDER

    """Print the report; write the JSON to `path` (save_path of --save) unless None."""
    sys.stdout.write(RENDER[a.fmt](doc))
    sys.stdout.flush()
    if path is not None:
        path.write_text(json.dumps(doc, indent=1) + "\n")
    if a.plot:
        from .plot import plot

        plot(doc, a.plot)


def _log(a):
    return (lambda s: None) if a.quiet else (lambda s: print(s, file=sys.stderr, flush=True))


def _run_e2e(argv: list[str]) -> int:
    from .. import _native
    from ..runtime.engine import kv_cache_bytes
    from ..settings import default_threads
    from .e2e import E2ERun, load_model
    from .limits import measure_limits
    from .machine import machine_info, save_path

    a = _e2e_parser().parse_args(argv)
    out = save_path(a.save, "e2e")  # checked before the run, not after it
    if a.n_prompt == 0 and a.n_gen == 0:
        raise ValueError("nothing to run: -p and -n are both 0")
    log = _log(a)
    machine = machine_info()  # before the run: the load average at the start
    threads = a.threads or [default_threads()]
    kernels, skipped = _tiers(a.kernel)
    # each test starts from an empty context (llama-bench): the longest one sets the context
    loaded, info, reason = load_model(a.model, max(a.n_prompt, a.n_gen), a.group_size, a.quant)
    gguf = a.model if a.model.lower().endswith(".gguf") else None
    limits = None
    if not a.no_limits:
        auto = machine["auto"]
        lt = [t for t in kernels if t != "auto"] or []
        if "auto" in kernels:
            lt += [auto["prefill"]["tier"], auto["decode"]["tier"]]
        if gguf:
            lt += [t["name"] for t in machine["tiers"] if t["supported"]]
        counts = sorted({1, os.cpu_count() or 1, *threads})
        limits = measure_limits(list(dict.fromkeys(lt)), counts, log=log)
    run = E2ERun(loaded, info, a.n_prompt, a.n_gen, a.reps, threads, kernels, a.ubatch, gguf,
                 reason, log, kv_cache=a.kv_cache)
    results, peers, skipped_backends = run.run(limits)
    if not gguf:
        peers = [{"name": "llama.cpp", "status": "skipped", "version": None,
                  "reason": "MODEL is not a .gguf file (llama.cpp runs the same GGUF)"}]
    from dataclasses import asdict

    settings = {"n_prompt": a.n_prompt, "n_gen": a.n_gen, "reps": a.reps, "warmup_cycles": 1,
                "threads": threads, "kernels": kernels, "ubatch": a.ubatch,
                "ubatch_effective": min(a.ubatch or _native.DEFAULT_UBATCH, a.n_prompt) or None,
                "order": "alternating",
                "group_size": a.group_size if a.model.startswith("synthetic:") else None,
                "kv_cache": a.kv_cache, "quant": a.quant,
                "ctx": loaded.config.seq_len if loaded else None,
                "kv_cache_bytes": kv_cache_bytes(loaded.config, a.kv_cache, a.ubatch)
                if loaded else None}
    doc = _doc("e2e", argv, a, machine, asdict(info), settings, results=results,
               peers=peers, skipped=skipped + skipped_backends, limits=limits)
    _emit(doc, a, out)
    return 0


def _shape_model_info(spec: str, gs: int) -> dict:
    from ..synthetic import SMOLLM2_135M

    if spec != "smollm2-135m":
        return {"name": spec, "path": spec, "format": "shapes", "size_bytes": 0, "params": 0,
                "weight_bytes_per_token": 0, "ops_per_token_decode": 0,
                "ops_per_token_prefill": 0}
    c = SMOLLM2_135M
    layer = c.n_layers * (2 * c.dim * c.dim + 2 * c.kv_dim * c.dim + 3 * c.dim * c.hidden_dim)
    cls = c.vocab_size * c.dim
    q8 = lambda n: n + 4 * n // gs  # noqa: E731
    return {"name": f"{spec} shapes (Q8 gs{gs})", "path": "", "format": "shapes",
            "size_bytes": q8(layer + cls), "params": layer + cls, "weight_bytes_per_token":
            q8(layer + cls), "ops_per_token_decode": 2 * (layer + cls),
            "ops_per_token_prefill": 2 * layer}


def _run_kernels(argv: list[str]) -> int:
    from .kernels import KQ_OPS, OPS, Q4_FORMATS, bench_kernels, kquant_shapes, model_shapes
    from .limits import measure_limits
    from .machine import machine_info, save_path
    from .peers import torch_kernel_rows, torch_status

    a = _kernels_parser().parse_args(argv)
    out = save_path(a.save, "kernels_cold" if a.cold else "kernels")
    machine = machine_info()
    if not a.min_time > 0:
        raise ValueError(f"--min-time must be > 0, got {a.min_time}")
    log = _log(a)
    ops = [x.strip() for x in a.ops.split(",") if x.strip()]
    bad = [o for o in ops if o not in OPS + KQ_OPS]
    if bad:
        raise ValueError(f"unknown op(s) {', '.join(bad)} ({', '.join(OPS + KQ_OPS)})")
    fmts = [x.strip() for x in a.q4_formats.split(",") if x.strip()]
    badf = [f for f in fmts if f not in Q4_FORMATS]
    if badf:
        raise ValueError(f"unknown 4-bit format(s) {', '.join(badf)} ({', '.join(Q4_FORMATS)})")
    tiers, skipped = _tiers(a.kernel if a.kernel != "auto" else "all")
    if a.test_inject_broken:
        tiers.append("broken")
    shapes = [s for s in model_shapes(a.model_shapes, a.ms)
              if s.op in ops and (s.fmt is None or s.fmt in fmts)]
    if any(o in KQ_OPS for o in ops):
        shapes += [s for s in kquant_shapes(a.model_shapes, a.ms) if s.op in ops]
    limits = None
    if not a.no_limits:
        limits = measure_limits([t for t in tiers if t != "broken"],
                                sorted({1, os.cpu_count() or 1}), log=log)
    rows = bench_kernels(shapes, tiers, a.group_size, a.reps, a.cold, a.min_time, limits, log)
    peer = torch_status()
    if peer["status"] == "ok":
        trows = torch_kernel_rows([(s.op, s.M, s.N, s.K) for s in shapes], a.reps, a.min_time)
        for r in trows:
            sh = next(s for s in shapes if (s.op, s.M, s.N, s.K) == (r["op"], r["M"], r["N"],
                                                                       r["K"]))
            r.update(weights=sh.name, gs=a.group_size, cold=False, copies=1,
                     ops_per_call=sh.ops, bytes_per_call=sh.bytes(a.group_size))
            if r["status"] == "ok":
                g = sorted(sh.ops / s / 1e9 for s in r["samples_s"])
                r.update(best_gops=round(g[-1], 3), median_gops=round(g[len(g) // 2], 3),
                         min_gops=round(g[0], 3), max_gops=round(g[-1], 3), limit_gops=None,
                         limit_kind=None, fraction_of_limit=None)
        rows += trows
    settings = {"reps": a.reps, "warmup_cycles": 1, "order": "alternating", "cold": a.cold,
                "min_time": a.min_time, "group_size": a.group_size, "ms": a.ms,
                "tiers": tiers, "threads": 1, "q4_formats": fmts}
    doc = _doc("kernels", ["kernels", *argv], a, machine,
               _shape_model_info(a.model_shapes, a.group_size), settings, kernels=rows,
               peers=[peer], skipped=skipped, limits=limits)
    _emit(doc, a, out)
    return 0


def _validated(path: Path) -> dict:
    """The JSON document at `path`, checked against bench.schema.json where jsonschema and
    the schema are at hand (a bench document whole, another results file's provenance)."""
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    try:
        from .schema import SCHEMA_ID, validate

        if not isinstance(doc, dict) or doc.get("schema") == SCHEMA_ID or "provenance" not in doc:
            validate(doc)
        else:
            validate(doc["provenance"], "provenance")
    except (ImportError, FileNotFoundError):  # no jsonschema, or not in a source tree
        pass
    except Exception as e:  # jsonschema.ValidationError
        if e.__class__.__name__ != "ValidationError":
            raise
        raise ValueError(f"{path}: does not fit bench.schema.json: {e.message}") from None
    return doc


def _run_report(argv: list[str]) -> int:
    from .report import RENDER

    a = _report_parser().parse_args(argv)
    if a.update_readme:
        from .machine import RESULTS
        from .results import UPDATE_COMMAND, update_pages

        root = Path(a.root) if a.root else (
            RESULTS.parents[1] if RESULTS.is_dir() else Path.cwd())
        for f in sorted((root / "benchmarks" / "results").rglob("*.json")):
            _validated(f)
        stale = update_pages(root, check=a.check)
        for f in stale:
            print(f"{f}: out of date; run `{UPDATE_COMMAND}`" if a.check else
                  f"{f}: updated", file=sys.stderr)
        return 1 if a.check and stale else 0
    if a.check:
        raise BenchUsageError("isaforge bench report: --check goes with --update-readme")
    if not a.json_file:
        raise BenchUsageError("isaforge bench report: give FILE.json or --update-readme")
    doc = _validated(Path(a.json_file))
    sys.stdout.write(RENDER[a.fmt](doc))
    return 0


def run_argv(argv: list[str]) -> int:
    """Entry point with bench's own argv (what follows `isaforge bench`)."""
    try:
        if argv and argv[0] == "kernels":
            return _run_kernels(argv[1:])
        if argv and argv[0] == "report":
            return _run_report(argv[1:])
        return _run_e2e(argv)
    except BenchUsageError as e:
        print(f"{e} (see --help)", file=sys.stderr)
        return 2
    except SystemExit as e:  # --help
        return int(e.code or 0)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError, RuntimeError, MemoryError) as e:
        print(f"isaforge bench: error: {e}", file=sys.stderr)
        return 2


def main(args) -> int:
    """Hook for isaforge.cli: `args.bench_argv` holds everything after `bench`."""
    return run_argv(list(args.bench_argv))


if __name__ == "__main__":
    sys.exit(run_argv(sys.argv[1:]))
