"""The zero-forward fidelity: a policy's pass rate predicted without running the model.

The replay evaluator (:mod:`evals.cache.evaluator`) answers every probe with the model; on CPU that is
seconds per probe. Cost needs no model at all (the dry-run accountant is exact). This module
predicts the other objective from one fact the schedule fixes without a forward: whether each
probe's evidence is still attended when the probe is asked. The prediction for one probe is what
the model measurably did on that same probe in that state:

    predicted pass(probe) = passed_with_evidence(probe)     if none of its evidence is dropped
                            passed_without_evidence(probe)  otherwise

where the two outcomes come from two model evaluations per task that a search runs anyway: the
``full`` cache (evidence attended) and the ``drop_evidence`` control (exactly the evidence
dropped). The evidence messages that mention the answer (``evals.tasks.schema.mentions``) are
*copies*: one still attended is enough (a fact restated in the agent's reasoning can be read from
either message), and so is the summary a summarizing baseline (Standard, Text Engineering) wrote
in place of the messages it folded, when it mentions the answer. The others are *hops*: each must
still be attended (a multi-hop probe needs the message that leads to the answer). A probe is
"without evidence" when a hop is gone or every copy is. (Treating every evidence id as needed
predicted 0.583 for rolling drop of assistant turns with K=1 on `horizon` train, where the model
passed 0.917: the tool response still held the answer that the dropped reasoning had restated.
Ignoring summaries predicted 0.167 for Text Engineering at a 10,530-token window, where the model
passed 1.000: the extractive summary kept the facts.) What this ignores, and why it must be
validated rather than assumed: dropping *other* messages (distractors, look-alikes) can change an
answer too, and a summary can keep a fact in words the match does not find. :func:`spearman`
measures how well the proxy ranks policies the way the model does; a search reports it beside
every proxy number.

Results carry ``fidelity="proxy"``: a proxy number is a prediction, never a pass rate.
Not for: held-out claims (held-out is always answered by the model), or tasks whose two control
evaluations were not run (the proxy refuses them, naming the task).
"""

from __future__ import annotations

import json
import math
import time
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.cache.accounting import Accountant
from engine.errors import AKVError
from engine.interface import ChatEngine
from engine.layout import Rendered, Renderer
from evals.cache.cost import CostBreakdown
from evals.cache.evaluator import (
    DIAGNOSTIC,
    EvalConfig,
    PolicySpec,
    ProbeResult,
    Replay,
    RequestCost,
    TaskResult,
    probe_dropped,
    probe_state,
    request_cuts,
)
from evals.errors import TaskError
from evals.tasks.schema import Task, mentions, message_text
from search_spaces import Policy, request_points
from search_spaces.cache.decision import Decision

FULL = "full"
UNBOUNDED = 1 << 60


@dataclass(frozen=True)
class ProbeOutcome:
    """The model's answer to one probe with its evidence attended (``kept``) and dropped (``dropped``)."""

    kept: bool
    dropped: bool


