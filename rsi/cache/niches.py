"""Diversity niches: a MAP-Elites archive of the candidates keyed by what their policy *does*.

A candidate's behaviour is read from its train evaluations (data the search already stores for
every scored candidate, no extra run):

- ``dropped_share``: tokens the policy kept out of attention / prompt tokens, summed over every
  request of every task (``drop_skipped_tokens / prompt_tokens`` of the usage records);
- ``repositions``: per task, the mean number of requests that re-positioned tokens
  (``repos_tokens > 0``);
- ``evidence_kept``: the share of probes whose evidence messages were all still attended at the
  probe (no entry in ``evidence_dropped``) -- how much of what the tasks ask about it keeps.

Each descriptor is bucketed on a small fixed grid (``DROPPED_EDGES``, ``REPOSITION_EDGES``,
``EVIDENCE_EDGES``: a value ``v`` falls in the first bucket whose upper edge is ``>= v``, the last
bucket when none is). The elite of a cell is its candidate with the highest train pass rate
(lower cost breaks ties, then archive order). The search samples parents from the front *and*
from the elites, so a policy that behaves differently survives even when it is not yet cheaper.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.cache.evaluator import TaskResult
from rsi.cache.archive import Archive, Candidate
from rsi.rundir import write_json

DROPPED_EDGES = (0.0, 0.1, 0.25, 0.5)      # buckets: 0, (0, .1], (.1, .25], (.25, .5], > .5
REPOSITION_EDGES = (0.0, 1.0, 4.0)          # buckets: 0, (0, 1], (1, 4], > 4
EVIDENCE_EDGES = (0.5, 0.8, 0.95)           # buckets: <= .5, (.5, .8], (.8, .95], > .95
AXES = ("dropped_share", "repositions", "evidence_kept")


@dataclass(frozen=True)
class Behaviour:
    """What a policy did on its train tasks (module docstring)."""

    dropped_share: float
    repositions: float
    evidence_kept: float

    @property
    def cell(self) -> tuple[int, int, int]:
        return (bisect_left(DROPPED_EDGES, self.dropped_share), bisect_left(REPOSITION_EDGES, self.repositions),
                bisect_left(EVIDENCE_EDGES, self.evidence_kept))


def behaviour(results: Sequence[TaskResult]) -> Behaviour | None:
    """The behaviour shown in ``results`` (one candidate's), or ``None`` without a usable result."""
    ok = [r for r in results if r.ok]
    prompt = sum(q.usage.get("prompt_tokens", 0) for r in ok for q in r.requests)
    if not ok or prompt <= 0:
        return None
    dropped = sum(q.usage.get("drop_skipped_tokens", 0) for r in ok for q in r.requests)
    repos = sum(sum(1 for q in r.requests if q.usage.get("repos_tokens", 0) > 0) for r in ok) / len(ok)
    probes = [p for r in ok for p in r.probes]
    kept = sum(1 for p in probes if not p.evidence_dropped) / len(probes) if probes else 1.0
    return Behaviour(dropped / prompt, repos, kept)


def _label(i: int, edges: tuple[float, ...]) -> str:
    if i == 0:
        return f"<={edges[0]:g}"
    if i == len(edges):
        return f">{edges[-1]:g}"
    return f"({edges[i - 1]:g},{edges[i]:g}]"


@dataclass(frozen=True)
class NicheMap:
    """The elite per occupied cell and every candidate's behaviour."""

    elites: dict[tuple[int, int, int], str]
    behaviours: dict[str, Behaviour]
    occupancy: dict[tuple[int, int, int], int]

    def rows(self, archive: Archive) -> list[dict[str, Any]]:
        """One row per occupied cell (for the report and ``niches.json``), in cell order."""
        out = []
        for cell in sorted(self.elites):
            c = archive.get(self.elites[cell])
            b = self.behaviours[c.id]
            out.append({"cell": list(cell), "dropped_share": _label(cell[0], DROPPED_EDGES),
                        "repositions": _label(cell[1], REPOSITION_EDGES),
                        "evidence_kept": _label(cell[2], EVIDENCE_EDGES), "candidates": self.occupancy[cell],
                        "elite": c.label, "elite_id": c.id, "proposer": c.proposer,
                        "train_pass": c.train.pass_rate if c.train else None,
                        "train_cost": c.train.cost_cents_mean if c.train else None,
                        "elite_dropped_share": b.dropped_share, "elite_repositions": b.repositions,
                        "elite_evidence_kept": b.evidence_kept})
        return out


def niche_map(archive: Archive, results_of: Callable[[Candidate], Sequence[TaskResult]]) -> NicheMap:
    """MAP-Elites over the archive's scored evolved candidates (module docstring)."""
    elites: dict[tuple[int, int, int], Candidate] = {}
    behaviours: dict[str, Behaviour] = {}
    occupancy: dict[tuple[int, int, int], int] = {}
    for c in archive.scored():
        b = behaviour(results_of(c))
        if b is None or c.train is None:
            continue
        behaviours[c.id] = b
        cell = b.cell
        occupancy[cell] = occupancy.get(cell, 0) + 1
        best = elites.get(cell)
        if best is None or best.train is None or (c.train.pass_rate, -c.train.cost_cents_mean) > (
                best.train.pass_rate, -best.train.cost_cents_mean):
            elites[cell] = c
    return NicheMap({k: v.id for k, v in elites.items()}, behaviours, occupancy)


def choose_parents(archive: Archive, niches: NicheMap | None, k: int) -> list[Candidate]:
    """Up to ``k`` parents (at least the whole front): the front first, then niche elites off the
    front (highest pass rate first), then the best remaining scored candidates by pass rate."""
    front = archive.front()
    chosen = list(front)
    ids = {c.id for c in chosen}
    elites = [archive.get(cid) for cid in (niches.elites.values() if niches else ())]
    for c in sorted(elites, key=lambda c: (-c.point[1], c.point[0], c.id)):
        if len(chosen) >= k:
            break
        if c.id not in ids:
            chosen.append(c)
            ids.add(c.id)
    for c in sorted(archive.scored(), key=lambda c: -c.point[1]):
        if len(chosen) >= k:
            break
        if c.id not in ids:
            chosen.append(c)
            ids.add(c.id)
    return chosen


def write_niches(path: str | Path, archive: Archive, niches: NicheMap, generation: int) -> None:
    """``niches.json``: the axes, their bucket edges and one row per occupied cell."""
    write_json(path, {"generation": generation, "axes": list(AXES),
                      "edges": {"dropped_share": DROPPED_EDGES, "repositions": REPOSITION_EDGES,
                                "evidence_kept": EVIDENCE_EDGES},
                      "cells": niches.rows(archive)})
