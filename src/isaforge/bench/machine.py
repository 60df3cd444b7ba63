"""What ran the benchmark: CPU, features, kernel tiers and their kernels, versions, commit,
and how busy the machine was."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path


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


def machine_info() -> dict:
    """The machine section of a bench JSON document."""
    import numpy as np

    from .. import _bench
    from ..runtime.engine import runtime_info
    from ..settings import disabled_features, physical_cores

    info = runtime_info()
    commit, dirty = git_commit()
    return {
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