@dataclass(frozen=True)
class EvidenceTable:
    """Measured outcomes per (task id, probe index), from the ``full`` and ``drop_evidence`` runs."""

    outcomes: Mapping[tuple[str, int], ProbeOutcome]
    _split: dict[tuple[str, int], tuple[frozenset[int], frozenset[int]]] = field(
        default_factory=dict, repr=False, compare=False)  # (task id, probe) -> (copies, hops), filled on use

    @classmethod
    def fit(cls, full: Iterable[TaskResult], dropped: Iterable[TaskResult]) -> EvidenceTable:
        """Pair the two control evaluations probe by probe.

        Raises:
            TaskError: a control result failed, or the two disagree on a task's probes.
        """
        kept = _by_probe(full, FULL)
        gone = _by_probe(dropped, DIAGNOSTIC)
        missing = sorted({t for t, _ in kept} ^ {t for t, _ in gone})
        if missing:
            raise TaskError(f"the full and drop_evidence controls cover different tasks: {missing[:5]}",
                            field="tasks", value=missing[:5])
        if set(kept) != set(gone):
            raise TaskError("the full and drop_evidence controls have different probes", field="probes")
        return cls({k: ProbeOutcome(kept[k], gone[k]) for k in kept})

    @classmethod
    def assumed(cls, tasks: Iterable[Task]) -> EvidenceTable:
        """Outcomes the model was never asked for: every probe of ``tasks`` passes with its
        evidence attended and fails without it (what a calibrated suite is built to do; measured
        outcomes differ on the probes the full cache fails or a dropped evidence passes by chance)."""
        return cls({(t.id, i): ProbeOutcome(True, False) for t in tasks for i in range(len(t.probes))})

    def merged(self, other: EvidenceTable) -> EvidenceTable:
        """Both tables' outcomes (this one's where both have a probe)."""
        return EvidenceTable({**other.outcomes, **self.outcomes})

    def tasks(self) -> set[str]:
        return {t for t, _ in self.outcomes}

    def predict(self, task: Task, index: int, dropped: set[int], summary: str | None = None) -> bool:
        """Whether probe ``index`` of ``task`` is predicted to pass with messages ``dropped`` gone
        (``summary``: the text a summarizing baseline put in their place, which is one more copy
        when it mentions the answer).

        Raises:
            TaskError: the table has no outcome for this probe.
        """
        outcome = self.outcomes.get((task.id, index))
        if outcome is None:
            raise TaskError(f"the proxy has no measured outcome for task {task.id!r} probe {index}: evaluate "
                            "'full' and 'drop_evidence' on it with the model first", field="task", value=task.id)
        copies, hops = self.evidence(task, index)
        kept_copy = not copies or not copies <= dropped or (
            summary is not None and mentions(summary, task.probes[index].answer))
        attended = not (hops & dropped) and kept_copy
        return outcome.kept if attended else outcome.dropped

    def evidence(self, task: Task, index: int) -> tuple[frozenset[int], frozenset[int]]:
        """:func:`evidence_split` of probe ``index`` of ``task`` (memoised per task and probe)."""
        key = (task.id, index)
        hit = self._split.get(key)
        if hit is None:
            hit = self._split[key] = evidence_split(task, index)
        return hit


def evidence_split(task: Task, index: int) -> tuple[frozenset[int], frozenset[int]]:
    """Probe ``index``'s evidence messages that mention its answer (copies: one suffices) and the
    others (hops: each is needed); see the module docstring."""
    probe = task.probes[index]
    ids = frozenset(probe.evidence_ids)
    copies = frozenset(e for e in ids if mentions(message_text(task.messages[e]), probe.answer))
    return copies, ids - copies


def _by_probe(results: Iterable[TaskResult], what: str) -> dict[tuple[str, int], bool]:
    out: dict[tuple[str, int], bool] = {}
    for r in results:
        if not r.ok or r.fidelity != "model":
            raise TaskError(f"the {what} control on task {r.task_id!r} is not a model result ({r.error or r.fidelity})",
                            field="tasks", value=r.task_id)
        out.update({(r.task_id, p.index): p.passed for p in r.probes})
    return out


class DryEngine:
    """What the proxy needs of an engine, without its weights: the renderer (tokenizer and chat
    template) for token counts and the dry-run accountant, and the KV bytes per token. A search
    whose evaluations run on Ray replicas or a server screens with one of these in its own process."""

    def __init__(self, renderer: Renderer, bytes_per_token: int, name: str = ""):
        self.renderer = renderer
        self.bytes_per_token = bytes_per_token
        self.name = name

    @classmethod
    def of(cls, engine: ChatEngine) -> DryEngine:
        """The renderer and KV size of a loaded engine (in-process or remote)."""
        geometry = getattr(engine, "geometry", None)
        return cls(engine.renderer, geometry.bytes_per_token if geometry is not None else 1, engine.name)

    @classmethod
    def load(cls, model: str, template: str) -> DryEngine:
        """Tokenizer and config of ``model`` only (seconds, not the weights' minute)."""
        import torch

        from engine.models.lean import KVGeometry
        from engine.models.loading import load_config

        geometry = KVGeometry.from_config(load_config(model), torch.float32)
        return cls(Renderer.for_model(model, template), geometry.bytes_per_token, model)

    def render(self, messages: Sequence[Any]) -> Rendered:
        return self.renderer.render(messages)

    def accountant(self, pool_bytes: int | None = None, host_bytes: int | None = None) -> Accountant:
        return Accountant(self.renderer, self.bytes_per_token, UNBOUNDED if pool_bytes is None else pool_bytes,
                          host_bytes or 0)


