"""The hindsight oracle: per task, the cheapest cache schedule that keeps every probe the full cache passes.

It knows what no policy can: the probes, their evidence, and the model's own answers. Its cost is
the limit the policies are measured against (the share of that headroom a search captures is its
report's last line). Not for: a policy to deploy (it reads the future), or a bound on *text*
baselines (they rewrite the text; the oracle only drops KV).

The space
---------
One schedule per task, costed by the project's own accounting (``Replay.cost``) and run like any
policy (the ``schedule`` family replays it request by request, each decision extending the
previous one). Every message has one of two lifetimes:

- *read*: dropped once the agent has read it, at the first assistant message after it (that reply
  is computed with it attended); an assistant message is dropped at itself. In the accounting this
  costs what dropping it the moment it is processed costs: the request that prefills it is the
  one that generates that reply, and no later request reads it.
- *kept*: attended until the last required probe asked after it, and dropped right after that
  probe (never, for probes at the end).

Required probes are those the full cache passes (its model result on the task). No repositions:
in the accounting a reposition only adds rotated tokens. The cost is additive over messages,
``cost(K) = cost({}) + sum of delta(m) for m in K`` (tested; every chosen schedule is also
evaluated whole), so the cheapest schedule is everything *read*, and what the probes need must be
kept. A schedule outside this space (a message kept for a while, then dropped before its probe)
can be cheaper; ``violations`` checks stored policy results against the oracle for exactly that.

The search (``OracleConfig``)
-----------------------------
- ``greedy`` (default): start where the evidence says (each required probe's hops and cheapest
  copy, ``evals.cache.fidelity.evidence_split``); while a required probe fails, widen what it keeps
  along :data:`LADDER` (all its evidence, the system prompt and task, the evidence's neighbours,
  the assistant turns, the last 8 then 24 messages before it); once every required probe passes,
  try removing each kept message, costliest first, keeping each removal the model still passes.
  Each step is one model evaluation of the task, at most ``budget``. When nothing passes within
  the budget the answer is the full cache: it passes by definition, at the full cache's cost.
- ``exact`` (at most ``exact_max`` candidate messages, the ones before the last required probe):
  every subset in increasing cost, evaluated until one passes every required probe, which is then
  the cheapest schedule of the space. ``tests/evals/test_oracle.py`` checks the greedy against it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evals.cache.evaluator import PolicySpec, TaskResult
from evals.cache.fidelity import evidence_split
from evals.errors import TaskError
from evals.tasks.schema import Task

Judge = Callable[[PolicySpec, Task], TaskResult]
"""(policy, task) -> the model's result (cost and answered probes)."""
Coster = Callable[[PolicySpec, Task], float]
"""(policy, task) -> its exact cost in cents (no forward)."""


