"""The cache track's archive: :class:`Candidate` (a ``rsi.archive.Record`` scored by
``rsi.cache.metrics.Metrics``: cost and pass rate on a task set) and :class:`Archive`
(``archive.json``).

The shared parts (``Status``, ``Record``, ``CandidateArchive``, ``candidate_id``) live in
``rsi.archive``; the survival track's entries are ``rsi.survival.archive``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rsi.archive import CandidateArchive, Record
from rsi.cache.metrics import Metrics
from rsi.pareto import hypervolume


@dataclass(frozen=True)
class Candidate(Record[Metrics]):
    """A cache-track entry (:class:`Record` with ``Metrics``: cost and pass rate)."""

    @classmethod
    def _metrics(cls, d: dict[str, Any]) -> Metrics:
        return Metrics.from_dict(d)

    @property
    def shown(self) -> Metrics:
        """Held-out metrics where measured, else train (for picking and reporting a best policy)."""
        m = self.heldout if self.heldout is not None and self.heldout.ok else self.train
        assert m is not None, f"{self.label} has no metrics"
        return m

    @property
    def point(self) -> tuple[float, float]:
        assert self.train is not None
        return (self.train.cost_cents_mean, self.train.pass_rate)



@dataclass
class Archive(CandidateArchive[Candidate]):
    """The cache track's archive (``archive.json``)."""

    @classmethod
    def _row(cls, d: dict[str, Any]) -> Candidate:
        return Candidate.from_dict(d)

    def hypervolume(self, ref_cost: float) -> float:
        return hypervolume([c.point for c in self.scored()], ref_cost)
