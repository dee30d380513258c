"""The survival search's archive, scores and paired comparison over traces.

A survival candidate is scored on a set of traces by the simulator: per trace, the p95 resume
time to first token (``resume_ttft_p95_s``) and the tokens recomputed (``recompute_tokens``), both
minimised. A :class:`SimScore` is their mean over the traces (every trace weighs the same, so a
score on the first ``k`` traces is comparable with the same score of another policy on those ``k``
traces: the cascade's test).

The archive is the shared one (``rsi.archive``, as the cache track's: ids, lineage, status and reason of
failures, experts beside evolved candidates) so that the same Pareto helpers (``rsi.pareto``) and
the same operator bandit (``rsi.proposers.bandit``) work on it: a candidate's ``point`` is
``(resume_ttft_p95_s, -recompute_tokens)``, the orientation those helpers use (first coordinate
down, second up); the hypervolume's reference on the second coordinate is then minus the
reference recompute count.

Paired comparison (:func:`paired_over_traces`): two policies on the same ``n`` held-out traces
give per trace values ``a_t`` and ``b_t``; the statistic is the difference of means
``mean(a) - mean(b)`` and the relative change ``100 * (sum(a) / sum(b) - 1)`` (``nan`` when
``sum(b)`` is 0); their 95% intervals are the 2.5th and 97.5th percentiles over ``samples`` paired
bootstrap resamples of the traces, drawn as in ``evals.paired``
(``numpy.random.default_rng(seed).integers(0, n, (samples, n))``, one draw for both policies).
The unit is the trace, not the session: sessions of one trace share the pool, the host tier and
the scheduler, so they are not independent draws, and a p95 exists only per trace.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from engine.errors import AKVError
from evals.paired import MIN_TASKS, PairingError, check_samples, stratified_draws
from rsi.archive import CandidateArchive, Record, candidate_id
from rsi.pareto import hypervolume

TTFT = "resume_ttft_p95_s"
RECOMPUTE = "recompute_tokens"
EXTRA = ("jct_mean_s", "peak_pool_bytes")
__all__ = ["RECOMPUTE", "TTFT", "PairedMetric", "SimScore", "SurvivalArchive", "SurvivalCandidate",
           "candidate_id", "paired_over_traces", "score_of"]


@dataclass(frozen=True)
class SimScore:
    """Means over traces of the simulator's metrics (``failed``: traces whose run failed; then no score)."""

    resume_ttft_p95_s: float
    recompute_tokens: float
    jct_mean_s: float
    peak_pool_bytes: float
    n_traces: int
    failed: int = 0
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.n_traces > 0 and math.isfinite(self.resume_ttft_p95_s)

    def to_dict(self) -> dict[str, Any]:
        return {TTFT: self.resume_ttft_p95_s, RECOMPUTE: self.recompute_tokens, "jct_mean_s": self.jct_mean_s,
                "peak_pool_bytes": self.peak_pool_bytes, "n_traces": self.n_traces, "failed": self.failed,
                "error": self.error}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SimScore:
        return cls(float(d[TTFT]), float(d[RECOMPUTE]), float(d["jct_mean_s"]), float(d["peak_pool_bytes"]),
                   int(d["n_traces"]), int(d.get("failed", 0)), str(d.get("error", "")))


def score_of(runs: Sequence[Mapping[str, Any]]) -> SimScore:
    """The mean of each metric over ``runs`` (one simulator result per trace); a failed run (or one
    without a resumed turn, whose p95 does not exist) makes the score not ok, with the first reason."""
    bad = [r for r in runs if not r.get("ok") or r.get(TTFT) is None]
    if bad or not runs:
        first = bad[0] if bad else {}
        reason = str(first.get("error") or ("no resumed turn in the trace" if first.get("ok") else "no traces"))
        return SimScore(math.nan, math.nan, math.nan, math.nan, len(runs), max(1, len(bad)), reason)
    n = len(runs)
    mean = {k: sum(float(r[k]) for r in runs) / n for k in (TTFT, RECOMPUTE, *EXTRA)}
    return SimScore(mean[TTFT], mean[RECOMPUTE], mean["jct_mean_s"], mean["peak_pool_bytes"], n)


@dataclass(frozen=True)
class SurvivalCandidate(Record[SimScore]):
    """A survival-track entry (``rsi.archive.Record`` with :class:`SimScore` as its metrics).

    ``program``: the program's source hash (``programs/<sha>.py``), or the family name for an expert
    (a built-in family tuned with the same trial budget); ``spec``: ``program`` or the family name.
    """

    @classmethod
    def _metrics(cls, d: dict[str, Any]) -> SimScore:
        return SimScore.from_dict(d)

    @property
    def point(self) -> tuple[float, float]:
        """``(p95 resume TTFT, -recompute tokens)`` on train: ``rsi.pareto``'s orientation."""
        assert self.train is not None
        return (self.train.resume_ttft_p95_s, -self.train.recompute_tokens)

    @property
    def rank_key(self) -> tuple[float, float, str, str]:
        """How "the best" is chosen on train: lowest p95 resume TTFT, then fewest recompute tokens."""
        assert self.train is not None
        return (self.train.resume_ttft_p95_s, self.train.recompute_tokens, self.label, self.id)


