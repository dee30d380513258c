"""BFCL results summarized: turn accuracy, task accuracy and retention, with 95% intervals.

Per policy, over its judged tasks (a failed run, ``ok=False``, is counted apart and never scored):

- turn accuracy: the share of turns BFCL's checker passes;
- task accuracy: the share of tasks whose every turn passes (BFCL's own measure);
- retention: of the turns the full cache passes, the share this policy also passes (paired by
  task and turn; ``None`` when the results hold no full-cache run or it passes no turn);
- ``vs_full``: turn accuracy minus the full cache's on the same turns, with turns gained and lost
  and a 95% bootstrap interval over tasks (:func:`paired_difference`);
- evidence turn accuracy (when the caller gives each task's turns with evidence,
  :func:`evals.bfcl.evidence.turn_evidence`): turn accuracy over those turns only, the turns where
  the ``drop_evidence`` and ``drop_other`` controls drop anything.

Task accuracy's interval is a Wilson score interval (:func:`evals.cache.scoring.wilson_interval`). The
turns of one task are not independent (a policy that loses an early output tends to lose the task's
later turns too), so a turn-level rate's interval is the wider, end by end, of the Wilson interval over
turns and a percentile bootstrap that resamples whole tasks (2,000 draws, seeded): never narrower than
either. The same numbers are given per BFCL category.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from evals.bfcl.judgement import TaskJudgement
from evals.cache.scoring import wilson_interval

FULL = "full"


SAMPLES = 2000


def _rate(passed: int, total: int) -> dict[str, Any]:
    if total == 0:
        return {"rate": math.nan, "ci95": None, "n": 0}
    iv = wilson_interval(passed, total)
    return {"rate": passed / total, "ci95": [iv.low, iv.high], "n": total}


def clustered_rate(per_task: Sequence[Sequence[bool]], *, samples: int = SAMPLES, seed: int = 0) -> dict[str, Any]:
    """The share of passed turns over tasks' turns, its interval widened for turns that move together:
    the hull of the Wilson interval over turns and a bootstrap over tasks (each draw resamples tasks
    with replacement and takes passed turns / turns of the drawn tasks)."""
    groups = [list(g) for g in per_task if len(g)]
    out = _rate(sum(sum(g) for g in groups), sum(len(g) for g in groups))
    if out["ci95"] is None or len(groups) < 2:
        return out
    passed = np.array([sum(g) for g in groups], dtype=float)
    sizes = np.array([len(g) for g in groups], dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(groups), size=(samples, len(groups)))
    shares = passed[idx].sum(axis=1) / sizes[idx].sum(axis=1)
    lo, hi = np.percentile(shares, [2.5, 97.5])
    out["ci95"] = [min(out["ci95"][0], float(lo)), max(out["ci95"][1], float(hi))]
    return out


def paired_difference(results: Sequence[TaskJudgement], full: Sequence[TaskJudgement], *, samples: int = SAMPLES,
                      seed: int = 0) -> dict[str, Any] | None:
    """This policy's turn accuracy minus the full cache's on the same turns (both runs ``ok``,
    paired by task and turn), with a 95% percentile bootstrap that resamples whole tasks (the share
    of passed turns of the drawn tasks, each side). ``None`` when no turn pairs."""
    theirs = {(r.task_id, t.turn): t.passed for r in full if r.ok for t in r.turns}
    per_task = [[(t.passed, theirs[(r.task_id, t.turn)]) for t in r.turns if (r.task_id, t.turn) in theirs]
                for r in results if r.ok]
    per_task = [g for g in per_task if g]
    if not per_task:
        return None
    mine = np.array([sum(a for a, _ in g) for g in per_task], dtype=float)
    base = np.array([sum(b for _, b in g) for g in per_task], dtype=float)
    sizes = np.array([len(g) for g in per_task], dtype=float)
    diff = float((mine.sum() - base.sum()) / sizes.sum())
    idx = np.random.default_rng(seed).integers(0, len(per_task), size=(samples, len(per_task)))
    draws = (mine[idx].sum(axis=1) - base[idx].sum(axis=1)) / sizes[idx].sum(axis=1)
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return {"diff": diff, "ci95": [float(lo), float(hi)], "turns": int(sizes.sum()), "tasks": len(per_task),
            "gained": int(sum(a and not b for g in per_task for a, b in g)),
            "lost": int(sum(b and not a for g in per_task for a, b in g))}


def _scores(results: Sequence[TaskJudgement], full: Sequence[TaskJudgement],
            evidence: Mapping[str, Collection[int]] | None) -> dict[str, Any]:
    ok = [r for r in results if r.ok]
    full_passed = {(r.task_id, t.turn) for r in full if r.ok for t in r.turns if t.passed}
    kept = [[t.passed for t in r.turns if (r.task_id, t.turn) in full_passed] for r in ok]
    out = {"tasks": len(results), "failed": len(results) - len(ok),
           "turn_accuracy": clustered_rate([[t.passed for t in r.turns] for r in ok]),
           "task_accuracy": _rate(sum(r.passed for r in ok), len(ok)),
           "retention": clustered_rate(kept) if full and any(kept) else None,
           "vs_full": paired_difference(results, full) if full else None,
           "errors": sorted({r.error for r in results if r.error})[:5]}
    if evidence is not None:
        out["evidence_turn_accuracy"] = clustered_rate(
            [[t.passed for t in r.turns if t.turn in evidence.get(r.task_id, ())] for r in ok])
    return out


def summarize(results: Sequence[TaskJudgement], policies: Sequence[str],
              evidence_turns: Mapping[str, Collection[int]] | None = None) -> list[dict[str, Any]]:
    """One row per policy (in ``policies``' order): its scores overall and per category.
    ``evidence_turns``: task id -> its turns with evidence (adds ``evidence_turn_accuracy``)."""
    full = [r for r in results if r.policy == FULL]
    rows = []
    for policy in policies:
        mine = [r for r in results if r.policy == policy]
        reference = [] if policy == FULL else full  # the full cache's retention of itself says nothing
        categories = sorted({r.category for r in mine})
        rows.append({"policy": policy, **_scores(mine, reference, evidence_turns),
                     "per_category": {c: _scores([r for r in mine if r.category == c],
                                                 [r for r in reference if r.category == c], evidence_turns)
                                      for c in categories}})
    return rows


def _cell(score: dict[str, Any] | None) -> str:
    if score is None or score["ci95"] is None:
        return f"{'-':>20s}"
    lo, hi = score["ci95"]
    return f"{score['rate']:6.3f} [{lo:.2f}, {hi:.2f}]".rjust(20)


def table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The rows as lines of text: overall, then per category; then, when the rows have it, each
    policy's accuracy on the turns with evidence."""
    lines = [f"{'policy':28s} {'category':26s} {'turn acc (95% CI)':>20s} {'task acc (95% CI)':>20s} "
             f"{'retention (95% CI)':>20s} {'turns':>6s} {'tasks':>6s} {'failed':>6s}"]
    for row in rows:
        for category, s in [("all", row), *row["per_category"].items()]:
            if category != "all" and len(row["per_category"]) == 1:
                continue
            lines.append(f"{row['policy'][:28]:28s} {category[:26]:26s} {_cell(s['turn_accuracy'])} "
                         f"{_cell(s['task_accuracy'])} {_cell(s['retention'])} {s['turn_accuracy']['n']:6d} "
                         f"{s['tasks']:6d} {s['failed']:6d}")
    for row in rows:
        if row.get("vs_full"):
            d = row["vs_full"]
            lines.append(f"{row['policy'][:28]:28s} vs full on the same {d['turns']} turns: turn acc "
                         f"{d['diff']:+.3f} [{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}], {d['lost']} lost, "
                         f"{d['gained']} gained")
    for row in rows:
        if "evidence_turn_accuracy" in row:
            score = row["evidence_turn_accuracy"]
            lines.append(f"{row['policy'][:28]:28s} turns with evidence only ({score['n']}): turn acc "
                         f"{_cell(score).strip()}")
    return lines
