"""Shared pieces of the built-in survival policies: gap estimates from the shared event log.

Each function is written so that a seed program can repeat it line for line (the seeds are
single files in the restricted language); the conformance test checks that they agree.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from search_spaces.survival.api import SessionView, SurvivalView

Decide = Callable[[SurvivalView, Any], dict[str, dict[str, Any]]]


@dataclass(frozen=True)
class SurvivalFamily:
    """A built-in survival policy.

    Attributes:
        name: registry name (also its seed's name).
        source: the paper or system it follows.
        params: the frozen parameter dataclass (defaults = the seed's ``DEFAULTS``).
        decide: ``(view, params) -> {session id: decision dict}``.
        space: ``(optuna trial) -> params``.
        summary: one line for listings.
    """

    name: str
    source: str
    params: type
    decide: Decide
    space: Callable[[Any], dict[str, Any]]
    summary: str


def gap_values(view: SurvivalView, s: SessionView, min_observations: int) -> tuple[float, ...] | None:
    """Observed durations to estimate ``s``'s pause from: its tool's when there are at least
    ``min_observations``, else all tools' when there are enough, else ``None`` (cold start)."""
    own = view.durations(s.tool)
    if len(own) >= min_observations:
        return own
    if len(view.all_durations) >= min_observations:
        return view.all_durations
    return None


def reuse_probability(view: SurvivalView, s: SessionView, horizon_s: float, min_observations: int,
                      cold_mean_s: float) -> float:
    """Probability that ``s`` resumes within ``horizon_s`` from now, given it has waited ``s.waited_s``.

    With the harness's estimate, the remaining gap ``R = max(0, expected - waited)`` is taken as
    the mean of an exponential (``R = 0``: 1.0). Otherwise the empirical CDF F of the log's
    durations gives ``(F(w + H) - F(w)) / (1 - F(w))`` (1.0 once every observed gap was shorter);
    with too few observations, an exponential of mean ``cold_mean_s``.
    """
    if s.expected_gap_s is not None:
        rest = max(0.0, s.expected_gap_s - s.waited_s)
        return 1.0 if rest <= 0 else 1.0 - math.exp(-horizon_s / rest)
    values = gap_values(view, s, min_observations)
    if values is None:
        return 1.0 - math.exp(-horizon_s / cold_mean_s)
    now = view.ecdf(values, s.waited_s)
    tail = 1.0 - now
    if tail <= 0:
        return 1.0
    return (view.ecdf(values, s.waited_s + horizon_s) - now) / tail


def expected_remaining(view: SurvivalView, s: SessionView, min_observations: int, cold_mean_s: float) -> float:
    """Expected seconds until ``s`` resumes: the harness's estimate minus the time waited; else
    the mean residual ``E[D - w | D > w]`` of the log's durations (0.0 when none is longer); with
    too few observations, ``cold_mean_s`` (memoryless)."""
    if s.expected_gap_s is not None:
        return max(0.0, s.expected_gap_s - s.waited_s)
    values = gap_values(view, s, min_observations)
    if values is None:
        return cold_mean_s
    rest = [v - s.waited_s for v in values if v > s.waited_s]
    return sum(rest) / len(rest) if rest else 0.0


def resident_bytes(view: SurvivalView, s: SessionView) -> int:
    return s.resident_tokens * view.bytes_per_token
