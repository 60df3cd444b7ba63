#!/usr/bin/env python3
"""Old commit vs this tree, in one run, alternating: `isaforge bench` pp512 and tg128 at 1 and
2 threads with the best tier (auto), and the peak RSS of `isaforge run` on the same model.

  python3 benchmarks/ab/old_vs_new.py --old-rev REV [--model PATH] [--rounds 3] [--save]

A bare --save writes benchmarks/results/<machine>/ab/old_vs_new.json.

The old commit is exported with `git archive`, built as a wheel and installed with
`pip install --target` into a scratch folder (nothing replaces the editable install); it runs
as `python3 -S` with that folder first on PYTHONPATH, so the editable install's import hook
stays out. Each round runs old then new (then new then old in the next round), one
repetition per bench call; the figures are the median over rounds of each build's samples.
Peak RSS is the child's ru_maxrss of `isaforge run MODEL -t 0 -n 32 PROMPT`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# every site folder this interpreter imports from (a venv's and, with
# --system-site-packages, the base interpreter's, where numpy may live), minus this tree
SITE = ":".join(dict.fromkeys(
    [sysconfig.get_paths()["purelib"]]
    + [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))
       and not Path(p).resolve().is_relative_to(ROOT)]))


def build_old(rev: str, dest: Path) -> Path:
    src, pkg = dest / "src", dest / "pkg"
    if (pkg / "isaforge").is_dir():
        return pkg
    src.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(dest / "wheel"), str(src)], check=True)
    whl = next((dest / "wheel").glob("isaforge-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(pkg), str(whl)], check=True)
    return pkg


def command(build: str, pkg: Path | None, args: list[str]) -> tuple[list[str], dict]:
    env = dict(os.environ)
    if build == "old":
        env["PYTHONPATH"] = f"{pkg}:{SITE}"
        return [sys.executable, "-S", "-m", "isaforge", *args], env
    return [sys.executable, "-m", "isaforge", *args], env


def bench_once(build, pkg, model, threads) -> dict[tuple[str, int], float]:
    cmd, env = command(build, pkg, ["bench", model, "-p", "512", "-n", "128", "-r", "1",
                                    "--threads", threads, "--no-limits", "-q", "-o", "json"])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    doc = json.loads(out)
    return {(r["test"], r["threads"]): r["mean_tps"] for r in doc["results"]
            if r.get("backend") == "isaforge" and r.get("status") == "ok"}


def rss_once(build, pkg, model) -> float:
    """Peak RSS (MiB) of one `isaforge run`, measured by a fresh wrapper process whose only
    child it is (ru_maxrss of children is a maximum over all of them)."""
    cmd, env = command(build, pkg, ["run", model, "-t", "0", "-n", "32",
                                    "Write a haiku about the sea."])
    code = ("import resource,subprocess,sys;subprocess.run(sys.argv[1:],capture_output=True,"
            "check=True);print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, *cmd], env=env, capture_output=True,
                         text=True, check=True).stdout
    return int(out) / 1024


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--old-rev", required=True)
    p.add_argument("--model", default=str(Path.home() / ".cache/isaforge/models/"
                                          "SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "isaforge-old-vs-new"))
    p.add_argument("--save", nargs="?", const="", metavar="FILE.json",
                   help="also write the JSON (bare: benchmarks/results/<machine>/ab/)")
    p.add_argument("--rss-only", action="store_true",
                   help="only the peak RSS of `isaforge run` (no timing: fine on a busy machine)")
    a = p.parse_args()
    from isaforge.bench.machine import provenance, save_path

    out = save_path(a.save, "ab/old_vs_new")
    work = Path(a.work) / a.old_rev
    try:
        pkg = build_old(a.old_rev, work)
    except subprocess.CalledProcessError as e:
        cmd = " ".join(map(str, e.cmd[:4]))
        print(f"old_vs_new.py: building {a.old_rev} failed ({cmd} ... exited {e.returncode}; "
              "its output is above). The wheel is built without isolation: this Python needs "
              "the build requirements (pip install scikit-build-core).", file=sys.stderr)
        return 2
    new_rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
    samples: dict[str, dict] = {"old": {}, "new": {}}
    rss: dict[str, list[float]] = {"old": [], "new": []}
    for r in range(a.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for b in order:
            for k, v in ({} if a.rss_only else bench_once(b, pkg, a.model, a.threads)).items():
                samples[b].setdefault(k, []).append(v)
            rss[b].append(rss_once(b, pkg, a.model))
            print(f"round {r + 1}/{a.rounds} {b}: done", file=sys.stderr, flush=True)
    rows = []
    for test, threads in sorted(samples["new"], key=lambda k: (k[0][:2] != "pp", k)):
        o = statistics.median(samples["old"].get((test, threads), [float("nan")]))
        n = statistics.median(samples["new"][(test, threads)])
        rows.append({"test": test, "threads": threads, "old_tps": round(o, 2),
                     "new_tps": round(n, 2), "new_over_old": round(n / o, 3),
                     "old_samples": samples["old"].get((test, threads)),
                     "new_samples": samples["new"][(test, threads)]})
    command = " ".join(["python3 benchmarks/ab/old_vs_new.py", *sys.argv[1:]])
    doc = {"what": f"build {a.old_rev} vs build {new_rev}: isaforge bench pp512 and tg128 with "
                   "the best tier, and the peak RSS of isaforge run, alternating",
           "provenance": provenance(command), "kind": "old_vs_new",
           "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": command,
           "old_rev": a.old_rev, "new_rev": new_rev, "model": a.model,
           "machine": {"cpu": platform.processor() or platform.machine(),
                       "nproc": os.cpu_count()},
           "rounds": a.rounds, "results": rows,
           "peak_rss_mib": {"old": statistics.median(rss["old"]),
                            "new": statistics.median(rss["new"]),
                            "old_samples": rss["old"], "new_samples": rss["new"]}}
    print("| test | threads | old t/s | new t/s | new/old |\n| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['test']} | {r['threads']} | {r['old_tps']} | {r['new_tps']} | "
              f"{r['new_over_old']} |")
    pr = doc["peak_rss_mib"]
    print(f"\npeak RSS of `isaforge run` (MiB): old {pr['old']:.1f}, new {pr['new']:.1f}")
    if out is not None:
        out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
