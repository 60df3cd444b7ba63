"""Alternating schedules: configurations run A B C A B C ..., never one block after another,
and the first `warmup` cycles are measured but discarded."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def alternate(n_configs: int, reps: int, warmup: int = 1) -> list[tuple[int, int]]:
    """(cycle, config index) in run order: every config once per cycle, cycles in order;
    cycles < warmup are the warm-up."""
    if n_configs < 0 or reps < 1 or warmup < 0:
        raise ValueError(f"need n_configs >= 0, reps >= 1, warmup >= 0 (got {n_configs}, "
                         f"{reps}, {warmup})")
    return [(c, i) for c in range(warmup + reps) for i in range(n_configs)]


def run_alternating(configs: Sequence[T], reps: int, measure: Callable[[T], object],
                    warmup: int = 1) -> list[list]:
    """Run measure(config) on the alternating schedule; per config, the kept samples in order
    (the warm-up cycles' results are dropped)."""
    kept: list[list] = [[] for _ in configs]
    for cycle, i in alternate(len(configs), reps, warmup):
        value = measure(configs[i])
        if cycle >= warmup:
            kept[i].append(value)
    return kept


def mean_std(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one sample)."""
    if not xs:
        return float("nan"), float("nan")
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)
