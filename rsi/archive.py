"""The archive both tracks share: every candidate a search produced, its lineage, and the Pareto front.

A candidate is a program (by source hash) with one parameter set, or a failure of a proposal
(refused by the checker, crashed, timed out) recorded with its reason and no score. Experts
(the built-in reference policies) live beside the candidates, marked, so fronts and reports can
compare against them without letting them into the evolved front.

Here: the entry (:class:`Record`, generic over its track's metrics), the archive
(:class:`CandidateArchive`), what the shared proposers read of either (:class:`ArchiveView`),
:class:`Status` and :func:`candidate_id`. Each track types them: ``rsi.cache.archive``
(``Candidate``, ``Archive``) and ``rsi.survival.archive`` (``SurvivalCandidate``, ``SurvivalArchive``).
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

from rsi.pareto import front
from rsi.rundir import RunDirError, read_json, write_json


class Status(enum.StrEnum):
    OK = "ok"
    REFUSED = "refused"
    FAILED = "failed"
    DUPLICATE = "duplicate"  # behaves as a program the search already has (its behaviour fingerprint): not evaluated


class Scores(Protocol):
    """What a track's metrics give its candidate records: a row to write and whether they are ok."""

    @property
    def ok(self) -> bool: ...

    def to_dict(self) -> dict[str, Any]: ...


class CostPassScores(Scores, Protocol):
    """What shared code reading the cache track's metrics (``rsi.cache.metrics.Metrics``) names of
    them: the cache LLM prompt (``rsi.proposers.llm``) and the MLflow logging (``rsi.tracking``). The
    survival track overrides both readers."""

    @property
    def pass_rate(self) -> float: ...

    @property
    def cost_cents_mean(self) -> float: ...

    @property
    def per_family(self) -> dict[str, float]: ...

    @property
    def cost_breakdown(self) -> dict[str, float]: ...


M = TypeVar("M", bound=Scores, covariant=True)
"""A record's metrics; covariant (a record is frozen), so a ``Candidate`` is a ``Record[P]`` for any
protocol ``P`` its ``Metrics`` satisfy (what a shared reader names, e.g. :class:`CostPassScores`)."""


