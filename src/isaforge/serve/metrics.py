"""/metrics in Prometheus' text format (written here: a handful of series, no dependency)."""

from __future__ import annotations

import bisect
import collections
import threading

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self, scheduler):
        self.sched = scheduler
        self._lock = threading.Lock()
        self.requests: collections.Counter = collections.Counter()  # (endpoint, status)
        self._ttft_seen = 0
        self.ttft_counts = [0] * (len(TTFT_BUCKETS) + 1)
        self.ttft_sum = 0.0

    def request(self, endpoint: str, status: int) -> None:
        with self._lock:
            self.requests[(endpoint, status)] += 1

    def _absorb_ttft(self) -> None:
        s = self.sched.stats
        total = s.ttft_count
        new = min(total - self._ttft_seen, len(s.ttft))
        for v in list(s.ttft)[len(s.ttft) - new:] if new > 0 else []:
            self.ttft_counts[bisect.bisect_left(TTFT_BUCKETS, v)] += 1
            self.ttft_sum += v
        self._ttft_seen = total

    def render(self) -> str:
        s = self.sched.stats
        with self._lock:
            self._absorb_ttft()
            out = [
                "# HELP isaforge_requests_total HTTP generation requests by endpoint and status.",
                "# TYPE isaforge_requests_total counter"]
            for (ep, st), n in sorted(self.requests.items()):
                out.append(f'isaforge_requests_total{{endpoint="{ep}",status="{st}"}} {n}')

            def one(name, kind, help_, value):
                out.extend([f"# HELP {name} {help_}", f"# TYPE {name} {kind}",
                            f"{name} {value}"])

            one("isaforge_queue_depth", "gauge", "Requests waiting for a slot.",
                self.sched.queue_depth)
            one("isaforge_active_slots", "gauge", "Sequence slots generating.", self.sched.active)
            one("isaforge_slots", "gauge", "Sequence slots (--parallel).", len(self.sched.slots))
            one("isaforge_rejected_total", "counter", "Requests refused with 429 (queue full).",
                s.rejected)
            one("isaforge_abandoned_total", "counter",
                "Requests whose clients left while they waited for a slot.", s.abandoned)
            one("isaforge_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
                s.prompt_tokens)
            one("isaforge_prefill_tokens_total", "counter",
                "Prompt tokens prefilled (after cached prefixes).", s.prefill_tokens)
            one("isaforge_generated_tokens_total", "counter", "Tokens sampled.",
                s.generated_tokens)
            one("isaforge_prefill_seconds_total", "counter", "Time spent prefilling.",
                f"{s.prefill_s:.6f}")
            one("isaforge_decode_seconds_total", "counter", "Time spent in decode steps.",
                f"{s.decode_s:.6f}")
            one("isaforge_decode_steps_total", "counter", "Batched decode steps.", s.decode_steps)
            one("isaforge_prefill_tokens_per_second", "gauge",
                "Prefill throughput since start.",
                f"{s.prefill_tokens / s.prefill_s:.3f}" if s.prefill_s else 0)
            one("isaforge_decode_tokens_per_second", "gauge",
                "Decode throughput since start (all slots together).",
                f"{s.decode_rows / s.decode_s:.3f}" if s.decode_s else 0)
            name = "isaforge_time_to_first_token_seconds"
            out += [f"# HELP {name} From submission to the first sampled token.",
                    f"# TYPE {name} histogram"]
            cum = 0
            for b, n in zip((*TTFT_BUCKETS, float("inf")), self.ttft_counts, strict=True):
                cum += n
                le = "+Inf" if b == float("inf") else f"{b:g}"
                out.append(f'{name}_bucket{{le="{le}"}} {cum}')
            out += [f"{name}_sum {self.ttft_sum:.6f}", f"{name}_count {cum}"]
        return "\n".join(out) + "\n"
