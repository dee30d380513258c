"""The best probe-blind rule of a small class, chosen with hindsight: a keep/drop table over message features.

The oracle (:mod:`evals.cache.oracle`) keeps the very message that holds each probe's evidence; no
policy can know it. This bound asks what the simplest *probe-blind* structure could reach: a table
that decides each message by what every policy sees, its :class:`Cell` (role, the tool it carries
or calls, its length in tokens by :data:`LENGTH_EDGES`), keeping every message of a kept cell for
good and dropping every other message once read (the oracle's *read* lifetime: at the first
assistant message after it). Such a table is a policy: it never looks at a probe.

The table is chosen with hindsight of the tasks' probes: the cheapest set of cells that keeps, for
every probe the full cache passes, all of its hops and at least one of its copies
(:func:`evals.cache.fidelity.evidence_split`). What a cell costs is the sum over the tasks of what
keeping each of its messages adds (``keep(m)``, additive over messages like the oracle's costs;
tested). The choice is exact: every hop's cell is forced, then a branch and bound over the copies'
cells (:func:`cheapest_cover`; past :data:`NODE_LIMIT` nodes it keeps the best found and says
``exact: false``).

Its schedule is then evaluated on every task with the model: the bound's cost and pass rate are the
model's (a probe the evidence rule predicts may still fail, and the result says so).

How to read it: the gap from the tuned seed program to this table is what a rule over these three
features could win on these tasks *knowing which cells matter here*; a rule learned on train may
win less, and richer features (age, mentions by later messages, supersession) may win more. The gap
from the table to the oracle is what knowing the evidence message itself adds: clairvoyance no
table over these features has. Not for: a policy to deploy (its cells are chosen on the very tasks
it is scored on).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evals.cache.evaluator import TaskResult
from evals.cache.fidelity import evidence_split
from evals.cache.oracle import Coster, Judge, failing, required_probes, schedule_spec
from evals.tasks.schema import Task

LENGTH_EDGES = (100, 300, 1000)
"""Token counts that split the length feature: under 100, 100-299, 300-999, 1000 and more."""
NODE_LIMIT = 200_000
"""Branch-and-bound nodes before :func:`cheapest_cover` settles for the best cover found."""

Tokens = Callable[[Task], Sequence[int]]
"""task -> the token count of each of its messages (the renderer's spans)."""


@dataclass(frozen=True, order=True)
class Cell:
    """What a probe-blind table sees of a message.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool`` (``developer`` reads as ``system``).
        tool: the tool a ``tool`` message answers or the first tool an assistant message calls, else ``""``.
        length: the token-count bucket by :data:`LENGTH_EDGES` (``"<100"``, ``"100-299"``, ...).
    """

    role: str
    tool: str
    length: str

    def __str__(self) -> str:
        return f"{self.role}:{self.tool or '-'}:{self.length}"


def length_bucket(tokens: int) -> str:
    """The length feature of a message of ``tokens`` tokens (:data:`LENGTH_EDGES`)."""
    i = bisect.bisect_right(LENGTH_EDGES, tokens)
    if i == 0:
        return f"<{LENGTH_EDGES[0]}"
    if i == len(LENGTH_EDGES):
        return f">={LENGTH_EDGES[-1]}"
    return f"{LENGTH_EDGES[i - 1]}-{LENGTH_EDGES[i] - 1}"


def cell_of(message: Mapping[str, Any], tokens: int) -> Cell:
    """The :class:`Cell` of one message with ``tokens`` tokens."""
    role = str(message.get("role", ""))
    role = "system" if role == "developer" else role
    tool = ""
    if role == "tool":
        tool = str(message.get("name") or "")
    elif role == "assistant":
        for call in message.get("tool_calls") or ():
            fn = call.get("function", call) if isinstance(call, Mapping) else {}
            tool = str(fn.get("name") or "") if isinstance(fn, Mapping) else ""
            break
    return Cell(role, tool, length_bucket(tokens))


def read_once_schedule(task: Task, keep: Iterable[int]) -> dict[str, Any]:
    """The wire schedule that never drops the messages in ``keep`` and drops every other message
    once read: at the first assistant message after it (an assistant message, or a message no
    assistant message follows, at itself)."""
    kept = frozenset(keep)
    roles = [m["role"] for m in task.messages]
    table: dict[int, list[int]] = {}
    for m in range(len(roles)):
        if m in kept:
            continue
        after = next((j for j in range(m + 1, len(roles)) if roles[j] == "assistant"), None)
        trigger = m if roles[m] == "assistant" or after is None else after
        table.setdefault(trigger, []).append(m)
    return {"drop_message": {str(t): ids for t, ids in sorted(table.items())}, "reposition": []}


def table_schedule(task: Task, cells: Sequence[Cell], kept: Iterable[Cell]) -> dict[str, Any]:
    """The wire schedule of a table on ``task`` (``cells``: each message's cell, in order): messages of
    a ``kept`` cell are never dropped, every other message is dropped once read."""
    keep = frozenset(kept)
    return read_once_schedule(task, (m for m, cell in enumerate(cells) if cell in keep))


class CoverSearch:
    """The cheapest set of cells meeting every need (each need: a set of cells of which one must be kept)."""

    def __init__(self, needs: Iterable[frozenset[Cell]], cost: Mapping[Cell, float], node_limit: int = NODE_LIMIT):
        self.cost = cost
        self.needs = sorted(set(needs), key=lambda n: (len(n), sorted(n)))
        if any(not n for n in self.needs):
            raise ValueError("a need without any cell cannot be met")
        self.node_limit = node_limit
        self.nodes = 0
        self.best: tuple[float, frozenset[Cell]] = (math.inf, frozenset())

    def run(self) -> tuple[frozenset[Cell], bool]:
        """The cover and whether the search was exhaustive."""
        self._go(0, frozenset(), 0.0)
        return self.best[1], self.nodes <= self.node_limit

    def _go(self, i: int, chosen: frozenset[Cell], spent: float) -> None:
        self.nodes += 1
        if spent >= self.best[0] or (self.nodes > self.node_limit and self.best[0] < math.inf):
            return
        while i < len(self.needs) and self.needs[i] & chosen:
            i += 1
        if i == len(self.needs):
            self.best = (spent, chosen)
            return
        for c in sorted(self.needs[i], key=lambda c: (self.cost[c], c)):
            self._go(i + 1, chosen | {c}, spent + self.cost[c])


def cheapest_cover(needs: Iterable[frozenset[Cell]], cost: Mapping[Cell, float],
                   node_limit: int = NODE_LIMIT) -> tuple[frozenset[Cell], bool]:
    """The cheapest set of cells that holds at least one cell of every need, and whether it is
    proven cheapest (``False`` when the search stopped at ``node_limit`` nodes)."""
    return CoverSearch(needs, cost, node_limit).run()


@dataclass(frozen=True)
class TableChoice:
    """A table chosen on some tasks: its cells and what they cost there.

    Attributes:
        kept: the cells kept (every other message is dropped once read).
        seen: every cell that occurs in the tasks it was chosen on.
        cell_costs: what keeping each seen cell adds to the summed cost there (cents, additive).
        predicted_cents: the table's summed cost there from those additive costs (no forward).
        exact: the cover is proven cheapest.
        tools: whether cells tell tools apart (``False``: role and length only).
    """

    kept: frozenset[Cell]
    seen: frozenset[Cell]
    cell_costs: Mapping[Cell, float]
    predicted_cents: float
    exact: bool
    tools: bool = True

    def cells(self, task: Task, tokens: Sequence[int]) -> list[Cell]:
        """Each message's cell as this table sees it."""
        return [_coarse(cell_of(m, n), self.tools) for m, n in zip(task.messages, tokens)]

    def keeps(self, cell: Cell) -> bool:
        """Kept: a kept cell, or one it never saw (a table learned elsewhere keeps what it cannot judge)."""
        return cell in self.kept or cell not in self.seen


def _coarse(cell: Cell, tools: bool) -> Cell:
    return cell if tools else Cell(cell.role, "", cell.length)


def keep_costs(task: Task, coster: Coster) -> tuple[float, list[float]]:
    """The cost of dropping every message once read, and what keeping each message for good adds."""
    none = coster(schedule_spec(read_once_schedule(task, ())), task)
    return none, [coster(schedule_spec(read_once_schedule(task, (m,))), task) - none
                  for m in range(len(task.messages))]


def choose_table(tasks: Sequence[Task], fulls: Sequence[TaskResult], coster: Coster, tokens: Tokens, *,
                 tools: bool = True, node_limit: int = NODE_LIMIT) -> TableChoice:
    """The cheapest table that keeps every required probe's hops and a copy on ``tasks`` (module docstring).

    Args:
        fulls: the full cache's model result on each task (their passed probes are required).
        coster: the exact cost of a policy on a task (no forward).
        tokens: each message's token count.
        tools: cells tell tools apart (else role and length only).

    Raises:
        TaskError: a full cache result that failed.
    """
    cell_costs: dict[Cell, float] = {}
    base = 0.0
    needs: list[frozenset[Cell]] = []
    for task, full in zip(tasks, fulls):
        cells = [_coarse(cell_of(m, n), tools) for m, n in zip(task.messages, tokens(task))]
        none, adds = keep_costs(task, coster)
        base += none
        for cell, add in zip(cells, adds):
            cell_costs[cell] = cell_costs.get(cell, 0.0) + add
        for i in required_probes(full):
            copies, hops = evidence_split(task, i)
            needs += [frozenset({cells[h]}) for h in hops]
            if copies:
                needs.append(frozenset(cells[c] for c in copies))
    kept, exact = cheapest_cover(needs, cell_costs, node_limit)
    return TableChoice(kept, frozenset(cell_costs), cell_costs, base + sum(cell_costs[c] for c in kept), exact, tools)


@dataclass(frozen=True)
class TableBound:
    """A table and the model's result of it on every task.

    Attributes:
        choice: the table (chosen with hindsight on these tasks, or on others).
        results: the model's result of the table's schedule on each task.
        tasks_failing: ids of tasks where the model failed a probe the full cache passes.
        hindsight: the table was chosen on the very tasks it is scored on.
    """

    choice: TableChoice
    results: tuple[TaskResult, ...]
    tasks_failing: tuple[str, ...]
    hindsight: bool = True

    @property
    def kept(self) -> tuple[Cell, ...]:
        return tuple(sorted(self.choice.kept))

    @property
    def exact(self) -> bool:
        return self.choice.exact

    @property
    def predicted_cents(self) -> float:
        return self.choice.predicted_cents

    @property
    def cost_cents(self) -> float:
        return sum(r.cost_cents for r in self.results)

    @property
    def evaluations(self) -> int:
        return len(self.results)

    def to_dict(self) -> dict[str, Any]:
        c = self.choice
        return {"features": ["role", "tool", "length"] if c.tools else ["role", "length"],
                "length_edges": list(LENGTH_EDGES), "hindsight": self.hindsight,
                "kept": [str(k) for k in self.kept], "exact": c.exact,
                "cells": {str(k): {"kept": k in c.kept, "cost_cents": v} for k, v in sorted(c.cell_costs.items())},
                "predicted_cents_where_chosen": c.predicted_cents, "cost_cents": self.cost_cents,
                "pass_rate": (sum(p.passed for r in self.results for p in r.probes)
                              / max(1, sum(len(r.probes) for r in self.results))),
                "per_task": {r.task_id: {"cost_cents": r.cost_cents, "pass_rate": r.pass_rate,
                                         "policy_key": r.policy_key} for r in self.results},
                "tasks_failing": list(self.tasks_failing), "evaluations": self.evaluations}


def apply_table(choice: TableChoice, tasks: Sequence[Task], fulls: Sequence[TaskResult], judge: Judge,
                tokens: Tokens, hindsight: bool = False) -> TableBound:
    """Run ``choice`` on every task with ``judge`` (cells it never saw are kept) and name the tasks where
    the model fails a probe the full cache passes."""
    results = []
    for t in tasks:
        cells = choice.cells(t, tokens(t))
        keep = [m for m, cell in enumerate(cells) if choice.keeps(cell)]
        results.append(judge(schedule_spec(read_once_schedule(t, keep), label="rule-table"), t))
    bad = tuple(r.task_id for r, f in zip(results, fulls) if failing(r, required_probes(f)))
    return TableBound(choice, tuple(results), bad, hindsight)


def table_bound(tasks: Sequence[Task], fulls: Sequence[TaskResult], judge: Judge, coster: Coster,
                tokens: Tokens, node_limit: int = NODE_LIMIT) -> TableBound:
    """Choose the table with hindsight on ``tasks`` and run it on them with the model (module docstring).

    Raises:
        TaskError: a full cache result that failed.
    """
    choice = choose_table(tasks, fulls, coster, tokens, node_limit=node_limit)
    return apply_table(choice, tasks, fulls, judge, tokens, hindsight=True)
