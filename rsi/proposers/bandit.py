"""Operator choice by a bandit over the outcomes of each operator's offspring.

The bandit is UCB1 (Auer, Cesa-Bianchi and Fischer, 2002): an arm pulled ``n_a`` times with mean
reward ``r_a`` scores ``r_a + c * sqrt(2 ln N / n_a)`` (``N`` = all pulls, ``c`` = ``exploration``,
1 in the paper), and the highest score wins. Cold start: every arm that was never pulled is
pulled first, in the order the arms are listed. Ties between equal scores go to the arm listed
first, so a bandit with the same record always makes the same choice; there is no randomness.

Its state is never stored: :func:`offspring_rewards` rebuilds it from the archive (each
candidate records the operator that made it in ``proposer``, ``mutation:<op>``), so a resumed
search, whose archive is replayed to the same state, chooses as the uninterrupted one did.

Reward of one offspring program, in [0, 1] (:func:`reward`): 0.4 when it got a train score
(checked, ran, tuned), + 0.3 when it entered the evolved front (no candidate of an earlier
generation dominates it), + 0.3 x the hypervolume it added to the front of the earlier
generations, relative to that front's hypervolume, saturating at a 5% gain.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rsi.archive import ArchiveView, Record, Status
from rsi.pareto import dominates, hypervolume

HV_SATURATION = 0.05
"""Relative hypervolume gain that earns the full hypervolume part of the reward."""


@dataclass
class UCB1:
    """UCB1 over ``arms`` (see the module docstring)."""

    arms: tuple[str, ...]
    exploration: float = 1.0
    pulls: dict[str, int] = field(default_factory=dict)
    total: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.arms or len(set(self.arms)) != len(self.arms):
            raise ValueError(f"a bandit needs distinct arms, got {list(self.arms)}")
        if not (math.isfinite(self.exploration) and self.exploration >= 0):
            raise ValueError(f"exploration must be a finite number >= 0, got {self.exploration!r}")

    def update(self, arm: str, reward: float) -> None:
        """Record one pull of ``arm`` with ``reward`` in [0, 1]."""
        if arm not in self.arms:
            raise ValueError(f"unknown arm {arm!r}; arms: {', '.join(self.arms)}")
        if not (0.0 <= reward <= 1.0):
            raise ValueError(f"reward must lie in [0, 1], got {reward!r}")
        self.pulls[arm] = self.pulls.get(arm, 0) + 1
        self.total[arm] = self.total.get(arm, 0.0) + reward

    def mean(self, arm: str) -> float:
        n = self.pulls.get(arm, 0)
        return self.total.get(arm, 0.0) / n if n else float("nan")

    def score(self, arm: str) -> float:
        n = self.pulls.get(arm, 0)
        if n == 0:
            return math.inf
        big_n = sum(self.pulls.values())
        return self.mean(arm) + self.exploration * math.sqrt(2 * math.log(big_n) / n)

    def choose(self) -> str:
        """The arm to pull next (first listed among the best scores)."""
        best = self.arms[0]
        for arm in self.arms[1:]:
            if self.score(arm) > self.score(best):
                best = arm
        return best

    def pulled(self, arm: str, ok: bool, counts: dict[str, dict[str, int]]) -> None:
        """Record one attempt of ``arm`` within a proposer's call: a failed one as a pull with reward 0,
        a valid one at the arm's current mean (0.5 for a new arm), so one generation spreads over the
        promising arms; ``counts[arm]`` keeps its attempts and valid ones (``ProposerStats.operators``)."""
        row = counts.setdefault(arm, {"attempts": 0, "valid": 0})
        row["attempts"] += 1
        row["valid"] += ok
        self.update(arm, (self.mean(arm) if self.pulls.get(arm) else 0.5) if ok else 0.0)

    def table(self) -> list[dict[str, float | int | str]]:
        """Per arm: pulls, mean reward and current score (for reports)."""
        return [{"arm": a, "pulls": self.pulls.get(a, 0), "mean_reward": self.mean(a), "score": self.score(a)}
                for a in self.arms]


def reward(scored: bool, entered_front: bool, hv_gain: float) -> float:
    """The reward of one offspring (module docstring); ``hv_gain`` is relative (0.02 = +2%)."""
    if not scored:
        return 0.0
    return 0.4 + (0.3 if entered_front else 0.0) + 0.3 * min(1.0, max(0.0, hv_gain) / HV_SATURATION)


def _operator(c: Record[Any], prefix: str) -> str | None:
    return c.proposer[len(prefix):] if c.proposer.startswith(prefix) else None


@dataclass(frozen=True)
class Outcome:
    """One offspring program: when and how it was made and how it did (the best of its candidates)."""

    generation: int
    operator: str
    scored: bool
    entered_front: bool
    hv_gain: float
    reward: float


def offspring_rewards(archive: ArchiveView[Record[Any]], ref_cost: float, prefix: str = "mutation:",
                      before: int | None = None, ref_pass: float = 0.0) -> list[Outcome]:
    """One :class:`Outcome` per offspring program made by a ``prefix`` proposer (``mutation:<op>``),
    in archive order; ``before``: only generations before it. A program tuned to several candidates
    counts once, with its best reward. ``ref_pass``: the hypervolume's reference on the second
    objective (0 for pass rates; the survival search, whose second objective is minus recompute
    tokens, gives minus its reference)."""
    by_program: dict[tuple[int, str, str], list[Record[Any]]] = defaultdict(list)
    for c in archive.candidates:
        op = _operator(c, prefix)
        if op is None or c.expert or (before is not None and c.generation >= before):
            continue
        by_program[(c.generation, op, c.program)].append(c)
    scored = archive.scored()
    older_of: dict[int, tuple[list[tuple[float, float]], float]] = {}
    out = []
    for (g, op, _sha), cands in by_program.items():
        if g not in older_of:
            pts = [c.point for c in scored if c.generation < g]
            older_of[g] = (pts, hypervolume(pts, ref_cost, ref_pass))
        older, base_hv = older_of[g]
        best = Outcome(g, op, False, False, 0.0, 0.0)
        for c in cands:
            if c.status is not Status.OK or c.train is None or not c.train.ok:
                continue
            entered = c.point not in older and not any(dominates(o, c.point) for o in older)
            gain = hypervolume([*older, c.point], ref_cost, ref_pass) - base_hv
            rel = gain / base_hv if base_hv > 0 else (1.0 if gain > 0 else 0.0)
            r = reward(True, entered, rel)
            if r > best.reward or not best.scored:
                best = Outcome(g, op, True, entered, rel, r)
        out.append(best)
    return out


def bandit_from_archive(arms: Sequence[str], archive: ArchiveView[Record[Any]], ref_cost: float,
                        prefix: str = "mutation:", exploration: float = 1.0, before: int | None = None,
                        ref_pass: float = 0.0) -> UCB1:
    """A UCB1 over ``arms`` fed with every recorded offspring's reward (operators not in ``arms`` skipped)."""
    bandit = UCB1(tuple(arms), exploration)
    for o in offspring_rewards(archive, ref_cost, prefix, before, ref_pass):
        if o.operator in bandit.arms:
            bandit.update(o.operator, o.reward)
    return bandit


