"""What ran the benchmark: CPU, features, kernel tiers and their kernels, versions, commit,
how busy the machine was, and the machine's slug: the folder of benchmarks/results that holds
its results (one file per benchmark)."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

# the source tree's results folder (an installed package without one writes under the cwd)
RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"

# x86 microarchitectures by (vendor, family, model); AMD family 25 spans Zen 3 and Zen 4
_INTEL = {85: "skylake-x", 106: "icelake-x", 108: "icelake-d", 143: "sapphirerapids",
          207: "emeraldrapids", 173: "graniterapids", 174: "graniterapids-d",
          175: "sierraforest", 140: "tigerlake", 141: "tigerlake", 151: "alderlake",
          154: "alderlake", 183: "raptorlake", 186: "raptorlake", 191: "raptorlake",
          170: "meteorlake", 172: "meteorlake", 189: "lunarlake", 197: "arrowlake",
          198: "arrowlake", 142: "kabylake", 158: "coffeelake", 94: "skylake", 63: "haswell",
          79: "broadwell"}
_ZEN4_MODELS = (range(0x10, 0x20), range(0x60, 0x80), range(0xA0, 0xB0))
# Arm cores by (implementer, part), as /proc/cpuinfo reports them
_ARM = {(0x41, 0xD0C): "neoverse-n1", (0x41, 0xD40): "neoverse-v1",
        (0x41, 0xD49): "neoverse-n2", (0x41, 0xD4F): "neoverse-v2",
        (0x41, 0xD8E): "neoverse-n3", (0x41, 0xD84): "neoverse-v3",
        (0x41, 0xD0B): "cortex-a76", (0x41, 0xD41): "cortex-a78", (0xC0, 0xAC3): "ampereone",
        (0x61, 0x0): "apple"}


def llc_bytes() -> int | None:
    """Size of the largest (last-level) cache of CPU 0 from sysfs, or None."""
    best = None
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            if (d / "type").read_text().strip() == "Instruction":
                continue
            text = (d / "size").read_text().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            size = int(text.rstrip("KMG")) * mult
        except ValueError:
            continue
        best = max(best or 0, size)
    return best


def git_commit() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the source tree this package runs from, or (None, None). Dirty:
    tracked files differ from the commit, outside benchmarks/results (the harness's own
    outputs: a run that saves there must not mark the next run of the same tree dirty)."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=5)
        if head.returncode != 0:
            return None, None
        st = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "-uno", "--",
                             ":/", ":(exclude,top)benchmarks/results"],
                            capture_output=True, text=True, timeout=5)
        return head.stdout.strip(), bool(st.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def steal_ms() -> float | None:
    """Milliseconds of CPU time the hypervisor has stolen from this VM's CPUs since boot (the
    `steal` column of /proc/stat's cpu line, all CPUs summed), None where there is none."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) * 1000.0 / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def cpu_identity() -> dict:
    """What names this CPU: vendor, family and model (x86) or implementer and part (Arm) from
    /proc/cpuinfo, the brand string elsewhere, and the features the C core found (hidden ones
    included: the slug names the machine, not one run's settings)."""
    ident: dict = {"arch": platform.machine().lower()}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    fields: dict = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    for key, name in (("vendor_id", "vendor"), ("model name", "name")):
        if key in fields:
            ident[name] = fields[key]
    for key, name in (("cpu family", "family"), ("model", "model"),
                      ("CPU implementer", "implementer"), ("CPU part", "part")):
        try:
            ident[name] = int(fields[key], 0)
        except (KeyError, ValueError):
            pass
    if "name" not in ident and sys.platform == "darwin":
        try:
            ident["name"] = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                           capture_output=True, text=True,
                                           timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        from .. import _native

        ident["features"] = _native.info(None, "")["features"]
    except (ImportError, AttributeError, TypeError):
        ident["features"] = fields.get("flags", fields.get("Features", "")).replace(" ", ",")
    return ident