@dataclass(frozen=True)
class OracleConfig:
    """How hard the oracle searches one task.

    Attributes:
        budget: model evaluations of the greedy search per task (>= 1).
        exact_max: tasks with at most this many candidate messages are searched exactly (0: never).
        exact_budget: model evaluations of an exact search before it stops (incomplete).
    """

    budget: int = 12
    exact_max: int = 0
    exact_budget: int = 4096

    def __post_init__(self) -> None:
        for name, least in (("budget", 1), ("exact_max", 0), ("exact_budget", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise TaskError(f"oracle {name} must be an integer >= {least}, got {value!r}", field=name, value=value)
        if self.exact_max > 20:
            raise TaskError(f"oracle exact_max must be at most 20 (2**exact_max subsets), got {self.exact_max}",
                            field="exact_max", value=self.exact_max)


@dataclass(frozen=True)
class Step:
    """One schedule the search evaluated: what it kept and whether every required probe passed."""

    what: str
    kept: tuple[int, ...]
    cost_cents: float
    passed: bool
    failing: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "kept": list(self.kept), "cost_cents": self.cost_cents, "passed": self.passed,
                "failing": list(self.failing)}


@dataclass(frozen=True)
class OracleResult:
    """The oracle's schedule for one task.

    Attributes:
        method: ``greedy``, ``exact`` or ``full`` (nothing cheaper passed within the budget).
        kept: messages with the *kept* lifetime (the rest are dropped once read).
        schedule: the wire-format schedule (``drop_message``, ``reposition``).
        result: the model's result under it (the full cache's own, for ``full``).
        required: the probes the full cache passes.
        evaluations: model evaluations the search made.
        complete: the search covered its space (an exact search that stopped early is not).
        steps: every evaluated schedule, in order.
    """

    task_id: str
    family: str
    method: str
    kept: tuple[int, ...]
    schedule: Mapping[str, Any]
    result: TaskResult
    full: TaskResult
    required: tuple[int, ...]
    evaluations: int
    complete: bool
    steps: tuple[Step, ...] = field(default=())

    @property
    def cost_cents(self) -> float:
        return self.result.cost_cents

    @property
    def spec(self) -> PolicySpec:
        return schedule_spec(self.schedule)

    def to_dict(self) -> dict[str, Any]:
        r, f = self.result, self.full
        return {"task_id": self.task_id, "family": self.family, "method": self.method, "kept": list(self.kept),
                "schedule": dict(self.schedule), "cost_cents": r.cost_cents, "pass_rate": r.pass_rate,
                "passed": [p.index for p in r.probes if p.passed], "required": list(self.required),
                "full_cost_cents": f.cost_cents, "full_pass_rate": f.pass_rate,
                "saving_vs_full_pct": 100.0 * (1 - r.cost_cents / f.cost_cents) if f.cost_cents > 0 else 0.0,
                "evaluations": self.evaluations, "complete": self.complete,
                "steps": [s.to_dict() for s in self.steps]}


def schedule_spec(schedule: Mapping[str, Any], label: str = "oracle") -> PolicySpec:
    """The ``schedule`` family replaying ``schedule`` (a wire dict)."""
    return PolicySpec("schedule", {"drop_message": dict(schedule.get("drop_message", {})),
                                   "reposition": list(schedule.get("reposition", []))}, label=label)


def required_probes(full: TaskResult) -> tuple[int, ...]:
    """The probes the full cache passes (what the oracle must keep passing)."""
    if not full.ok:
        raise TaskError(f"the full cache failed on task {full.task_id!r}: {full.error}", field="task",
                        value=full.task_id)
    return tuple(p.index for p in full.probes if p.passed)


def failing(result: TaskResult, required: Iterable[int]) -> tuple[int, ...]:
    """The required probes ``result`` does not pass (all of them when it failed)."""
    need = tuple(required)
    if not result.ok:
        return need
    passed = {p.index for p in result.probes if p.passed}
    return tuple(i for i in need if i not in passed)


class Problem:
    """One task as the oracle sees it: lifetimes, the schedule of a kept set, and its cost.

    Args:
        task: the task.
        full: the full cache's model result on it (gives the required probes).
        coster: exact cost of a policy on the task (``Replay.cost`` in cents).
    """

    def __init__(self, task: Task, full: TaskResult, coster: Coster) -> None:
        self.task = task
        self.full = full
        self.required = required_probes(full)
        n = len(task.messages)
        roles = [m["role"] for m in task.messages]
        self.read_at: list[int] = []
        for m in range(n):
            after = next((j for j in range(m + 1, n) if roles[j] == "assistant"), None)
            self.read_at.append(m if roles[m] == "assistant" or after is None else after)
        asked = sorted(task.probes[i].after_message for i in self.required)
        self.last_probe = asked[-1] if asked else -1
        self._asked = asked
        self._coster = coster
        self._delta: dict[int, float] = {}
        self.base = coster(self.spec(()), task)

    @property
    def units(self) -> tuple[int, ...]:
        """Messages worth keeping: those some required probe is asked after."""
        return tuple(range(self.last_probe + 1))

    def kept_until(self, m: int) -> int | None:
        """The drop trigger of a kept message ``m`` (``None``: never dropped)."""
        last = max(a for a in self._asked if a >= m)
        trigger = max(self.read_at[m], last + 1)
        return trigger if trigger < len(self.task.messages) else None

    def schedule(self, kept: Iterable[int]) -> dict[str, Any]:
        """The wire schedule: every message dropped once read, but the ``kept`` ones until their probes."""
        keep = set(kept)
        table: dict[int, list[int]] = {}
        for m in range(len(self.task.messages)):
            trigger = self.kept_until(m) if m in keep else self.read_at[m]
            if trigger is not None:
                table.setdefault(trigger, []).append(m)
        return {"drop_message": {str(t): ids for t, ids in sorted(table.items())}, "reposition": []}

    def spec(self, kept: Iterable[int]) -> PolicySpec:
        kept = tuple(kept)
        bad = [m for m in kept if not 0 <= m <= self.last_probe]
        if bad:
            raise TaskError(f"messages {bad} are asked about by no required probe of task {self.task.id!r}",
                            field="kept", value=bad)
        return schedule_spec(self.schedule(kept))

    def delta(self, m: int) -> float:
        """What keeping message ``m`` adds to the cost (cents)."""
        if m not in self._delta:
            self._delta[m] = self._coster(self.spec((m,)), self.task) - self.base
        return self._delta[m]

    def cost(self, kept: Iterable[int]) -> float:
        """The cost of keeping ``kept``, from the per-message deltas (additive; see the module docstring)."""
        return self.base + sum(self.delta(m) for m in set(kept))

    def start(self) -> set[int]:
        """What the evidence says each required probe needs: its hops and its cheapest copy."""
        keep: set[int] = set()
        for i in self.required:
            copies, hops = evidence_split(self.task, i)
            keep |= set(hops)
            if copies and not copies & keep:
                keep.add(min(copies, key=lambda m: (self.delta(m), m)))
        return {m for m in keep if m <= self.last_probe}


def _evidence(p: Problem, probes: Sequence[int]) -> set[int]:
    return {e for i in probes for e in p.task.probes[i].evidence_ids}


def _frame(p: Problem, probes: Sequence[int]) -> set[int]:
    roles = [m["role"] for m in p.task.messages]
    first_user = next((i for i, r in enumerate(roles) if r == "user"), None)
    return {i for i, r in enumerate(roles) if r in ("system", "developer")} | (
        {first_user} if first_user is not None else set())


def _neighbours(p: Problem, probes: Sequence[int]) -> set[int]:
    return {e + d for e in _evidence(p, probes) for d in (-1, 1) if e + d >= 0}


def _assistants(p: Problem, probes: Sequence[int]) -> set[int]:
    last = max(p.task.probes[i].after_message for i in probes)
    return {i for i, m in enumerate(p.task.messages[: last + 1]) if m["role"] == "assistant"}


def _recent(window: int) -> Callable[[Problem, Sequence[int]], set[int]]:
    def widen(p: Problem, probes: Sequence[int]) -> set[int]:
        out: set[int] = set()
        for i in probes:
            a = p.task.probes[i].after_message
            out |= set(range(max(0, a - window + 1), a + 1))
        return out

    return widen


LADDER: tuple[tuple[str, Callable[[Problem, Sequence[int]], set[int]]], ...] = (
    ("all evidence", _evidence),
    ("system prompt and task", _frame),
    ("the evidence's neighbours", _neighbours),
    ("assistant turns", _assistants),
    ("last 8 messages", _recent(8)),
    ("last 24 messages", _recent(24)),
)
"""How the greedy widens what a failing probe keeps, one step per evaluation."""


class _Search:
    """Evaluations of one task's schedules, each kept set judged once, within a budget."""

    def __init__(self, problem: Problem, judge: Judge, budget: int) -> None:
        self.p, self.judge, self.budget = problem, judge, budget
        self.tried: dict[frozenset[int], tuple[TaskResult, tuple[int, ...]]] = {}
        self.steps: list[Step] = []

    @property
    def evaluations(self) -> int:
        return len(self.steps)

    def attempt(self, kept: Iterable[int], what: str) -> tuple[TaskResult, tuple[int, ...]] | None:
        """The model's result under ``kept`` and the required probes it fails (``None``: no budget left)."""
        key = frozenset(m for m in kept if m <= self.p.last_probe)
        if key in self.tried:
            return self.tried[key]
        if self.evaluations >= self.budget:
            return None
        result = self.judge(self.p.spec(sorted(key)), self.p.task)
        fails = failing(result, self.p.required)
        self.steps.append(Step(what, tuple(sorted(key)), result.cost_cents if result.ok else self.p.cost(key),
                               not fails, fails))
        self.tried[key] = (result, fails)
        return self.tried[key]

    def answer(self, method: str, kept: Iterable[int] | None, complete: bool) -> OracleResult:
        p = self.p
        if kept is None:  # nothing cheaper passed: the full cache is the answer
            return OracleResult(p.task.id, p.task.family, "full", (), {"drop_message": {}, "reposition": []},
                                p.full, p.full, p.required, self.evaluations, complete, tuple(self.steps))
        key = frozenset(kept)
        return OracleResult(p.task.id, p.task.family, method, tuple(sorted(key)), p.schedule(key),
                            self.tried[key][0], p.full, p.required, self.evaluations, complete, tuple(self.steps))


def greedy(problem: Problem, judge: Judge, budget: int = 12) -> OracleResult:
    """The greedy search of the module docstring."""
    s = _Search(problem, judge, budget)
    kept = problem.start()
    out = s.attempt(kept, "the evidence: each required probe's hops and cheapest copy")
    for name, widen in LADDER:
        if out is None or not out[1]:
            break
        wider = kept | {m for m in widen(problem, out[1]) if m <= problem.last_probe}
        if wider != kept:
            kept = wider
            out = s.attempt(kept, "+ " + name)
    if out is None or out[1]:
        return s.answer("greedy", None, complete=out is not None)
    for m in sorted(kept, key=lambda m: (-problem.delta(m), m)):
        trial = kept - {m}
        res = s.attempt(trial, f"- message {m}")
        if res is None:
            break
        if not res[1]:
            kept = trial
    return s.answer("greedy", kept, complete=True)


def exact(problem: Problem, judge: Judge, budget: int = 4096) -> OracleResult:
    """Every subset of :attr:`Problem.units`, cheapest first, until one passes (module docstring)."""
    units = problem.units
    subsets = sorted((frozenset(c) for k in range(len(units) + 1) for c in itertools.combinations(units, k)),
                     key=lambda c: (problem.cost(c), len(c), sorted(c)))
    s = _Search(problem, judge, budget)
    for subset in subsets:
        res = s.attempt(subset, f"subset {len(s.steps) + 1} of {len(subsets)}")
        if res is None:
            return s.answer("exact", None, complete=False)
        if not res[1]:
            return s.answer("exact", subset, complete=True)
    return s.answer("exact", None, complete=True)  # (unreachable: keeping every unit is the full cache's state)


def hindsight(task: Task, full: TaskResult, judge: Judge, coster: Coster,
              config: OracleConfig | None = None) -> OracleResult:
    """The oracle's schedule for ``task`` (greedy, or exact when the task is small enough).

    Args:
        full: the full cache's model result on ``task`` (its required probes).
        judge: evaluates a policy on the task with the model.
        coster: the exact cost of a policy on the task (no forward).

    Raises:
        TaskError: the full cache's result failed, or a bad config.
    """
    config = config or OracleConfig()
    problem = Problem(task, full, coster)
    if 0 < len(problem.units) <= config.exact_max:
        return exact(problem, judge, config.exact_budget)
    return greedy(problem, judge, config.budget)


@dataclass(frozen=True)
class Violation:
    """A stored result that passes every required probe of its task and is cheaper than the oracle."""

    task_id: str
    policy: str
    cost_cents: float
    oracle_cost_cents: float


def violations(oracles: Iterable[OracleResult], results: Iterable[TaskResult], tolerance: float = 1e-9,
               ) -> list[Violation]:
    """Every result (of any policy, e.g. a search's evaluation store) cheaper than the oracle of its
    task while passing each probe the full cache passes: a schedule the oracle missed."""
    by_task = {o.task_id: o for o in oracles}
    out = []
    for r in results:
        o = by_task.get(r.task_id)
        if o is None or not r.ok or r.fidelity != "model" or failing(r, o.required):
            continue
        if r.cost_cents < o.cost_cents * (1 - tolerance):
            out.append(Violation(r.task_id, r.policy, r.cost_cents, o.cost_cents))
    return out
