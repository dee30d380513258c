"""The proposer interface: read the archive and feedback, write new policy programs.

Contract: :meth:`Proposer.propose` returns up to ``n`` proposals whose sources differ from every
program already seen; it never raises for a bad program (the checker and the search record
failures), only for caller mistakes. Randomness comes from the ``rng`` it is given, so a search
with the same seed and no LLM proposes the same programs.
"""

from __future__ import annotations

import abc
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rsi.archive import ArchiveView, Record


@dataclass(frozen=True)
class Proposal:
    """A proposed program.

    Attributes:
        source: the program text.
        parents: archive ids of the candidates it was derived from.
        proposer: what made it (``mutation:<op>``, ``llm``...).
        note: one line on what changed.
    """

    source: str
    parents: tuple[str, ...]
    proposer: str
    note: str = ""

    def to_row(self) -> dict[str, Any]:
        """The JSON form saved in ``proposals/g<N>.json`` (``rsi.rundir.RunDir.save_proposals``)."""
        return {"source": self.source, "parents": list(self.parents), "proposer": self.proposer, "note": self.note}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Proposal:
        """A proposal from a row that ``rsi.rundir.read_proposals`` has checked."""
        return cls(row["source"], tuple(row["parents"]), row["proposer"], str(row.get("note", "")))


@dataclass(frozen=True)
class ParentView:
    """What a proposer knows about a parent: its candidate (a ``Record`` of either track), its
    program and feedback on it."""

    candidate: Record[Any]
    source: str
    feedback: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProposerStats:
    """Counters a search reports: attempts, valid proposals, tokens and dollars spent, and per
    operator (or prompt variant) the attempts and valid proposals (``operators``)."""

    attempts: int = 0
    valid: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usd: float = 0.0
    budget_exhausted: bool = False
    operators: dict[str, dict[str, int]] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    """Model checks of a proposal's last edit (the synthesis chain's ``proposer.check_last``) and their verdicts."""

    @property
    def validity_rate(self) -> float:
        return self.valid / self.attempts if self.attempts else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {"attempts": self.attempts, "valid": self.valid, "validity_rate": self.validity_rate,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens, "usd": self.usd,
                "budget_exhausted": self.budget_exhausted,
                "operators": {k: dict(v) for k, v in sorted(self.operators.items())},
                **({"checks": list(self.checks)} if self.checks else {})}


class Proposer(abc.ABC):
    """Writes programs from parents (see the module docstring)."""

    name = "proposer"

    def __init__(self) -> None:
        self.stats = ProposerStats()

    @abc.abstractmethod
    def propose(self, parents: Sequence[ParentView], archive: ArchiveView[Record[Any]], n: int,
                rng: random.Random, seen: set[str]) -> list[Proposal]:
        """Up to ``n`` new programs derived from ``parents`` (``seen``: source hashes to avoid);
        ``archive`` is the track's (the cache ``Archive`` or the ``SurvivalArchive``)."""
