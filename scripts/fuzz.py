#!/usr/bin/env python3
"""Coverage-guided fuzzing of isaforge's readers with atheris (libFuzzer for Python).

  python3 scripts/fuzz.py --list
  python3 scripts/fuzz.py gguf --seconds 600          # one target
  python3 scripts/fuzz.py --all --seconds 10          # every target, each in its own process
  python3 scripts/fuzz.py --write-seeds               # regenerate tests/fuzz/corpus/*/seed files

Targets and what counts as a finding: tests/fuzz/harness.py. Each run starts from the committed
corpus (tests/fuzz/corpus/TARGET) and writes the inputs it finds interesting to a scratch
corpus (--scratch, default a temporary folder; --grow adds them to the committed one). A
finding (an uncaught exception, a hang over --timeout seconds, memory over --rss-mb) stops
the run and leaves the input as crash-*/timeout-*/oom-* in --artifacts. The last line per
target says how many inputs ran and whether anything was found; exit status 1 if so.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def write_seeds() -> None:
    from fuzz import harness, seeds

    for target, files in seeds.all_seeds().items():
        d = harness.CORPUS / target
        d.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (d / f"seed-{name}").write_bytes(data)
            print(f"{d / ('seed-' + name)}: {len(data)} bytes")


def instrument(atheris, prefixes: tuple[str, ...]) -> int:
    """Add coverage instrumentation to every function and method of the loaded modules named
    by `prefixes` (atheris.instrument_imports misses modules the editable install's import
    hook loads; instrument_all takes far longer, instrumenting numpy and jinja2 as well)."""
    import inspect
    import types

    seen, n = set(), 0

    def one(f) -> None:
        nonlocal n
        f = inspect.unwrap(f)
        if isinstance(f, types.FunctionType) and id(f.__code__) not in seen:
            seen.add(id(f.__code__))
            atheris.instrument_func(f)
            n += 1
    for name, mod in list(sys.modules.items()):
        if not name.startswith(prefixes) or mod is None:
            continue
        for obj in list(vars(mod).values()):
            if getattr(obj, "__module__", None) != name:
                continue
            if inspect.isclass(obj):
                for v in list(vars(obj).values()):
                    one(v.__func__ if isinstance(v, (staticmethod, classmethod)) else
                        v.fget if isinstance(v, property) else v)
            else:
                one(obj)
    return n


def run_one(a: argparse.Namespace) -> int:
    """In this process: atheris over one target (libFuzzer exits the process when done)."""
    import atheris

    import isaforge  # noqa: F401
    import isaforge.formats  # noqa: F401
    from fuzz import harness

    harness.warm_up(a.target)  # import every module the target reaches, then instrument them
    instrument(atheris, ("isaforge", "fuzz", "jinja2"))

    if a.target not in harness.TARGETS:
        sys.exit(f"fuzz.py: unknown target {a.target!r}; known: {', '.join(harness.TARGETS)}")
    work = Path(tempfile.mkdtemp(prefix="isaforge-fuzz-work-"))
    os.environ["ISAFORGE_FUZZ_DIR"] = str(work)
    target = a.target

    def one_input(data: bytes) -> None:
        harness.check(target, data)

    scratch = Path(a.scratch or tempfile.mkdtemp(prefix=f"isaforge-fuzz-{target}-"))
    scratch.mkdir(parents=True, exist_ok=True)
    corpus = harness.CORPUS / target
    if target == "planted":
        corpus = scratch / "seed"
        corpus.mkdir(exist_ok=True)
        (corpus / "seed").write_bytes(b"PA")
    art = Path(a.artifacts)
    art.mkdir(parents=True, exist_ok=True)
    dirs = [str(corpus)] if a.grow else [str(scratch), str(corpus)]
    argv = [sys.argv[0], *dirs, f"-max_total_time={a.seconds}", f"-timeout={a.timeout}",
            f"-rss_limit_mb={a.rss_mb}", f"-malloc_limit_mb={a.rss_mb}",
            f"-artifact_prefix={art}/{target}-", "-print_final_stats=1"]
    if a.runs:
        argv.append(f"-runs={a.runs}")
    atheris.Setup(argv, one_input)
    atheris.Fuzz()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("target", nargs="?")
    p.add_argument("--all", action="store_true", help="every target, one process each")
    p.add_argument("--list", action="store_true")
    p.add_argument("--write-seeds", action="store_true")
    p.add_argument("--seconds", type=int, default=60, help="per target")
    p.add_argument("--runs", type=int, default=0, help="stop after this many inputs (0: time)")
    p.add_argument("--timeout", type=int, default=20, help="seconds per input before a hang")
    p.add_argument("--rss-mb", type=int, default=1536)
    p.add_argument("--scratch", help="where new interesting inputs go (default: a temp dir)")
    p.add_argument("--grow", action="store_true", help="add new inputs to the committed corpus")
    p.add_argument("--artifacts", default=str(Path(tempfile.gettempdir()) / "isaforge-fuzz"))
    a = p.parse_args(argv)
    if a.target and not a.all:  # before anything imports isaforge uninstrumented
        return run_one(a)
    from fuzz import harness

    if a.list:
        print("\n".join(harness.TARGETS))
        return 0
    if a.write_seeds:
        write_seeds()
        return 0
    if not a.all:
        p.error("give a target, --all, --list or --write-seeds")
    found = 0
    for t in harness.TARGETS:
        cmd = [sys.executable, __file__, t, f"--seconds={a.seconds}", f"--timeout={a.timeout}",
               f"--rss-mb={a.rss_mb}", f"--artifacts={a.artifacts}", f"--runs={a.runs}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        runs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", r.stderr)
        n = runs[-1] if runs else "?"
        if r.returncode:
            found += 1
            tail = "\n".join(r.stderr.strip().splitlines()[-25:])
            print(f"{t}: FINDING after {n} inputs (exit {r.returncode}):\n{tail}", flush=True)
        else:
            print(f"{t}: {n} inputs in {a.seconds} s, no finding", flush=True)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