class ProxyReplay(Replay):
    """:class:`evals.cache.evaluator.Replay` at the zero-forward fidelity: the same decisions and the same
    exact accounting, with each probe's ``passed`` predicted by :class:`EvidenceTable` (the engine
    renders and accounts; it never runs a forward). The multiple-choice and generation fields of
    each probe stay empty: only ``passed`` is predicted.

    :meth:`evaluate_many` runs a policy program once for all tasks (its pooled sandbox processes,
    each keeping the trajectories it was sent) and remembers what a screen repeats, which is what
    makes screening thousands of candidates affordable; :meth:`evaluate_reference` is the slow,
    obvious screen it must equal.
    """

    fidelity = "proxy"

    #: How many task results (and, apart, accountings) are remembered, least recently used dropped
    #: first; 0 remembers nothing.
    MEMO_SIZE = 2048

    def __init__(self, engine: ChatEngine | DryEngine, table: EvidenceTable, config: EvalConfig | None = None):
        super().__init__(engine, config)  # type: ignore[arg-type]  # (only render and accountant are used)
        self.table = table
        self._accounted: OrderedDict[Hashable, tuple[list[RequestCost], CostBreakdown]] = OrderedDict()
        self._decided: OrderedDict[Hashable, tuple[tuple[Decision, ...], _Screened]] = OrderedDict()
        self._screened: OrderedDict[Hashable, tuple[_Screened, ...]] = OrderedDict()
        self.accounting_hits = 0  # sessions whose accounting was reused (same task, same schedules)
        self.results_reused = 0  # policy-task results given again (the same program, parameters and tasks)

    def forget(self) -> None:
        """Drop everything remembered (a benchmark's repeats start cold)."""
        self._accounted.clear()
        self._decided.clear()
        self._screened.clear()
        self.accounting_hits = self.results_reused = 0

    def _remember(self, memo: OrderedDict[Hashable, Any], key: Hashable, value: Any, per_entry: int = 1) -> None:
        """Keep ``value`` under ``key`` in ``memo``, which holds at most :attr:`MEMO_SIZE` task results
        (``per_entry`` in each of its entries)."""
        memo[key] = value
        memo.move_to_end(key)
        while len(memo) * per_entry > self.MEMO_SIZE:
            memo.popitem(last=False)

    def account(self, task: Task, points: list[int], decisions: Mapping[int, Decision | None],
                 ) -> tuple[list[RequestCost], CostBreakdown]:
        """The exact accounting of the base class, remembered per (task, schedule of every request): a
        screen's trials often decide alike (parameters that do not change the schedule on a task, a
        sampler proposing a point twice, two programs with one behaviour), and the accounting is most
        of what a proxy evaluation costs. Text rewrites are accounted afresh each time."""
        if any(d is not None and d.schedule is None for d in decisions.values()):
            return super().account(task, points, decisions)
        key = (task.id, tuple((n, None if (d := decisions[n]) is None else d.schedule) for n in points))
        hit = self._accounted.get(key)
        if hit is None:
            hit = super().account(task, points, decisions)
            self._remember(self._accounted, key, hit)
        else:
            self._accounted.move_to_end(key)
            self.accounting_hits += 1
        requests, cost = hit
        return list(_fresh(requests)), cost

    def evaluate_many(self, spec: PolicySpec, tasks: Sequence[Task]) -> list[TaskResult]:
        """``spec`` on every task of ``tasks``; one policy run for all of them. Each task is
        accounted as soon as the policy has decided it, while the policy decides the next (a
        program runs in its own process: the two overlap).

        What a program screen repeats is remembered (:attr:`MEMO_SIZE` entries each), never what it
        did not do: the results of a program whose every task succeeded, by (program, parameters,
        tasks), given again when the same call comes again (a sampler proposing a point twice); a
        task's accounting and probes by the decisions themselves (the program's sandbox gives the
        same checked decisions again for the same text, :mod:`search_spaces.cache.program`), and
        by their schedules (:meth:`account`). A program's results are taken to depend on nothing
        but its parameters and the tasks, as the sandbox makes them (no clock, no randomness, no
        files); :meth:`evaluate_reference` is what they must equal."""
        t0 = time.perf_counter()
        call = _call_key(spec, tasks)
        hit = self._screened.get(call) if call is not None else None
        if hit is not None:
            self._screened.move_to_end(call)
            self.results_reused += len(tasks)
            return [self.scored_row(spec, task, r.probes, r.copy_requests(), r.cost, time.perf_counter() - t0)
                    for task, r in zip(tasks, hit)]
        out: list[TaskResult] = []
        try:
            policy = spec.build()
            if policy is None:
                return [self.evaluate(spec, t) for t in tasks]
            episodes = [self.episode(t) for t in tasks]

            def account(e: int, decisions: tuple[Decision, ...]) -> None:
                task = tasks[e]
                try:
                    out.append(self._decided_result(spec, task, episodes[e].cuts, decisions, t0))
                except AKVError as err:
                    if err.transient:
                        raise
                    out.append(self.failed_row(spec, task, f"{type(err).__name__}: {err}", t0))

            policy.run_episodes(episodes, account)
        except AKVError as err:  # a policy that cannot run: every task's failure, recorded with its reason
            if err.transient:
                raise
            return [self.failed_row(spec, t, f"{type(err).__name__}: {err}", t0) for t in tasks]
        if call is not None and len(out) == len(tasks) and all(r.ok for r in out):
            self._remember(self._screened, call, tuple(_Screened.of(r) for r in out), max(1, len(tasks)))
        return out

    def _decided_result(self, spec: PolicySpec, task: Task, cuts: Sequence[int], decisions: tuple[Decision, ...],
                        t0: float) -> TaskResult:
        """:meth:`evaluate_decisions` of ``decisions`` (one per cut), remembered for a program by the decisions
        object itself (kept alive here, so its identity names it alone while remembered)."""
        if spec.source is None:
            return self.evaluate_decisions(spec, task, self._guarded(task, dict(zip(cuts, decisions))), t0)
        key = (task.id, id(decisions))
        hit = self._decided.get(key)
        if hit is not None and hit[0] is decisions:
            self._decided.move_to_end(key)
            self.accounting_hits += 1
            r = hit[1]
            return self.scored_row(spec, task, r.probes, r.copy_requests(), r.cost, time.perf_counter() - t0)
        result = self.evaluate_decisions(spec, task, self._guarded(task, dict(zip(cuts, decisions))), t0)
        self._remember(self._decided, key, (decisions, _Screened.of(result)))
        return result

    def batch_scorer(self) -> None:
        return None  # probes are predicted, never scored: nothing to batch

    def evaluate_reference(self, spec: PolicySpec, task: Task) -> TaskResult:
        """The simplest correct screen of ``spec`` on ``task``: the reference :meth:`evaluate_many`
        must equal, field by field (``seconds`` aside; the tests hold it to that). Every request is
        decided on its own (:meth:`Policy.run_episodes` of the base class: a program answers one
        request per sandbox call, its module, messages and features made afresh, the previous
        decision given in canonical form, each decision parsed and checked in full), the session is
        accounted afresh (:meth:`Replay.account`: nothing remembered) and each probe's dropped
        messages come from :func:`probe_state`. Slow: for tests, not for screening."""
        t0 = time.perf_counter()
        try:
            policy = spec.build()
            if policy is None:
                decisions = self.decide(spec, task)
            else:
                decisions = self._guarded(task, dict(zip(request_cuts(task),
                                                         Policy.run_episodes(policy, [self.episode(task)])[0])))
            requests, cost = Replay.account(self, task, list(request_points(list(task.messages))), decisions)
            probes = []
            for i, p in enumerate(task.probes):
                decision = decisions[p.after_message + 1]
                dropped = probe_state(task, i, decision, spec.name == DIAGNOSTIC)[2]
                probes.append(self._predicted(task, i, decision, dropped))
            return self.scored_row(spec, task, tuple(probes), tuple(requests), cost, time.perf_counter() - t0)
        except AKVError as err:
            if err.transient:
                raise
            return self.failed_row(spec, task, f"{type(err).__name__}: {err}", t0)

    def _probe(self, task: Task, index: int, decision: Decision | None, spec: PolicySpec) -> ProbeResult:
        return self._predicted(task, index, decision, probe_dropped(task, index, decision, spec.name == DIAGNOSTIC))

    def _predicted(self, task: Task, index: int, decision: Decision | None, dropped: set[int]) -> ProbeResult:
        """Probe ``index``'s result, predicted with messages ``dropped`` gone under ``decision``."""
        probe = task.probes[index]
        summary = decision.meta.get("summary") if decision is not None and decision.messages is not None else None
        passed = self.table.predict(task, index, dropped, summary if isinstance(summary, str) else None)
        return ProbeResult(index, probe.kind, probe.after_message, probe.answer, "", False, False, "", False, False,
                           tuple(sorted(dropped & set(probe.evidence_ids))), passed)


