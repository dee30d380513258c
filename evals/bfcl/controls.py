"""The BFCL judge's two controls: drop a turn's evidence (``drop_evidence``), or as many other outputs (``drop_other``).

Turn ``k`` is judged on its own (:mod:`evals.bfcl.judge`), so a control's schedule is the turn's
alone, never cumulative over turns: at the turn's request it drops

- ``drop_evidence``: exactly the turn's evidence (:func:`evals.bfcl.evidence.turn_evidence`: the
  earlier tool outputs that alone hold an argument value of its gold calls);
- ``drop_other``: as many earlier tool outputs that are *not* its evidence, the latest ones (the
  outputs nearest the question: the ones a recency rule would keep, so the control is no easier
  than the diagnostic for being old). A turn with fewer such outputs than evidence drops all it
  has; :attr:`TurnDrops.short` records how many it lacked (all of them when every earlier output
  is evidence: nothing is dropped).

A turn without evidence drops nothing under either (it is still judged and counted). The drops are
triggered at the message before the turn's first question (``start - 1``, the last message of the
earlier turns), so neither the question nor the reply attends a dropped output.

Not for: probe tasks (their ``drop_evidence`` is :mod:`evals.cache.evaluator`'s; ``drop_other`` is
refused there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.schedule import parse_schedule
from evals.bfcl.evidence import TurnEvidence, turn_evidence
from evals.cache.evaluator import CONTROLS, DIAGNOSTIC
from evals.errors import TaskError
from evals.tasks.schema import Task
from search_spaces import PolicyKind
from search_spaces.cache.decision import Decision


@dataclass(frozen=True)
class TurnDrops:
    """What a control drops at one turn.

    Attributes:
        turn: the turn's index.
        cut: its request holds ``messages[:cut]``.
        trigger: the message after which the drops take effect (``start - 1``).
        evidence: the turn's evidence ids.
        dropped: the ids dropped (the evidence, or as many other outputs as there are).
        short: how many fewer than ``len(evidence)`` were dropped (``drop_other`` only: no more
            non-evidence outputs before the turn).
    """

    turn: int
    cut: int
    trigger: int
    evidence: tuple[int, ...]
    dropped: tuple[int, ...]
    short: int = 0

    def __post_init__(self) -> None:
        assert all(0 <= i <= self.trigger < self.cut for i in self.dropped), self
        assert len(self.dropped) + self.short == len(self.evidence), self


def turn_drops(name: str, evidence: Sequence[TurnEvidence]) -> list[TurnDrops]:
    """Control ``name``'s drops at every turn with evidence (module docstring); turns without
    evidence are left out (they drop nothing).

    Raises:
        TaskError: ``name`` is not one of :data:`evals.cache.evaluator.CONTROLS`.
    """
    if name not in CONTROLS:
        raise TaskError(f"unknown control {name!r}; valid: {', '.join(CONTROLS)}", field="policy", value=name)
    out = []
    for t in evidence:
        if not t.has_evidence:
            continue
        ids = t.evidence_ids
        if name == DIAGNOSTIC:
            dropped = ids
        else:
            others = [i for i in t.outputs_before if i not in ids]
            dropped = tuple(others[max(0, len(others) - len(ids)):])
        out.append(TurnDrops(t.turn, t.cut, t.start - 1, ids, dropped, len(ids) - len(dropped)))
    return out


@dataclass(frozen=True)
class TurnControl:
    """A control as the judge runs it in place of a policy: the decision at each turn's cut."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in CONTROLS:
            raise TaskError(f"unknown control {self.name!r}; valid: {', '.join(CONTROLS)}", field="policy",
                            value=self.name)

    def drops(self, task: Task) -> list[TurnDrops]:
        """:func:`turn_drops` of ``task`` (raises :class:`TaskError` for a task that is not BFCL's)."""
        return turn_drops(self.name, turn_evidence(task))

    def decisions(self, task: Task) -> dict[int, Decision]:
        """cut -> the turn's cache decision, for the turns that drop something."""
        return {d.cut: Decision(PolicyKind.CACHE, d.cut, schedule=parse_schedule(
            {"drop_message": {str(d.trigger): list(d.dropped)}}, d.cut)) for d in self.drops(task) if d.dropped}

