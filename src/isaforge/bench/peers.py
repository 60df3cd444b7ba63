"""Peers measured in the same run: llama.cpp through llama-cpp-python on the same GGUF file
(end to end), PyTorch int8 GEMM (torch._int_mm) and fp32 GEMV (kernel level). A missing
peer is listed as skipped with the reason, never dropped."""

from __future__ import annotations

import time
from dataclasses import dataclass

INSTALL_HINT = "bash scripts/install_peers.sh"


def llama_cpp_status() -> dict:
    """{"name", "status": ok|skipped, "reason", "version", "system_info"}."""
    row = {"name": "llama.cpp", "status": "skipped", "reason": None, "version": None,
           "system_info": None}
    try:
        import llama_cpp
    except ImportError as e:
        row["reason"] = f"llama_cpp (llama-cpp-python) is not installed ({e}); {INSTALL_HINT}"
        return row
    row["version"] = getattr(llama_cpp, "__version__", None)
    try:
        info = llama_cpp.llama_print_system_info()
        row["system_info"] = info.decode() if isinstance(info, bytes) else str(info)
    except Exception:  # noqa: BLE001 - informational only
        pass
    row["status"] = "ok"
    return row


def torch_status() -> dict:
    row = {"name": "pytorch", "status": "skipped", "reason": None, "version": None}
    try:
        import torch
    except ImportError as e:
        row["reason"] = f"torch is not installed ({e}); pip install torch (CPU build)"
        return row
    row.update(status="ok", version=torch.__version__)
    return row


@dataclass
class LlamaCppRunner:
    """One llama.cpp context at a thread count; pp() and tg() each start from an empty KV
    cache, as llama-bench does."""

    path: str
    threads: int
    n_ctx: int
    n_batch: int

    def __post_init__(self):
        import llama_cpp

        self.llm = llama_cpp.Llama(model_path=self.path, n_ctx=self.n_ctx, n_batch=self.n_batch,
                                   n_ubatch=self.n_batch, n_threads=self.threads,
                                   n_threads_batch=self.threads, verbose=False)
        self.n_vocab = self.llm.n_vocab()

    def pp(self, tokens: list[int]) -> float:
        """Seconds to evaluate the prompt (the first new token's logits are ready)."""
        self.llm.reset()
        t0 = time.perf_counter()
        self.llm.eval(tokens)
        return time.perf_counter() - t0

    def tg(self, tokens: list[int]) -> float:
        """Seconds for len(tokens) single-token decode steps from an empty context."""
        self.llm.reset()
        t0 = time.perf_counter()
        for t in tokens:
            self.llm.eval([t])
        return time.perf_counter() - t0

    def close(self) -> None:
        close = getattr(self.llm, "close", None)
        if close:
            close()


def torch_kernel_rows(shapes: list[tuple[str, int, int, int]], reps: int,
                      min_time: float) -> list[dict]:
    """PyTorch at the given (op, M, N, K) shapes: q8_gemm via torch._int_mm (int8 x int8 ->
    int32, no group scales: a lower bound on the work of a Q8 GEMM) and q8_gemv via fp32
    torch.mv (what an unquantized runtime does). Not compared for bits: different arithmetic."""
    import torch

    rows = []
    torch.manual_seed(0)
    for op, M, N, K in shapes:
        if op == "q8_gemm":
            name = "torch._int_mm"
            a = torch.randint(-127, 128, (M, K), dtype=torch.int8)
            b = torch.randint(-127, 128, (K, N), dtype=torch.int8)

            def fn(a=a, b=b):
                return torch._int_mm(a, b)
        elif op == "q8_gemv":
            name = "torch.mv fp32"
            w, x = torch.randn(N, K), torch.randn(K)

            def fn(w=w, x=x):
                return torch.mv(w, x)
        else:
            continue
        row = {"backend": "pytorch", "tier": name, "op": op, "M": M, "N": N, "K": K}
        try:
            fn()
            t0 = time.perf_counter()
            fn()
            one = max(time.perf_counter() - t0, 1e-7)
            iters = max(1, int(min_time / one))
            samples = []
            for _ in range(reps + 1):
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn()
                samples.append((time.perf_counter() - t0) / iters)
            row.update(status="ok", reason="not checked for bits (different arithmetic)",
                       iters=iters, samples_s=samples[1:])
        except (RuntimeError, ValueError) as e:
            row.update(status="skipped", reason=f"{name}: {e}", iters=0, samples_s=[])
        rows.append(row)
    return rows
