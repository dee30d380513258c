"""The headlines of several searches pooled: ``akv pool RUN_DIR RUN_DIR ... [--out FILE]``.

A search's headline (:mod:`rsi.cache.headline`) compares, per expert, the policy the search chose on
train with the expert, over its own held-out tasks. Searches run with other seeds and judged on
other held-out tasks are independent repetitions of the *procedure*: pooled, they say what a
search gives against each expert on a task it never saw, with a tighter interval than any one run.

Per expert (the headline's ``versus`` label), each run contributes its headline's pairing: the
policy it chose on train against that expert, on its held-out tasks, read from its evaluation
store (nothing is run). :func:`evals.paired.pooled_bootstrap` gives the statistics over the union
of the tasks, resampling each run's tasks within that run. The significance rule is the headline's.

What the pool guards, and what it cannot:

- a held-out task in two runs is refused (it would count twice), and so is a run given twice;
- each run's policy is the one its own headline chose on train, so no choice here looks at
  held-out results;
- *which* runs are pooled is the caller's choice. Pool every run of a pre-declared set (every
  confirmation of one config), never the ones whose results looked good.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import AKVError
from evals.paired import PairedDelta, PairedTasks, PairingError, check_samples, pair_results, pooled_bootstrap
from rsi import provenance
from rsi.cache.headline import HeadlineRow, interval, read_headline, stored_results, verdict
from rsi.rundir import RunDir, distinct_run_dirs, write_json


@dataclass(frozen=True)
class RunComparison:
    """One run's headline row for an expert and the held-out tasks it was paired over."""

    run_dir: str
    row: HeadlineRow
    task_ids: tuple[str, ...]


@dataclass(frozen=True)
class PooledComparison:
    """Every run's chosen policy against the expert ``versus``, pooled (module docstring)."""

    versus: str
    runs: tuple[RunComparison, ...]
    delta: PairedDelta

    @property
    def matched_runs(self) -> int:
        """Runs whose policy matched the expert's pass rate on train (the rest fell back to their
        most accurate policy)."""
        return sum(r.row.matched_pass for r in self.runs)

    def to_dict(self) -> dict[str, Any]:
        d = self.delta
        return {"versus": self.versus, "cost_delta_pct": d.cost_delta_pct, "cost_delta_ci95": list(d.cost_delta_ci95),
                "pass_delta": d.pass_delta, "pass_delta_ci95": list(d.pass_delta_ci95), "heldout_tasks": d.n_tasks,
                "significant": d.significant, "matched_runs": self.matched_runs,
                "runs": [{"run_dir": r.run_dir, "task_ids": list(r.task_ids), **r.row.to_dict()} for r in self.runs]}


def pool_runs(run_dirs: Sequence[str | Path], *, samples: int = 2000, seed: int = 0,
              versus: str | None = None) -> list[PooledComparison]:
    """The pooled comparison for every expert some run's headline has (in the first run's order), or
    for the comparator ``versus`` alone (e.g. ``tuning-only``, the ablation arm's choice: every run
    must have it).

    Raises:
        AKVError: no run, fewer than 100 ``samples``, a run given twice, a path that is not a
            directory, a directory without ``headline.json`` or with an empty or malformed one, a
            chosen policy without stored held-out results, or a held-out task in two runs.
    """
    from rsi.cache.export import load_archive, pick
    from rsi.store import EvalStore

    runs = distinct_run_dirs(run_dirs, "tasks")
    check_samples(samples)
    by_versus: dict[str, list[tuple[RunComparison, PairedTasks]]] = {}
    for run in runs:
        if not run.is_dir():
            raise AKVError(f"{run} is not a run directory", field="run_dirs", value=str(run))
        rows = read_headline(run)
        if not rows:
            why = "no headline.json" if rows is None else "an empty headline (nothing to compare)"
            raise AKVError(f"{run} has {why}; pool runs of `akv search` that wrote a headline", field="run_dirs",
                           value=str(run))
        archive = load_archive(run)
        evaluations = EvalStore(run / "evaluations.jsonl").rows()
        if versus is not None and not any(r.versus == versus for r in rows):
            have = ", ".join(sorted({r.versus for r in rows}))
            raise AKVError(f"{run}: its headline has no comparison with {versus!r} (it has: {have})",
                           field="versus", value=versus)
        for row in rows:
            if versus is not None and row.versus != versus:
                continue
            a = stored_results(run, pick(archive, row.policy_id), evaluations, "heldout")
            b = stored_results(run, pick(archive, row.versus_id), evaluations, "heldout")
            shared = sorted(set(a) & set(b))
            paired = pair_results([a[t] for t in shared], [b[t] for t in shared])
            by_versus.setdefault(row.versus, []).append((RunComparison(str(run), row, tuple(shared)), paired))
    out = []
    for versus, pairs in by_versus.items():
        try:
            delta = pooled_bootstrap([p for _, p in pairs], samples=samples, seed=seed)
        except PairingError as err:
            raise AKVError(f"{versus}: {err} (runs: {', '.join(r.run_dir for r, _ in pairs)})", field="run_dirs",
                           value=err.value) from err
        out.append(PooledComparison(versus, tuple(r for r, _ in pairs), delta))
    return out


def pooled_lines(pooled: Sequence[PooledComparison]) -> list[str]:
    """A table per expert: each run's chosen policy, then the pool, with the verdict in words."""
    lines = []
    for p in pooled:
        lines.append(f"vs {p.versus}")
        for r in p.runs:
            row = r.row
            lines.append(f"  {Path(r.run_dir).name[:24]:24s} {row.policy[:18]:18s} {row.heldout_tasks:3d} tasks  "
                         f"cost {row.cost_delta_pct:+6.1f}% {interval(row.cost_delta_ci95, '+.1f'):16s} "
                         f"pass {row.pass_delta:+.3f} {interval(row.pass_delta_ci95, '+.3f')}"
                         + ("" if row.matched_pass else "  (matched nothing on train)"))
        d = p.delta
        words = verdict(d)
        if p.matched_runs < len(p.runs):
            words += f" ({len(p.runs) - p.matched_runs} of {len(p.runs)} runs matched nothing on train)"
        lines.append(f"  {'pooled':24s} {f'{len(p.runs)} runs':18s} {d.n_tasks:3d} tasks  "
                     f"cost {d.cost_delta_pct:+6.1f}% {interval(d.cost_delta_ci95, '+.1f'):16s} "
                     f"pass {d.pass_delta:+.3f} {interval(d.pass_delta_ci95, '+.3f')}  {words}")
    return lines


def write_pooled(path: str | Path, pooled: Sequence[PooledComparison], run_dirs: Sequence[str | Path], *,
                 samples: int, seed: int) -> Path:
    """``pooled.json``: the runs, the bootstrap settings and every pooled comparison."""
    out = Path(path)
    write_json(out, {"runs": [str(r) for r in run_dirs], "samples": samples, "seed": seed,
                     "suites": sorted({_suite(Path(r)) for r in run_dirs}),
                     "comparisons": [p.to_dict() for p in pooled],
                     "provenance": provenance.pooled(run_dirs).as_dict()})
    return out


def _suite(run_dir: Path) -> str:
    return str(RunDir(run_dir).cache_config.data.suite)