@dataclass
class SurvivalArchive(CandidateArchive[SurvivalCandidate]):
    """The survival track's archive (``rsi.archive.CandidateArchive``; the file says ``kind: survival``)."""

    KIND: ClassVar[str | None] = "survival"

    @classmethod
    def of_run(cls, run_dir: str | Path) -> SurvivalArchive:
        """The archive of the survival run in ``run_dir``.

        Raises:
            AKVError: no ``archive.json`` yet (the evolution writes it once its baselines are scored).
            RunDirError: the file is not a survival archive (:meth:`load`).
        """
        path = Path(run_dir) / "archive.json"
        if not path.is_file():
            raise AKVError(f"{run_dir} has no archive.json yet: the evolution has not scored its baselines (wait for "
                           "them, or run it again in the same directory)", field="run_dir", value=str(run_dir))
        return cls.load(path)

    @classmethod
    def _row(cls, d: dict[str, Any]) -> SurvivalCandidate:
        return SurvivalCandidate.from_dict(d)

    def hypervolume(self, ref: tuple[float, float]) -> float:
        """Area dominated by the evolved candidates below ``ref`` = (p95 TTFT, recompute tokens)."""
        return hypervolume([c.point for c in self.scored()], ref[0], -ref[1])

    def best(self, experts: bool = False) -> SurvivalCandidate | None:
        """The best on train (:attr:`SurvivalCandidate.rank_key`) among evolved or expert candidates."""
        return min(self.scored(experts), key=lambda c: c.rank_key, default=None)


@dataclass(frozen=True)
class PairedMetric:
    """One metric of a paired comparison over traces (see the module docstring)."""

    mean_a: float
    mean_b: float
    delta: float
    delta_ci95: tuple[float, float]
    delta_pct: float
    delta_pct_ci95: tuple[float, float]
    n_traces: int

    @property
    def significant(self) -> bool:
        """The interval of the difference excludes 0 and at least ``evals.paired.MIN_TASKS`` traces were paired."""
        low, high = self.delta_ci95
        return (low > 0 or high < 0) and self.n_traces >= MIN_TASKS

    def to_dict(self) -> dict[str, Any]:
        return {"mean_a": self.mean_a, "mean_b": self.mean_b, "delta": self.delta, "delta_ci95": list(self.delta_ci95),
                "delta_pct": self.delta_pct, "delta_pct_ci95": list(self.delta_pct_ci95), "n_traces": self.n_traces,
                "significant": self.significant}


def paired_over_traces(a: Sequence[float], b: Sequence[float], *, samples: int, seed: int) -> PairedMetric:
    """Difference and relative change of ``a`` against ``b`` over paired traces, with 95% intervals.

    Raises:
        PairingError: lengths differ, no traces, a value is not finite, or ``samples`` < 100.
    """
    return pooled_over_traces([(a, b)], samples=samples, seed=seed)


def pooled_over_traces(groups: Sequence[tuple[Sequence[float], Sequence[float]]], *, samples: int,
                       seed: int) -> PairedMetric:
    """:func:`paired_over_traces` over the union of ``groups`` (each a run's paired traces), each
    resample drawing every group's traces from that group, in order (``evals.paired.pooled_bootstrap``'s
    stratified draw; one group gives exactly :func:`paired_over_traces`).

    Raises:
        PairingError: no group, a group whose sides differ in length or are empty, a value that is not
            finite, or ``samples`` < 100.
    """
    if not groups:
        raise PairingError("no comparisons to pool", field="groups", value=0)
    for a, b in groups:
        if len(a) != len(b) or not a:
            raise PairingError(f"need the same non-zero number of traces on both sides, got {len(a)} and {len(b)}",
                               field="traces", value=len(a))
    check_samples(samples)
    x = np.concatenate([np.asarray(a, dtype=np.float64) for a, _ in groups])
    y = np.concatenate([np.asarray(b, dtype=np.float64) for _, b in groups])
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise PairingError("every per-trace value must be finite", field="traces", value=None)
    n = len(x)
    idx = stratified_draws([len(a) for a, _ in groups], samples, seed)
    boot = x[idx].mean(-1) - y[idx].mean(-1)
    lo, hi = np.quantile(boot, [0.025, 0.975])
    sa, sb = x[idx].sum(-1), y[idx].sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(sb > 0, 100.0 * (sa / sb - 1.0), np.nan)
    pct = pct[np.isfinite(pct)]
    p_lo, p_hi = (np.quantile(pct, [0.025, 0.975]) if len(pct) else (math.nan, math.nan))
    delta_pct = 100.0 * (x.sum() / y.sum() - 1.0) if y.sum() > 0 else math.nan
    return PairedMetric(float(x.mean()), float(y.mean()), float(x.mean() - y.mean()), (float(lo), float(hi)),
                        float(delta_pct), (float(p_lo), float(p_hi)), n)
