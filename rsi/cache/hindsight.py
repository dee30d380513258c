"""Hindsight feedback: what the oracle kept against what a parent program did, per train task.

The oracle (``evals.cache.oracle``) says which messages each train task needs attended, and until
when (the last probe the full cache passes). A parent's drops on the same episodes then split its
cost into what it wastes (messages the oracle drops that it keeps reading, weighted by the tokens
it re-reads) and what it harms (needed messages it drops before their probe). Proposers use it:
the synthesis proposer to choose which rule to add or relax (:func:`drop_gain`, :func:`keep_gain`
over the feature matrices of :class:`TaskFeatures`), the LLM proposer in its prompt (:func:`report`,
worst tasks first).

The matrices hold the features of ``search_spaces.cache.rules`` for every (message ``i``, trigger
``t``) pair, computed from the same API the programs see; a rule's simulated drop time is the first
trigger where its condition holds (keep rules and rule order are ignored there: the proxy screen of
the whole program decides).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from search_spaces import Episode
from search_spaces.cache import program_api
from search_spaces.cache.rules import FLAGS, NUMERIC

NEVER = 1 << 30


@dataclass(frozen=True)
class Hindsight:
    """The oracle's view of the train tasks.

    Attributes:
        episodes: each task as policies see it.
        needed: per task, message id -> the last message after which a required probe needs it.
        source: what said so (``oracle``: the model-verified hindsight oracle; ``evidence``: its
            zero-forward start, the evidence rule).
        alternatives: per task, the sets of messages of which one must stay attended for a required
            probe (a hop alone; a probe's copies together, ``evals.cache.fidelity.evidence_split``);
            for a task it lacks (``()``), each needed message alone.
    """

    episodes: tuple[Episode, ...]
    needed: tuple[Mapping[int, int], ...]
    source: str
    alternatives: tuple[tuple[frozenset[int], ...], ...] = ()

    def needs(self, k: int) -> tuple[frozenset[int], ...]:
        """Task ``k``'s sets of which one message must stay attended (see :attr:`alternatives`)."""
        if k < len(self.alternatives) and self.alternatives[k]:
            return self.alternatives[k]
        return tuple(frozenset({m}) for m in sorted(self.needed[k]))

    def __add__(self, other: Hindsight) -> Hindsight:
        """Both views, this one's tasks first (its ``source``)."""
        mine = self.alternatives or ((),) * len(self.episodes)
        theirs = other.alternatives or ((),) * len(other.episodes)
        return Hindsight(self.episodes + other.episodes, tuple(self.needed) + tuple(other.needed), self.source,
                         tuple(mine) + tuple(theirs))


class TaskFeatures:
    """Feature matrices of one episode: ``num[f][i, t]`` for numeric features and flags (``t >= i``),
    ``role[i]``, ``tool[i]``, and the request cuts."""

    def __init__(self, episode: Episode) -> None:
        msgs, tokens = episode.messages, episode.token_counts
        n = len(msgs)
        view = program_api.RequestView(msgs, tokens)
        self.n = n
        self.cuts = np.array(sorted(episode.cuts))
        self.tokens = np.array(tokens, dtype=float)
        self.role = [str(m.get("role", "")) for m in msgs]
        tool = []
        for i, m in enumerate(view.messages):
            if m.is_tool:
                tool.append(m.name or (view.call_of(i) or ("", ""))[0])
            else:
                tool.append(m.tool_calls[0][0] if m.tool_calls else "")
        self.tool = tool
        t = np.arange(n)
        tools = np.concatenate([[0], np.cumsum([r == "tool" for r in self.role])])
        calls = np.concatenate([[0], np.cumsum([r == "assistant" for r in self.role])])
        users = [i for i, r in enumerate(self.role) if r == "user"]
        first = users[0] if users else -1
        self.first_user = first
        num: dict[str, np.ndarray] = {
            "age_tools": tools[t + 1][None, :] - tools[t + 1][:, None],
            "age_calls": calls[t + 1][None, :] - calls[t + 1][:, None],
            "tokens": np.repeat(self.tokens[:, None], n, axis=1),
        }
        for name, least in (("mentions", 1), ("mentions2", 2)):
            counts = np.zeros((n, n))
            for i in range(n):
                for j in view.mentioned_by(i, least):
                    counts[i, j:] += 1
            num[name] = counts
        batches = [view.batch_of(i) for i in range(n)]
        num["batch_size"] = np.repeat(np.array([b[1] for b in batches], dtype=float)[:, None], n, axis=1)
        num["batch_pos"] = np.repeat(np.array([b[0] for b in batches], dtype=float)[:, None], n, axis=1)
        overlap = [len(view.entities(i) & view.entities(first)) if first >= 0 and i != first else 0 for i in range(n)]
        num["task_overlap"] = np.repeat(np.array(overlap, dtype=float)[:, None], n, axis=1)
        sup = np.array([view.superseded_by(i) for i in range(n)])
        num["superseded"] = ((sup[:, None] >= 0) & (t[None, :] >= sup[:, None])).astype(float)
        num["first_user"] = np.repeat((t == first).astype(float)[:, None], n, axis=1)
        self.num = num
        self.valid = t[None, :] >= t[:, None]
        # the request that prefills message i: the first cut above it
        self.first_cut = np.searchsorted(self.cuts, t, side="right")

    def reads(self, i: int, trigger: int) -> int:
        """Requests that read message ``i`` from the cache when it is dropped at ``trigger``."""
        later = self.cuts[self.first_cut[i] + 1:] if self.first_cut[i] < len(self.cuts) else self.cuts[:0]
        return int(np.sum(later <= trigger))

    def holds(self, cond: Mapping[str, Any], params: Mapping[str, int]) -> np.ndarray:
        """Where ``cond`` holds, as a boolean ``[i, t]`` matrix."""
        if "all" in cond:
            out = np.ones((self.n, self.n), dtype=bool)
            for c in cond["all"]:
                out &= self.holds(c, params)
            return out
        if "any" in cond:
            out = np.zeros((self.n, self.n), dtype=bool)
            for c in cond["any"]:
                out |= self.holds(c, params)
            return out
        if "not" in cond:
            return ~self.holds(cond["not"], params)
        f = cond["f"]
        if f in NUMERIC:
            value = self.num[f]
            return value >= params[cond["param"]] if cond["op"] == ">=" else value < params[cond["param"]]
        if f in FLAGS:
            return self.num[f] > 0
        if f == "role":
            return np.repeat(np.array([r == cond["is"] for r in self.role])[:, None], self.n, axis=1)
        return np.repeat(np.array([x in cond["in"] for x in self.tool])[:, None], self.n, axis=1)

    def first_true(self, matrix: np.ndarray) -> np.ndarray:
        """Per message, the first trigger where ``matrix`` holds (``NEVER`` when it never does)."""
        m = matrix & self.valid
        hit = m.any(axis=1)
        return np.where(hit, m.argmax(axis=1), NEVER)


def drops_of(decision_wire: Mapping[str, Any]) -> dict[int, int]:
    """Message -> the trigger at which a (final, cumulative) wire decision drops it."""
    out: dict[int, int] = {}
    for key, ids in (decision_wire.get("drop_message") or {}).items():
        for i in ids:
            out.setdefault(int(i), int(key))
    return out


@dataclass(frozen=True)
class Split:
    """A parent's cost and harm on one task, split by the oracle."""

    waste: float  # token-reads of messages the oracle drops, beyond the reading its oracle schedule pays
    harm: int  # needed messages dropped before their probe
    harmed: tuple[int, ...]


def split_task(f: TaskFeatures, needed: Mapping[int, int], drops: Mapping[int, int]) -> Split:
    waste = 0.0
    harmed = []
    for i in range(f.n):
        d = drops.get(i, NEVER)
        if i in needed:
            if d <= needed[i]:
                harmed.append(i)
        else:
            waste += f.tokens[i] * f.reads(i, d)
    return Split(waste, len(harmed), tuple(harmed))


def drop_gain(features: Sequence[TaskFeatures], hindsight: Hindsight, parent: Sequence[Mapping[int, int]],
              cond: Mapping[str, Any], params: Mapping[str, int]) -> tuple[float, int]:
    """(token-reads saved, needed messages newly harmed) if a rule dropped what ``cond`` selects, on
    top of the parent's drops, on every task."""
    saved, harm = 0.0, 0
    for f, needed, drops in zip(features, hindsight.needed, parent):
        first = f.first_true(f.holds(cond, params))
        for i in range(f.n):
            d_old = drops.get(i, NEVER)
            d_new = int(first[i])
            if d_new >= d_old:
                continue
            if i in needed:
                harm += d_new <= needed[i] < d_old
            else:
                saved += f.tokens[i] * (f.reads(i, d_old) - f.reads(i, d_new))
    return saved, harm


def keep_gain(features: Sequence[TaskFeatures], hindsight: Hindsight, parent: Sequence[Mapping[int, int]],
              cond: Mapping[str, Any], params: Mapping[str, int]) -> tuple[int, float]:
    """(harmed needed messages a keep rule on ``cond`` would protect at their parent drop time,
    token-reads it would add by protecting unneeded ones until the end)."""
    fixed, added = 0, 0.0
    for f, needed, drops in zip(features, hindsight.needed, parent):
        holds = f.holds(cond, params)
        for i, d in drops.items():
            if d >= f.n or not holds[i, d]:
                continue
            if i in needed and d <= needed[i]:
                fixed += 1
            elif i not in needed:
                added += f.tokens[i] * (f.reads(i, NEVER) - f.reads(i, d))
    return fixed, added


def report(hindsight: Hindsight, parent: Sequence[Mapping[int, int]], features: Sequence[TaskFeatures],
           limit: int = 6) -> list[dict[str, Any]]:
    """Per task, worst first (most needed messages dropped, then most waste): what the parent dropped
    that the oracle needed and what it kept that the oracle did not (the LLM proposer's prompt)."""
    found: list[tuple[Split, dict[str, Any]]] = []
    for f, needed, drops in zip(features, hindsight.needed, parent):
        s = split_task(f, needed, drops)
        wasted = sorted(((f.tokens[i] * f.reads(i, drops.get(i, NEVER)), i) for i in range(f.n)
                         if i not in needed), reverse=True)[:4]
        found.append((s, {"harm": s.harm, "waste_token_reads": round(s.waste),
                     "dropped_but_needed": [{"id": i, "role": f.role[i], "tool": f.tool[i]} for i in s.harmed],
                     "kept_but_not_needed": [{"id": i, "role": f.role[i], "tool": f.tool[i], "token_reads": round(w)}
                                             for w, i in wasted if w > 0],
                     "messages": f.n}))
    found.sort(key=lambda x: (-x[0].harm, -x[0].waste))
    return [row for _, row in found[:limit]]


@dataclass(frozen=True)
class HindsightTable:
    """The rule table read off a hindsight (``evals.cache.table_bound``, costed in token reads).

    Attributes:
        kept: the cells that hold a needed hop or a copy of each probe's evidence, cheapest first.
        cost: every cell seen -> the token reads its messages cost when kept for good rather than
            dropped once read (at the first assistant turn after them; an assistant message at itself).
    """

    kept: frozenset[Any]
    cost: Mapping[Any, float]

    @property
    def dropped(self) -> dict[Any, float]:
        """The cells seen and not kept -> the token reads dropping them saves."""
        return {c: v for c, v in self.cost.items() if c not in self.kept}


def read_at(f: TaskFeatures, i: int) -> int:
    """When a table drops message ``i``: at itself for an assistant message, else at the first assistant
    message after it (``NEVER`` when none follows)."""
    if f.role[i] == "assistant":
        return i
    return next((j for j in range(i + 1, f.n) if f.role[j] == "assistant"), NEVER)


def hindsight_table(hindsight: Hindsight, features: Sequence[TaskFeatures], tools: bool = True) -> HindsightTable:
    """The cheapest keep/drop table over role, tool (unless ``tools`` is off) and length that keeps
    one message of every set ``hindsight.needs`` names, on every task (an exact cover in token reads)."""
    from evals.cache.table_bound import Cell, cheapest_cover, length_bucket

    cells = [[Cell(f.role[i] if f.role[i] != "developer" else "system", f.tool[i] if tools else "",
                   length_bucket(int(f.tokens[i]))) for i in range(f.n)] for f in features]
    cost: dict[Any, float] = {}
    needs: list[frozenset[Any]] = []
    for k, f in enumerate(features):
        for i in range(f.n):
            cost[cells[k][i]] = cost.get(cells[k][i], 0.0) + float(f.tokens[i]) * (
                f.reads(i, NEVER) - f.reads(i, read_at(f, i)))
        needs += [frozenset(cells[k][m] for m in need) for need in hindsight.needs(k) if need]
    kept, _ = cheapest_cover(needs, cost)
    return HindsightTable(kept, cost)


def needed_until(task: Any, required: Sequence[int], kept: Sequence[int]) -> dict[int, int]:
    """Each kept message -> the last required probe's ``after_message`` at or after it."""
    asked = sorted(task.probes[i].after_message for i in required)
    return {m: max(a for a in asked if a >= m) for m in kept if asked and asked[-1] >= m}


def build_hindsight(tasks: Sequence[Any], episodes: Sequence[Episode], fulls: Sequence[Any], coster: Any,
                    judge: Any = None, budget: int = 8) -> Hindsight:
    """The oracle's view of ``tasks``: with ``judge`` (a model evaluation), the oracle searched with
    the model (``evals.cache.oracle.hindsight``, ``budget`` evaluations per task); without, its
    zero-forward start (each required probe's evidence, :meth:`evals.cache.oracle.Problem.start`)."""
    from evals.cache.fidelity import evidence_split
    from evals.cache.oracle import OracleConfig, Problem, hindsight

    needed, alternatives = [], []
    for task, full in zip(tasks, fulls):
        if judge is None:
            problem = Problem(task, full, coster)
            kept, required = sorted(problem.start()), problem.required
            sets: list[frozenset[int]] = []
            for i in required:
                copies, hops = evidence_split(task, i)
                sets += [frozenset({h}) for h in sorted(hops)] + ([copies] if copies else [])
            alternatives.append(tuple(dict.fromkeys(sets)))
        else:
            o = hindsight(task, full, judge, coster, OracleConfig(budget=budget))
            kept, required = list(o.kept) if o.method != "full" else list(range(len(task.messages))), o.required
            alternatives.append(tuple(frozenset({m}) for m in kept))
        needed.append(needed_until(task, required, kept))
    return Hindsight(tuple(episodes), tuple(needed), "evidence" if judge is None else "oracle", tuple(alternatives))
