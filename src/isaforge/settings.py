"""The one place isaforge reads its environment (tinygrad's habit: settings through one helper)."""

from __future__ import annotations

import argparse
import os
import sys
from functools import lru_cache
from pathlib import Path


def getenv(name: str, default: str = "") -> str:
    """Value of ISAFORGE_<name>, or default."""
    return os.environ.get(f"ISAFORGE_{name}", default)


@lru_cache(maxsize=1)
def physical_cores() -> int:
    """Physical cores this process may run on (SMT siblings counted once)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
    cores = set()
    for cpu in cpus:
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{base}/core_id") as f1, open(f"{base}/physical_package_id") as f2:
                cores.add((f2.read().strip(), f1.read().strip()))
        except OSError:
            return max(1, len(cpus))
    return max(1, len(cores))


def kernel_tier() -> str | None:
    """ISAFORGE_KERNEL: a kernel tier every new engine runs (None or "auto": the best per op)."""
    return getenv("KERNEL") or None


def disabled_features() -> str:
    """ISAFORGE_DISABLE_FEATURES: CPU features (comma-separated names as `isaforge info`
    prints them) that kernel selection treats as missing."""
    return getenv("DISABLE_FEATURES")


def env_int(name: str, default: int, low: int, meaning: str = "") -> int:
    """ISAFORGE_<name> as an integer >= low, else default; a bad value names the variable."""
    value = getenv(name).strip()
    if not value:
        return default
    note = f" ({meaning})" if meaning else ""
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"ISAFORGE_{name}={value!r} is not an integer{note}") from None
    if n < low:
        raise ValueError(f"ISAFORGE_{name}={value!r} must be >= {low}{note}")
    return n


def int_at_least(low: int):
    """argparse type of the command line's integer flags: an integer >= low."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {v}")
        return v

    return parse


def default_threads() -> int:
    """ISAFORGE_THREADS if set, else the number of physical cores."""
    return env_int("THREADS", 0, 1) or physical_cores()


def _positive(name: str, default: float, kind=float):
    value = getenv(name)
    if not value:
        return default
    try:
        v = kind(value)
    except ValueError:
        raise ValueError(f"ISAFORGE_{name}={value!r} is not a {kind.__name__}") from None
    if not v > 0:
        raise ValueError(f"ISAFORGE_{name}={value!r} must be > 0")
    return v


# Decode matmuls' thread budget: one thread per this many output rows (at least one, at most
# the pool); 0 runs every matmul on the whole pool. On a busy 2-core AVX2 VM no rule (256, 512,
# 1024, 2048 rows per thread) beat the whole pool beyond the noise (README, "Performance").
GEMV_ROWS_PER_THREAD = 0


def gemv_rows_per_thread() -> int:
    """ISAFORGE_GEMV_ROWS_PER_THREAD (an integer >= 0; 0: no budget, the whole pool), else
    GEMV_ROWS_PER_THREAD: decode matmuls run on one thread per that many output rows."""
    return env_int("GEMV_ROWS_PER_THREAD", GEMV_ROWS_PER_THREAD, 0,
                   "output rows per thread of a decode matmul, 0 for no budget")


def par_min_work() -> int:
    """ISAFORGE_PAR_MIN_WORK (multiply-adds, an integer >= 0; 0: the core's default, 2^17):
    ops with less work run on the calling thread alone."""
    return env_int("PAR_MIN_WORK", 0, 0,
                   "multiply-adds below which an op runs on one thread, 0 for the default")


def weight_arena() -> bool:
    """ISAFORGE_WEIGHT_ARENA (0 or 1; default 1 on Linux): copy the blocks a model runs in place
    (its K-quant, legacy and IQ4 matrices) from the mapped file into the core's weight arena,
    whose 2 MiB pages decode streams faster than the file's 4 KiB ones (docs/performance.md)."""
    value = getenv("WEIGHT_ARENA").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"ISAFORGE_WEIGHT_ARENA={value!r} must be 0 or 1 (copy the file's "
                         "blocks into 2 MiB pages at load)")
    return value == "1" if value else sys.platform.startswith("linux")


# SME2 hybrid split: in each Q8 matmul of a model whose kernels are SME2, workers 0..k-1 run
# the SME2 (streaming-mode) kernel and the rest the non-streaming dotprod/neon one, with the
# same result bits. 0 (no split) until it is measured on real SME2 silicon (tested under qemu).
SME2_WORKERS = 0


def sme2_workers() -> int:
    """ISAFORGE_SME2_WORKERS (an integer >= 0; 0: every worker runs the model's own kernels),
    else SME2_WORKERS: streaming-mode workers per Q8 matmul of an SME2 model."""
    return env_int("SME2_WORKERS", SME2_WORKERS, 0,
                   "SME2 streaming-mode workers per matmul, 0 for no split")


TEMPLATE_CHARS_PER_POSITION = 16


def template_max_chars(ctx: int | None = None) -> int:
    """ISAFORGE_TEMPLATE_MAX_CHARS, else 16 characters per context position (ctx, default
    4096): the most a chat template may render (a prompt that long cannot fit anyway)."""
    return _positive("TEMPLATE_MAX_CHARS",
                     TEMPLATE_CHARS_PER_POSITION * max(ctx or 4096, 256), int)


def template_seconds() -> float:
    """ISAFORGE_TEMPLATE_SECONDS (default 1): the wall time a chat template may render for."""
    return _positive("TEMPLATE_SECONDS", 1.0)


def cache_dir() -> Path:
    """Where pulled models live: ISAFORGE_CACHE, else $XDG_CACHE_HOME/isaforge, else
    ~/.cache/isaforge."""
    value = getenv("CACHE")
    if value:
        return Path(value).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "isaforge"


DEFAULT_MODEL = "smollm2-135m-instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path() -> Path:
    """The default model's file in the cache (it may not have been pulled yet)."""
    return cache_dir() / "models" / SMOLLM2_GGUF