@dataclass(frozen=True)
class Record(Generic[M]):
    """One entry of an archive, of either track; ``train`` and ``heldout`` are the track's metrics
    (``rsi.cache.metrics.Metrics`` for the cache track, ``rsi.survival.archive.SimScore`` for survival),
    read back with the subclass's :meth:`_metrics`.

    Attributes:
        id: short hash of (program, params).
        program: the program's source hash (sources live in ``programs/<sha>.py``), or the family
            name for a built-in family.
        label: a readable name (``seed:rolling_drop``, ``g2-p1``, ``expert:standard``...).
        params: the tuned parameters.
        generation: when it was made (0 = seeds and experts).
        parents: ids of the candidates whose programs the proposer read.
        proposer: what made it (``seed``, ``mutation:<op>``, ``synthesis:<op>``, ``llm:<variant>``,
            ``tuning-only``, ``expert``).
        train, heldout: metrics, ``None`` until evaluated.
        status, reason: ``ok``, or why it has no score.
        expert: a reference policy, not an evolved one.
        spec: how to rebuild the policy (family name, or ``program``).
        size: the program's size in AST nodes (0: a built-in family, or not recorded); the
            tie-breaker between candidates of equal train cost and pass (``rsi.cache.protocol``).
    """

    id: str
    program: str
    label: str
    params: dict[str, Any]
    generation: int
    parents: tuple[str, ...] = ()
    proposer: str = "seed"
    train: M | None = None
    heldout: M | None = None
    status: Status = Status.OK
    reason: str = ""
    expert: bool = False
    spec: str = "program"
    size: int = 0

    @classmethod
    def _metrics(cls, d: dict[str, Any]) -> M:
        raise NotImplementedError

    @property
    def point(self) -> tuple[float, float]:
        """The train point in ``rsi.pareto``'s orientation (first coordinate down, second up)."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "program": self.program, "label": self.label, "params": self.params,
            "generation": self.generation, "parents": list(self.parents), "proposer": self.proposer,
            "train": self.train.to_dict() if self.train else None,
            "heldout": self.heldout.to_dict() if self.heldout else None,
            "status": self.status.value, "reason": self.reason, "expert": self.expert, "spec": self.spec,
            "size": self.size,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        return cls(d["id"], d["program"], d["label"], dict(d["params"]), int(d["generation"]), tuple(d["parents"]),
                   d["proposer"], cls._metrics(d["train"]) if d["train"] else None,
                   cls._metrics(d["heldout"]) if d["heldout"] else None, Status(d["status"]), d["reason"],
                   bool(d["expert"]), d.get("spec", "program"), int(d.get("size", 0)))


def candidate_id(program: str, params: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps([program, params], sort_keys=True, default=str).encode()).hexdigest()[:12]


C = TypeVar("C", bound="Record[Any]")


@dataclass
class CandidateArchive(Generic[C]):
    """All candidates of one search in insertion order, ids unique (the first writer wins): the one
    archive contract of both tracks. Subclasses say how a row is read (:meth:`_row`) and, for a
    file that must say what it holds, the ``KIND`` written and required in it."""

    candidates: list[C] = field(default_factory=list)
    hv_history: list[dict[str, Any]] = field(default_factory=list)
    KIND: ClassVar[str | None] = None

    @classmethod
    def _row(cls, d: dict[str, Any]) -> C:
        raise NotImplementedError

    def add(self, c: C) -> C:
        """Insert ``c`` or, if its id exists, keep the existing entry (first writer wins)."""
        for existing in self.candidates:
            if existing.id == c.id:
                return existing
        self.candidates.append(c)
        return c

    def extend(self, items: Iterable[C]) -> None:
        for c in items:
            self.add(c)

    def update(self, c: C) -> None:
        self.candidates = [c if x.id == c.id else x for x in self.candidates]

    def get(self, cid: str) -> C:
        for c in self.candidates:
            if c.id == cid:
                return c
        raise KeyError(cid)

    def with_heldout(self, cid: str, heldout: Any) -> None:
        self.update(replace(self.get(cid), heldout=heldout))

    def scored(self, experts: bool = False) -> list[C]:
        return [c for c in self.candidates if c.status is Status.OK and c.train is not None and c.train.ok
                and c.expert == experts]

    def front(self) -> list[C]:
        """The evolved candidates' Pareto front on the train split (``point``'s orientation)."""
        return front(self.scored(), lambda c: c.point)

    def failures(self) -> list[C]:
        return [c for c in self.candidates if c.status is not Status.OK]

    def lineage(self, cid: str) -> list[C]:
        """``cid`` and its ancestors, breadth first."""
        out, todo, seen = [], [cid], set()
        while todo:
            x = todo.pop(0)
            if x in seen:
                continue
            seen.add(x)
            try:
                c = self.get(x)
            except KeyError:
                continue
            out.append(c)
            todo.extend(c.parents)
        return out

    def save(self, path: str | Path) -> None:
        """Replace ``path`` atomically (a kill leaves the previous archive or this one)."""
        kind = {"kind": self.KIND} if self.KIND else {}
        write_json(path, kind | {"candidates": [c.to_dict() for c in self.candidates], "hypervolume": self.hv_history})

    @classmethod
    def load(cls, path: str | Path) -> Self:
        """Read an archive written by :meth:`save`.

        Raises:
            RunDirError: the file is missing, not JSON, of another kind, or a candidate is malformed
                (named with its index).
        """
        d = read_json(path, dict)
        rows = d.get("candidates")
        if (cls.KIND and d.get("kind") != cls.KIND) or not isinstance(rows, list):
            what = f"kind {cls.KIND!r} and " if cls.KIND else ""
            raise RunDirError(f"{path}: not {'a ' + cls.KIND if cls.KIND else 'an'} archive (expected {what}a "
                              "'candidates' list)", field=str(path), value=d.get("kind"))
        candidates = []
        for i, row in enumerate(rows):
            try:
                candidates.append(cls._row(row))
            except (KeyError, TypeError, ValueError, AttributeError) as err:
                raise RunDirError(f"{path}: candidate {i} is malformed ({type(err).__name__}: {err})",
                                  field=str(path), value=i) from err
        hv = d.get("hypervolume", [])
        return cls(candidates, hv if isinstance(hv, list) else [])


R = TypeVar("R", bound="Record[Any]", covariant=True)


class ArchiveView(Protocol[R]):
    """What the shared proposers and their bandit (``rsi.proposers``) read of an archive: its
    candidates in insertion order and the scored ones. Both tracks' archives satisfy it
    (``ArchiveView[Record[Any]]`` takes either; a reader of one track's metrics names a protocol of
    them, e.g. :class:`CostPassScores`)."""

    @property
    def candidates(self) -> Sequence[R]: ...

    def scored(self, experts: bool = False) -> Sequence[R]: ...
