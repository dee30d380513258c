"""What the BFCL replay judge takes and gives: its options (:class:`JudgeConfig`) and its results
(:class:`TurnResult` per turn, :class:`TaskJudgement` per policy and task, with their row form for
the result log and the results file).

Not for: judging (:mod:`evals.bfcl.judge`) or summarizing (:mod:`evals.bfcl.report`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class TurnResult:
    """One turn under one policy: ``passed`` by BFCL's checker (``reason`` its error type and message
    when not); the model's calls as rebuilt strings, the refused pieces' reasons, replies made."""

    turn: int
    passed: bool
    reason: str
    calls: tuple[str, ...]
    refused: tuple[str, ...]
    steps: int
    dropped_messages: int


@dataclass(frozen=True)
class TaskJudgement:
    """A policy on a BFCL task. ``ok=False``: the run failed (``error``), and it has no score.
    ``seconds``: wall time from the judgement's start to its end (judged in a batch, the other
    jobs' replies decoded beside its own included)."""

    task_id: str
    category: str
    split: str
    policy: str
    ok: bool
    error: str | None
    turns: tuple[TurnResult, ...] = ()
    seconds: float = 0.0
    split_rule: str = ""

    @property
    def passed(self) -> bool:
        """All turns pass (BFCL's task accuracy)."""
        return self.ok and all(t.passed for t in self.turns)

    def to_row(self) -> dict[str, Any]:
        return {**{k: v for k, v in asdict(self).items() if k != "turns"}, "passed": self.passed,
                "turns": [asdict(t) for t in self.turns]}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TaskJudgement:
        """The judgement :meth:`to_row` wrote (a resumed run's finished result)."""
        turns = tuple(TurnResult(**{**t, "calls": tuple(t["calls"]), "refused": tuple(t["refused"])})
                      for t in row["turns"])
        return cls(row["task_id"], row["category"], row["split"], row["policy"], row["ok"], row["error"], turns,
                   row.get("seconds", 0.0), row.get("split_rule", ""))


TURN_SETS = ("all", "evidence")
"""Which turns a judgement answers (:class:`JudgeConfig` ``turns``)."""


@dataclass(frozen=True)
class JudgeConfig:
    """``max_steps``: replies per turn (BFCL allows 20); ``max_tokens``: tokens per reply;
    ``tool_choice``: the engine's (:class:`evals.bfcl.responders.EngineResponder`); ``turns``: which
    turns the model answers, ``all`` or ``evidence`` (only those with evidence among the earlier
    outputs, :func:`evals.bfcl.evidence.turn_evidence`: the controls' comparison at a fraction of the
    cost; the other turns' gold calls still carry the state, and a task then "passes" when its judged
    turns do, which is not BFCL's task accuracy). What a run asks,
    so part of its identity (the result log's header); how many jobs are judged at once is not
    (:func:`evals.bfcl.judge.judge`'s ``batch_size``)."""

    max_steps: int = 5
    max_tokens: int = 256
    tool_choice: str = "auto"
    turns: str = "all"

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.max_tokens < 1:
            raise ValueError(f"max_steps and max_tokens must be >= 1, got {self.max_steps}, {self.max_tokens}")
        if self.tool_choice not in ("auto", "required"):
            raise ValueError(f"tool_choice must be 'auto' or 'required', got {self.tool_choice!r}")
        if self.turns not in TURN_SETS:
            raise ValueError(f"turns must be one of {', '.join(TURN_SETS)}, got {self.turns!r}")
