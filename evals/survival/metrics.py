"""Metrics of one workload run, the same for the real engine and the simulator.

The six headline keys (``METRIC_KEYS``) are what outside checks compare: job completion time
(arrival to the end of the last turn) mean and p95, resume time to first token (tool return to
the first generated token of the next turn, queueing included) p50 and p95, recompute tokens
(prefill of tokens the session had computed before: KV lost to eviction or discard) and the
peak KV pool bytes. Percentiles interpolate linearly (numpy's default).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

METRIC_KEYS = ("jct_mean_s", "jct_p95_s", "resume_ttft_p50_s", "resume_ttft_p95_s", "recompute_tokens",
               "peak_pool_bytes")

TOKEN_KEYS = ("prefill_tokens", "new_tokens", "recompute_tokens", "evicted_tokens", "host_discarded_tokens",
              "discarded_tokens", "swap_out_bytes", "swap_in_bytes", "peak_pool_bytes", "turns")
"""What the memory logic decides, in tokens and bytes: equal in the simulator and the real replay
whenever both see events in the same order (``evals.survival.sim``)."""


def percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else None


@dataclass
class Recorder:
    """Accumulates what a run loop observes."""

    jct: dict[str, float] = field(default_factory=dict)
    resume_ttft: list[float] = field(default_factory=list)
    first_ttft: list[float] = field(default_factory=list)
    hol_wait: list[float] = field(default_factory=list)
    recompute_tokens: int = 0
    prefill_tokens: int = 0
    new_tokens: int = 0
    turns: int = 0
    peak_pool_bytes: int = 0
    _area: float = 0.0
    _last: tuple[float, int] | None = None
    t_end: float = 0.0

    def pool(self, now: float, used: int) -> None:
        """Sample the pool occupancy at ``now`` (time-weighted mean; peak)."""
        if self._last is not None:
            t, u = self._last
            self._area += u * max(0.0, now - t)
        self._last = (now, used)
        self.peak_pool_bytes = max(self.peak_pool_bytes, used)
        self.t_end = max(self.t_end, now)

    def metrics(self, pool_bytes: int, extra: dict[str, Any]) -> dict[str, Any]:
        jct = list(self.jct.values())
        span = self.t_end
        out: dict[str, Any] = {
            "jct_mean_s": float(np.mean(jct)) if jct else None,
            "jct_p95_s": percentile(jct, 95),
            "resume_ttft_p50_s": percentile(self.resume_ttft, 50),
            "resume_ttft_p95_s": percentile(self.resume_ttft, 95),
            "recompute_tokens": self.recompute_tokens,
            "peak_pool_bytes": self.peak_pool_bytes,
            "first_ttft_p50_s": percentile(self.first_ttft, 50),
            "hol_wait_mean_s": float(np.mean(self.hol_wait)) if self.hol_wait else None,
            "hol_wait_p95_s": percentile(self.hol_wait, 95),
            "pool_occupancy_mean": (self._area / span / pool_bytes) if span > 0 and pool_bytes > 0 else None,
            "prefill_tokens": self.prefill_tokens,
            "new_tokens": self.new_tokens,
            "sessions": len(jct),
            "turns": self.turns,
            "makespan_s": span,
        }
        out.update(extra)
        return out
