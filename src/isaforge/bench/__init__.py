"""`isaforge bench`: llama-bench-style end-to-end runs, kernel-level timing, measured limits
(memory bandwidth, peak int8), peers, plots, energy and the README's performance table.

Every number is one of many samples: configurations alternate (A B A B ...), the first cycle
is a discarded warm-up, and the JSON keeps every sample with the machine that produced it."""

from .schedule import alternate, run_alternating

__all__ = ["alternate", "run_alternating"]