@dataclass(frozen=True)
class _Screened:
    """What a proxy result holds beside the policy's name and the time it took (remembered)."""

    probes: tuple[ProbeResult, ...]
    requests: tuple[RequestCost, ...]
    cost: CostBreakdown

    @classmethod
    def of(cls, result: TaskResult) -> _Screened:
        return cls(result.probes, _fresh(result.requests), result.cost)

    def copy_requests(self) -> tuple[RequestCost, ...]:
        """The requests with usage dicts of their own (a caller may edit a result's)."""
        return _fresh(self.requests)


def _fresh(requests: Iterable[RequestCost]) -> tuple[RequestCost, ...]:
    """``requests`` with usage dicts of their own."""
    return tuple(RequestCost(r.n_messages, dict(r.usage), r.cost_usd, r.summary_usd) for r in requests)


def _call_key(spec: PolicySpec, tasks: Sequence[Task]) -> Hashable | None:
    """What a program's screen call is, for remembering its results: the program, its parameters
    as given (in order) and the tasks in order; ``None`` for a built-in policy or parameters that
    are not JSON."""
    if spec.source is None:
        return None
    try:
        params = json.dumps(dict(spec.params))
    except (TypeError, ValueError):
        return None
    return spec.name, spec.source, params, tuple(t.id for t in tasks)


