"""Peak resident memory of one generation, isaforge against llama.cpp, at the same context
(`isaforge run` on SmolLM2 held as CQ4 against llama.cpp on its Q4_0 file, say).

    python3 benchmarks/peak_rss.py --isaforge smol-cq4.isaf --llama SmolLM2...Q4_0.gguf \
        --ctx 4096 -n 32 -r 3 --save

Each run is its own process (so the figure is that process's peak, `ru_maxrss` from wait4):
isaforge through its CLI (`isaforge run FILE PROMPT -n N -t 0 --ctx C`), llama.cpp through
llama-cpp-python (`Llama(model_path, n_ctx=C)` then one chat completion of the same prompt, N
tokens at temperature 0; `isaforge run` applies the model's chat template too), both Python
processes. Runs alternate; the table gives each command's peaks."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

PROMPT = "Write a haiku about the sea."
LLAMA = ("import sys; from llama_cpp import Llama; "
         "m = Llama(model_path=sys.argv[1], n_ctx=int(sys.argv[2]), verbose=False); "
         "r = m.create_chat_completion([{'role': 'user', 'content': sys.argv[4]}], "
         "max_tokens=int(sys.argv[3]), temperature=0); "
         "print(r['choices'][0]['message']['content'])")


def run(cmd: list[str]) -> tuple[float, str]:
    """(peak RSS in MiB, stdout) of cmd run to completion (wait4's ru_maxrss). Output goes to
    temporary files, not pipes, so a child that fills one cannot block."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = status  # reaped here: Popen must not wait for it again
        out.seek(0), err.seek(0)
        if status:
            raise SystemExit(f"{' '.join(cmd[:4])} ... failed ({status}):\n{err.read()[-2000:]}")
        return ru.ru_maxrss / 1024, out.read()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--isaforge", action="append", default=[], help="a model isaforge runs "
                    "(repeatable)")
    ap.add_argument("--llama", action="append", default=[], help="a GGUF llama.cpp runs")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-r", type=int, default=3, help="rounds")
    ap.add_argument("--save", nargs="?", const="", metavar="FILE.json",
                    help="also write the JSON ({machine} in FILE: this machine's slug; bare: "
                    "benchmarks/results/<machine>/peak_rss.json)")
    ap.add_argument("--conditions", default=None, help="free text stored with the results")
    a = ap.parse_args(argv)
    from isaforge.bench.machine import machine_info, provenance, save_path, script_command

    out = save_path(a.save, "peak_rss")
    for f in a.isaforge + a.llama:
        if not os.path.isfile(f):
            ap.error(f"{f}: no such file")
    cmds = [(f"isaforge {os.path.basename(f)}",
             [sys.executable, "-m", "isaforge", "run", f, PROMPT, "-n", str(a.n), "-t", "0",
              "--ctx", str(a.ctx)]) for f in a.isaforge]
    cmds += [(f"llama.cpp {os.path.basename(f)}",
              [sys.executable, "-c", LLAMA, f, str(a.ctx), str(a.n), PROMPT]) for f in a.llama]
    peaks: dict[str, list[float]] = {k: [] for k, _ in cmds}
    texts = {}
    for _ in range(a.r):
        for k, c in cmds:
            mib, text = run(c)
            peaks[k].append(round(mib, 1))
            texts[k] = text.strip()[:200]
    print(f"peak RSS (MiB), {a.r} rounds alternating, ctx {a.ctx}, {a.n} tokens")
    print("| command | peaks | min |")
    print("|---|---|---:|")
    for k in peaks:
        print(f"| {k} | {' / '.join(f'{p:.1f}' for p in peaks[k])} | {min(peaks[k]):.1f} |")
    if out is not None:
        argv = sys.argv[1:] if argv is None else argv
        doc = {"provenance": provenance(script_command("benchmarks/peak_rss.py", argv),
                                        a.conditions),
               "machine": machine_info(), "ctx": a.ctx, "n": a.n, "prompt": PROMPT,
               "argv": sys.argv, "peaks_mib": peaks, "texts": texts,
               "commands": {k: c for k, c in cmds}}
        out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