def ref_cost_of(archive: ArchiveView[Record[Any]]) -> float:
    """The hypervolume reference cost the search uses: 1.1 x the costliest expert's train cost (the
    first coordinate of its ``point``: a cache candidate's ``train.cost_cents_mean``)."""
    costs = [c.point[0] for c in archive.candidates if c.expert and c.train and c.train.ok]
    scored = [c.point[0] for c in archive.scored()]
    return 1.1 * max(costs or scored or [1.0])


def operator_table(archive: ArchiveView[Record[Any]], ref_cost: float | None = None,
                   prefix: str = "mutation:", ref_pass: float = 0.0) -> list[Mapping[str, float | int | str]]:
    """Per generation and operator: offspring, the share that got a score (valid), the share that
    entered the front (success) and the mean reward -- the report's operator table."""
    ref = ref_cost if ref_cost is not None else ref_cost_of(archive)
    rows: dict[tuple[int, str], list[Outcome]] = defaultdict(list)
    for o in offspring_rewards(archive, ref, prefix, ref_pass=ref_pass):
        rows[(o.generation, o.operator)].append(o)
    return [{"generation": g, "operator": op, "offspring": len(grp),
             "valid_rate": sum(o.scored for o in grp) / len(grp),
             "front_rate": sum(o.entered_front for o in grp) / len(grp),
             "mean_reward": sum(o.reward for o in grp) / len(grp)}
            for (g, op), grp in sorted(rows.items())]
