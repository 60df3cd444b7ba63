"""The SentencePiece merge loop, one for both vocabularies that merge by score: llama2.c's
(run.c's encode) and llama.cpp's "llama" GGUF tokenizer."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from itertools import count
from typing import Any


def merge_by_score(symbols: list, pair: Callable[[Any, Any], tuple[float, Any] | None]) -> list:
    """Merge adjacent symbols until no pair merges, each time the pair with the best score,
    leftmost on ties (run.c's scan; llama.cpp's queue). `pair(a, b)` is (score, merged
    symbol), or None when a and b do not merge. Returns the symbols left, in order.

    A lazy heap: nodes keep their original index, which orders them as positions do; an
    entry is live while its two nodes are still adjacent and hold the symbols it was made of.
    """
    n = len(symbols)
    if n < 2:
        return list(symbols)
    sym, nxt, prv = list(symbols), list(range(1, n + 1)), list(range(-1, n - 1))
    heap: list[tuple] = []
    tie = count()  # entries with equal (score, i, j) never compare their symbols

    def push(i: int, j: int) -> None:
        m = pair(sym[i], sym[j])
        if m is not None:
            heapq.heappush(heap, (-m[0], i, j, next(tie), sym[i], sym[j], m[1]))

    for i in range(n - 1):
        push(i, i + 1)
    while heap:
        _, i, j, _, a, b, merged = heapq.heappop(heap)
        if nxt[i] != j or sym[i] != a or sym[j] != b:
            continue  # stale (a dead node has nxt == -1)
        sym[i], k = merged, nxt[j]
        nxt[i], nxt[j] = k, -1
        if k < n:
            prv[k] = i
            push(i, k)
        if prv[i] >= 0:
            push(prv[i], i)
    out, i = [], 0
    while i < n:
        out.append(sym[i])
        i = nxt[i]
    return out