def _uarch(c: dict) -> str:
    vendor, fam, model = c.get("vendor", ""), c.get("family"), c.get("model")
    if vendor in ("AuthenticAMD", "HygonGenuine") and fam is not None:
        if fam == 23:
            return "zen2" if (model or 0) >= 0x30 else "zen"
        if fam == 25:
            return "zen4" if any(model in r for r in _ZEN4_MODELS) else "zen3"
        if fam == 26:
            return "zen5"
        return f"amd-f{fam}m{model}"
    if vendor == "GenuineIntel" and fam is not None:
        return _INTEL.get(model, f"intel-f{fam}m{model}") if fam == 6 else \
            f"intel-f{fam}m{model}"
    if "implementer" in c:
        name = _ARM.get((c["implementer"], c.get("part", 0)))
        return name or f"arm-{c['implementer']:x}-{c.get('part', 0):x}"
    name = c.get("name", "")
    if name.startswith("Apple "):  # "Apple M4 Pro" -> apple-m4
        return "apple-" + name.split()[1].lower()
    return re.sub(r"[^a-z0-9]+", "-", c.get("arch") or "unknown").strip("-")


def _isa(features: str) -> str:
    f = set(features.split(","))
    for flag, name in (("amx_int8", "amx"), ("avx512f", "avx512"), ("avx2", "avx2"),
                       ("sme2", "sme2"), ("sve2", "sve2"), ("i8mm", "i8mm"),
                       ("asimddp", "dotprod"), ("asimd", "neon"), ("sse2", "sse2")):
        if flag in f:
            return name
    return "base"


def machine_slug(cpu: dict | None = None) -> str:
    """Short name of a machine, `<microarchitecture>-<widest int8 ISA>`: zen5-avx512,
    zen3-avx2, emeraldrapids-amx, neoverse-v2-sve2, apple-m4-sme2. `cpu` as cpu_identity()
    returns it (default: this machine's)."""
    c = cpu_identity() if cpu is None else cpu
    return f"{_uarch(c)}-{_isa(c.get('features', ''))}"


def results_dir(slug: str | None = None) -> Path:
    """benchmarks/results/<slug>/ of the source tree (of the cwd outside one)."""
    root = RESULTS if RESULTS.parent.is_dir() else Path.cwd() / "benchmarks" / "results"
    return root / (slug or machine_slug())


def save_path(arg: str | None, name: str) -> Path | None:
    """Where a benchmark writes its JSON: None when `arg` is None (not asked), the machine's
    results folder when `arg` is "" (a bare --save), else `arg` with {machine} replaced by the
    slug. The folder is created. A path must end in .json: `--save MODEL.gguf` (a bare --save
    before the model) must not overwrite the model."""
    if arg is None:
        return None
    if arg and not arg.endswith(".json"):
        raise ValueError(f"--save {arg}: a results file ends in .json (a bare --save goes "
                         f"after the model)")
    path = results_dir() / f"{name}.json" if arg == "" else \
        Path(arg.replace("{machine}", machine_slug()))
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def script_command(script: str, argv: list[str]) -> str:
    """The command line of a script under benchmarks/ as one retypes it."""
    import shlex

    return shlex.join(["python3", script, *argv])


def provenance(command: str, conditions: str | None = None) -> dict:
    """The record every results file carries: machine slug, command, commit, time, conditions
    (the bench documents hold the same in their own fields)."""
    import datetime

    commit, dirty = git_commit()
    return {"machine": machine_slug(), "command": command, "commit": commit, "dirty": dirty,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"), "conditions": conditions}


def machine_info() -> dict:
    """The machine section of a bench JSON document."""
    import numpy as np

    from .. import _bench
    from ..runtime.engine import runtime_info
    from ..settings import disabled_features, physical_cores

    info = runtime_info()
    commit, dirty = git_commit()
    return {
        "slug": machine_slug(),
        "cpu": info["cpu"],
        "features": info["features"],
        "disabled": info["disabled"],
        "notes": info["notes"],
        "logical_cores": os.cpu_count() or 1,
        "physical_cores": physical_cores(),
        "llc_bytes": llc_bytes(),
        "tiers": _bench.tiers(disabled_features()),
        "auto": {"decode": info["decode"], "prefill": info["prefill"]},
        "isaforge_version": info["version"],
        "git_commit": commit,
        "git_dirty": dirty,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "executable": sys.executable,
        "loadavg_start": loadavg(),
    }


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (MiB; Linux reports KiB)."""
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(rss / 1024 if sys.platform != "darwin" else rss / (1 << 20), 1)
