"""What a cache schedule could save on a BFCL suite, by the project's accounting, with no model run.

For the tasks of a suite (each with its turns as probes, :func:`evals.bfcl.evidence.as_probe_task`)
this costs, by the accounting the hindsight oracle uses (:class:`evals.cache.fidelity.ProxyReplay`
over a dry engine: exact prefill, cached, repositioned and output tokens at a rate table; the
``schedule`` family of :func:`evals.cache.oracle.schedule_spec` for fixed schedules):

- ``full``: the full cache;
- ``keep_evidence``: every tool output dropped once read (after the first assistant turn that
  follows it), except a turn's evidence, kept until that turn's reply is written (dropped after the
  last turn that needs it); nothing else is dropped (:func:`keep_evidence_schedule`);
- ``oracle_start``: the oracle's own starting point when every turn's probe is required
  (:meth:`evals.cache.oracle.Problem.start`): *every* message, the system prompt and the questions
  too, dropped once read but each probe's cheapest copy of its value, kept until the last probe;
- ``rolling_drop`` keeping the newest K tool outputs, for each K of :data:`ROLLING`.

Beside each cost: the turns with evidence whose evidence is still attended when the turn is asked
(a fact of the schedule, every value of the turn with at least one output holding it; not a pass
rate). Whether the model passes under a schedule is not measured here: that needs the model and
the judge (:mod:`evals.bfcl.judge`).

Not for: searching schedules (:mod:`evals.cache.oracle`, :mod:`evals.cache.headroom`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from evals.bfcl.evidence import TurnEvidence, as_probe_task, turn_evidence
from evals.cache.evaluator import EvalConfig, PolicySpec, TaskResult
from evals.cache.fidelity import DryEngine, EvidenceTable, ProxyReplay
from evals.cache.oracle import Problem, schedule_spec
from evals.errors import TaskError
from evals.tasks.schema import Task

ROLLING = (12, 4)
"""The rolling-drop settings costed (tool outputs kept)."""
FULL = PolicySpec("full", label="full")
WHAT = {"full": "the full cache",
        "keep_evidence": "each tool output dropped once read, a turn's evidence kept until that turn",
        "oracle_start": "every message (system prompt and questions too) dropped once read, each probe's cheapest "
                        "evidence copy kept until the last probe: the oracle's first candidate",
        **{f"rolling_drop K={k}": f"rolling drop keeping the newest {k} tool outputs" for k in ROLLING}}
"""What each costed schedule is, by its name."""


def read_at(task: Task) -> list[int]:
    """Per message, the trigger that drops it once read: the first assistant message after it (an
    assistant message: itself); ``len(messages)`` when no assistant follows (never dropped).
    The oracle's *read* lifetime (:class:`evals.cache.oracle.Problem`)."""
    roles = [m["role"] for m in task.messages]
    n = len(roles)
    return [m if roles[m] == "assistant" else next((j for j in range(m + 1, n) if roles[j] == "assistant"), n)
            for m in range(n)]


def keep_evidence_schedule(task: Task, evidence: Sequence[TurnEvidence]) -> dict[str, Any]:
    """The wire schedule of ``keep_evidence`` (module docstring): each tool output dropped at
    :func:`read_at`, or, when it is evidence, at the later of that and the cut of the last turn that
    needs it (the turn's reply, message ``cut``, is computed with it attended)."""
    read = read_at(task)
    needed: dict[int, int] = {}
    for t in evidence:
        for i in t.evidence_ids:
            needed[i] = max(needed.get(i, 0), t.cut)
    table: dict[int, list[int]] = {}
    for i, m in enumerate(task.messages):
        if m["role"] != "tool":
            continue
        trigger = max(read[i], needed.get(i, 0))
        if trigger < len(task.messages):
            table.setdefault(trigger, []).append(i)
    return {"drop_message": {str(t): ids for t, ids in sorted(table.items())}, "reposition": []}


@dataclass(frozen=True)
class ScheduleCost:
    """One schedule summed over the tasks: its cost and the evidence turns it leaves attended."""

    name: str
    cost_cents: float
    evidence_attended: int

    def to_dict(self, full_cents: float, evidence_turns: int) -> dict[str, Any]:
        return {"schedule": self.name, "what": WHAT.get(self.name, ""), "cost_cents": self.cost_cents,
                "saving_vs_full_pct": 100.0 * (1 - self.cost_cents / full_cents) if full_cents > 0 else 0.0,
                "evidence_turns_attended": self.evidence_attended,
                "evidence_turns_attended_share": self.evidence_attended / evidence_turns if evidence_turns else None}


@dataclass(frozen=True)
class SuiteHeadroom:
    """Every schedule of the module docstring over one set of tasks."""

    tasks: int
    evidence_turns: int
    rows: tuple[ScheduleCost, ...]

    @property
    def full_cents(self) -> float:
        return next(r.cost_cents for r in self.rows if r.name == "full")

    def to_dict(self) -> dict[str, Any]:
        return {"tasks": self.tasks, "evidence_turns": self.evidence_turns,
                "rows": [r.to_dict(self.full_cents, self.evidence_turns) for r in self.rows]}


def _attended(result: TaskResult, evidence: Sequence[TurnEvidence]) -> int:
    """Turns whose every probe's evidence is attended in ``result`` (the proxy's prediction under
    :meth:`EvidenceTable.assumed`: a probe passes exactly when its evidence is attended)."""
    by_turn: dict[int, bool] = {}
    for p in result.probes:
        by_turn[p.after_message] = by_turn.get(p.after_message, True) and p.passed
    return sum(by_turn.get(t.cut - 1, False) for t in evidence if t.has_evidence)


def suite_headroom(tasks: Sequence[Task], dry: DryEngine, config: EvalConfig | None = None,
                   on_task: Callable[[Task], None] | None = None) -> SuiteHeadroom:
    """The schedules of the module docstring, costed on ``tasks`` (BFCL tasks) by a proxy over
    ``dry`` (``config``: the rates; the default table when ``None``); ``on_task`` is called after each.

    Raises:
        TaskError: a task that is not a BFCL task, or a schedule that fails on one (with its reason).
    """
    probed = [(as_probe_task(t, ev), ev) for t in tasks for ev in [turn_evidence(t)]]
    proxy = ProxyReplay(dry, EvidenceTable.assumed(t for t, _ in probed), config or EvalConfig())

    def coster(spec: PolicySpec, task: Task) -> float:
        return proxy.cost(spec, task).cents

    totals: dict[str, tuple[float, int]] = {}
    for task, evidence in probed:
        full = proxy.evaluate(FULL, task)
        problem = Problem(task, full, coster)  # every probe required: the assumed table passes them all
        specs = [FULL, schedule_spec(keep_evidence_schedule(task, evidence), "keep_evidence"),
                 schedule_spec(problem.schedule(problem.start()), "oracle_start"),
                 *(PolicySpec("rolling_drop", {"keep_tool_responses": k}, label=f"rolling_drop K={k}")
                   for k in ROLLING)]
        for spec in specs:
            result = full if spec is FULL else proxy.evaluate(spec, task)
            if not result.ok:
                raise TaskError(f"{spec.display} failed on {task.id}: {result.error}", field="task", value=task.id)
            cost, attended = totals.get(spec.display, (0.0, 0))
            totals[spec.display] = (cost + result.cost_cents, attended + _attended(result, evidence))
        if on_task is not None:
            on_task(task)
    return SuiteHeadroom(len(tasks), sum(t.has_evidence for _, ev in probed for t in ev),
                         tuple(ScheduleCost(name, cost, attended) for name, (cost, attended) in totals.items()))