def _ranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n, ties given their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (Pearson's r of the average ranks); ``nan`` when either side is
    constant or there are fewer than 3 pairs.

    Raises:
        ValueError: ``xs`` and ``ys`` differ in length.
    """
    if len(xs) != len(ys):
        raise ValueError(f"spearman needs pairs: {len(xs)} x values, {len(ys)} y values")
    if len(xs) < 3:
        return float("nan")
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / (sxx * syy) ** 0.5 if sxx > 0 and syy > 0 else float("nan")


@dataclass(frozen=True)
class FidelityCheck:
    """How well the proxy ranked policies the way the model did (same train tasks, both fidelities).

    Attributes:
        policies: distinct policies evaluated at both fidelities.
        spearman: rank correlation of predicted and model pass rates (``nan`` below 3 policies).
        target: the correlation the proxy should reach to be trusted for screening.
    """

    policies: int
    spearman: float
    target: float = 0.8

    @property
    def enough(self) -> bool:
        """Whether there are enough policies (30) for the correlation to mean much."""
        return self.policies >= 30

    def summary(self) -> str:
        if self.policies < 3:
            return f"proxy fidelity: {self.policies} policies at both fidelities, too few to rank"
        if math.isnan(self.spearman):
            return (f"proxy fidelity: no rank correlation over {self.policies} policies on train (the predicted "
                    "or the model pass rates are all equal), so the proxy's ranking is untested")
        verdict = "meets" if self.spearman >= self.target else "misses"
        scope = "" if self.enough else f" (only {self.policies} policies; 30 are needed for a firm figure)"
        return (f"proxy fidelity: Spearman {self.spearman:.2f} between predicted and model pass rate over "
                f"{self.policies} policies on train, {verdict} the {self.target:.1f} target{scope}")


def check_fidelity(pairs: Mapping[str, tuple[float, float]]) -> FidelityCheck:
    """``pairs``: policy key -> (predicted pass rate, model pass rate) on the same tasks."""
    xs = [p for p, _ in pairs.values()]
    ys = [m for _, m in pairs.values()]
    return FidelityCheck(len(pairs), spearman(xs, ys))


@dataclass
class FidelitySpeed:
    """Policy-task evaluations made at each fidelity and the seconds they took (a search's own
    measurement of what the cascade saves: results read back from a store are not counted).

    Attributes:
        counts / seconds: per fidelity (``model``, ``proxy``).
    """

    counts: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, fidelity: str, seconds: Iterable[float]) -> None:
        """Count one evaluation per item of ``seconds`` (each its own duration)."""
        for s in seconds:
            self.counts[fidelity] = self.counts.get(fidelity, 0) + 1
            self.seconds[fidelity] = self.seconds.get(fidelity, 0.0) + s

    def per_minute(self, fidelity: str) -> float | None:
        """Evaluations per minute of one evaluator at ``fidelity`` (``None`` before any)."""
        n, s = self.counts.get(fidelity, 0), self.seconds.get(fidelity, 0.0)
        return 60 * n / s if n and s > 0 else None

    @property
    def ratio(self) -> float | None:
        """How many times more proxy than model evaluations a minute buys (``None`` until both ran)."""
        proxy, model = self.per_minute("proxy"), self.per_minute("model")
        return proxy / model if proxy is not None and model is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "seconds": dict(self.seconds),
                "per_minute": {f: self.per_minute(f) for f in sorted(self.counts)}, "ratio": self.ratio}
