"""The replay evaluator: a policy's cost and pass rate on recorded agent trajectories.

For one (policy, task): the policy decides at every request point of the trajectory (one call,
one sandbox process for a program); each request is accounted exactly as a serving system with
a radix cache would bill it (the engine's dry-run accountant: prefill, cached, repositioned and
output tokens; text baselines also pay their summary calls and the re-prefill after an edit);
at each probe the real engine answers under the cache state the schedule produced, by ranking
the candidates by log-likelihood and (``EvalConfig.generate``) by greedy generation. Many policies
on one task share computed KV through the engine's radix tree, so :func:`evaluate` runs pairs task
by task.

``drop_evidence`` (a diagnostic, not a policy) answers each probe with exactly its evidence
dropped; its cost is the session's under the schedule that drops every probe's evidence when the
probe is asked (cumulative, as a policy would). Its control ``drop_other`` (as many other tool
outputs dropped) runs only in the BFCL judge (:mod:`evals.bfcl.controls`); here it is refused.

A policy that fails (a program refused or crashing, an invalid decision) gives a result with
``ok=False`` and the reason; never a score.
"""

from __future__ import annotations

import hashlib
import json
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, TypeVar

import yaml

from engine.cache.accounting import Accountant
from engine.cache.session_accountant import SessionAccountant
from engine.errors import AKVError, ScoringUnsupportedError
from engine.interface import BatchGenerator, BatchScorer, ChatEngine, ChatOptions
from engine.layout import Rendered, SessionLayout
from engine.request import Request
from engine.results import ChatResult, ScoreResult
from engine.schedule import EMPTY, Schedule, parse_schedule
from evals.cache.cost import CostBreakdown, request_cost
from evals.cache.diagnostics import drop_evidence_schedule
from evals.cache.generation import BatchGeneration, GenerationTally
from evals.cache.guard import guard_decisions
from evals.cache.log_fidelity import TurnScore, compare, passes, scored_turns, turn_text
from evals.cache.probes import ProbeFormat, ProbePrompt, answer_matches, probe_prompt
from evals.errors import TaskError
from evals.rates import Rates, load_rates
from evals.tasks.logs import is_log_task
from evals.tasks.schema import Task
from search_spaces import Episode, Policy, PolicyKind, get_policy, request_points
from search_spaces.cache.decision import Decision

_T = TypeVar("_T")
DIAGNOSTIC = "drop_evidence"
OTHER_CONTROL = "drop_other"
"""The diagnostic's control: as many tool outputs dropped as the evidence, none of them evidence. Only
the BFCL judge runs it (:mod:`evals.bfcl.controls`); a probe evaluation refuses it (:meth:`Replay.decide`)."""
CONTROLS = (DIAGNOSTIC, OTHER_CONTROL)
"""The fixed controls that are named like policies but built by no family (:meth:`PolicySpec.build`: ``None``)."""
FIDELITY_BOUND = 0.5
"""Default bound on a turn's loss of log-likelihood per token for a policy to pass a log conversation."""
SCORINGS = ("loglik", "loglik-norm", "generate")
"""What decides a probe's ``passed``: the top candidate by summed log-likelihood (``loglik``, acc), by
log-likelihood per character of the candidate (``loglik-norm``, lm-evaluation-harness acc_norm), or
normalised exact match of the greedy answer (``generate``)."""


@dataclass(frozen=True)
class PolicySpec:
    """A policy to evaluate: a family name (or ``program`` with its source, or a control of :data:`CONTROLS`)."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    source: str | None = None
    label: str = ""

    @property
    def display(self) -> str:
        return self.label or self.name

    @property
    def key(self) -> str:
        """Stable identity of the policy: program hash (or family name) + parameters."""
        what = hashlib.sha256(self.source.encode()).hexdigest() if self.source else self.name
        blob = json.dumps({"policy": what, "params": dict(self.params)}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @classmethod
    def parse(cls, text: str) -> PolicySpec:
        """An expert in the config notation: ``name`` or ``name:k=v,k=v`` (values parsed as YAML
        scalars); labelled ``expert:name(k=v,...)``."""
        name, _, rest = text.partition(":")
        params = {}
        for kv in filter(None, rest.split(",")):
            k, _, v = kv.partition("=")
            params[k.strip()] = yaml.safe_load(v)
        short = ",".join(f"{k}={v}" for k, v in params.items())
        return cls(name.strip(), params, label=f"expert:{name.strip()}" + (f"({short})" if short else ""))

    def build(self) -> Policy | None:
        """The policy object (``None`` for the controls of :data:`CONTROLS`)."""
        if self.name in CONTROLS:
            return None
        if self.source is not None:
            return Policy.from_program(self.source, dict(self.params))
        return get_policy(self.name, **dict(self.params))


@dataclass(frozen=True)
class EvalConfig:
    """How to score. ``scoring``: what decides a probe's pass (:data:`SCORINGS`); ``generate``: also
    generate a greedy answer (exact / contains match; needed by ``scoring="generate"``);
    ``pool_bytes`` bounds the dry-run pool of the cost model (``None``: unlimited); ``frame_guard``:
    every decision guarded before it is accounted or asked (:mod:`evals.cache.guard`: drops wait
    until an assistant turn has read the message, the system prompt and task are never dropped);
    ``fidelity_bound``: on a task without probes (an agent log), the policy passes the conversation
    when no recorded assistant turn loses more than this much log-likelihood per token against the
    full cache (:mod:`evals.cache.log_fidelity`; one pass/fail "probe" of kind ``fidelity``)."""

    rates: str = "gpt-oss-120b"
    scoring: str = "loglik"
    probe: ProbeFormat = field(default_factory=ProbeFormat)
    pool_bytes: int | None = None
    generate: bool = True
    frame_guard: bool = False
    fidelity_bound: float = FIDELITY_BOUND

    def __post_init__(self) -> None:
        if not (isinstance(self.fidelity_bound, int | float) and 0 <= self.fidelity_bound < float("inf")):
            raise ValueError(f"fidelity_bound must be a finite number >= 0, got {self.fidelity_bound!r}")
        if self.scoring not in SCORINGS:
            raise ValueError(f"scoring must be one of {', '.join(SCORINGS)}, got {self.scoring!r}")
        if self.scoring == "generate" and not self.generate:
            raise ValueError("scoring='generate' needs generate=True")

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rates": self.rates, "scoring": self.scoring, "probe": self.probe.as_dict(),
               "pool_bytes": self.pool_bytes, "generate": self.generate}
        if self.frame_guard:  # named only when on: stores written without the guard keep their keys
            out["frame_guard"] = True
        if self.fidelity_bound != FIDELITY_BOUND:  # the same: named only when not the default
            out["fidelity_bound"] = self.fidelity_bound
        return out

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ProbeResult:
    """One probe's outcome under a policy."""

    index: int
    kind: str
    after_message: int
    answer: str
    generated: str
    exact: bool
    contains: bool
    choice: str
    mc_correct: bool
    mc_norm_correct: bool
    evidence_dropped: tuple[int, ...]
    passed: bool


@dataclass(frozen=True)
class ProbeAsk:
    """What one probe asks the engine under a policy: the context (the history as the policy left
    it, then the question turn), its cache schedule, the reply's lead-in and candidates
    (``prompt``), and the ids of messages whose content is gone by then."""

    index: int
    prompt: ProbePrompt
    context: list[dict[str, Any]]
    schedule: Schedule | Mapping[str, Any] | None
    dropped: set[int]


@dataclass(frozen=True)
class RequestCost:
    """One request of the replayed session: its usage and cost (USD)."""

    n_messages: int
    usage: dict[str, int]
    cost_usd: float
    summary_usd: float = 0.0


@dataclass(frozen=True)
class TaskResult:
    """A policy on a task. ``ok=False`` means it failed (``error`` says why) and has no score."""

    task_id: str
    family: str
    split: str
    policy: str
    policy_key: str
    params: dict[str, Any]
    ok: bool
    error: str | None
    probes: tuple[ProbeResult, ...]
    requests: tuple[RequestCost, ...]
    cost: CostBreakdown
    seconds: float
    generator: str = ""
    generator_version: str = ""
    fidelity: str = "model"
    """What produced ``probes``: ``model`` (the engine answered) or ``proxy`` (predicted without a
    forward, :mod:`evals.cache.fidelity`); cost and token counts are exact either way."""

    @property
    def cost_cents(self) -> float:
        return self.cost.cents

    @property
    def n_passed(self) -> int:
        return sum(p.passed for p in self.probes)

    @property
    def pass_rate(self) -> float:
        return self.n_passed / len(self.probes) if self.probes else float("nan")

    def to_row(self) -> dict[str, Any]:
        """A flat record (parquet / JSON): scalars plus JSON-encoded probes and requests."""
        return {
            "task_id": self.task_id, "family": self.family, "split": self.split, "policy": self.policy,
            "policy_key": self.policy_key, "params": json.dumps(self.params, sort_keys=True, default=str),
            "ok": self.ok, "error": self.error, "pass_rate": self.pass_rate, "n_probes": len(self.probes),
            "n_passed": self.n_passed, "cost_cents": self.cost_cents,
            **{f"cost_{k}_cents": v * 100 for k, v in asdict(self.cost).items()},
            "prompt_tokens": sum(r.usage["prompt_tokens"] for r in self.requests),
            "prefill_tokens": sum(r.usage["prefill_tokens"] for r in self.requests),
            "cached_tokens": sum(r.usage["cached_tokens"] for r in self.requests),
            "drop_skipped_tokens": sum(r.usage["drop_skipped_tokens"] for r in self.requests),
            "repos_tokens": sum(r.usage["repos_tokens"] for r in self.requests),
            "completion_tokens": sum(r.usage["completion_tokens"] for r in self.requests),
            "seconds": self.seconds, "generator": self.generator, "generator_version": self.generator_version,
            "fidelity": self.fidelity,
            "probes": json.dumps([asdict(p) for p in self.probes]),
            "requests": json.dumps([asdict(r) for r in self.requests]),
        }


def result_from_row(row: Mapping[str, Any]) -> TaskResult:
    """Inverse of :meth:`TaskResult.to_row` (for stored results)."""
    cost = CostBreakdown(**{k: row[f"cost_{k}_cents"] / 100 for k in ("input", "cached", "repos", "output",
                                                                          "summary")})
    return TaskResult(
        row["task_id"], row["family"], row["split"], row["policy"], row["policy_key"], json.loads(row["params"]),
        bool(row["ok"]), row["error"], tuple(ProbeResult(**{**p, "evidence_dropped": tuple(p["evidence_dropped"])})
                                             for p in json.loads(row["probes"])),
        tuple(RequestCost(**r) for r in json.loads(row["requests"])), cost, float(row["seconds"]),
        row.get("generator", ""), row.get("generator_version", ""), row.get("fidelity", "model"))


def _dropped_ids(decision: Decision | None, upto: int) -> set[int]:
    """Messages whose content is gone (KV dropped, or text summarized/removed) by trigger ``upto``."""
    if decision is None:
        return set()
    if decision.schedule is not None:
        return {d.message for t, ds in decision.schedule.drops if t <= upto for d in ds
                if d.kind.value == "message"}
    meta = decision.meta
    return set(meta.get("summarized_ids") or []) | set(meta.get("removed_ids") or [])


class Replay:
    """Evaluates policies on tasks with one engine (its radix tree is shared by every evaluation).

    Args:
        engine: the engine that answers probes: in this process (``engine.Engine``) or a server
            (``engine.remote.RemoteEngine``); any ``engine.interface.ChatEngine``.
        config: rates, scoring, probe format, dry-run pool.
        generation: how probe answers are generated when a task's policies run in lockstep
            (batched, and whether each batched answer is checked alone); what was generated and
            what batching changed is counted in :attr:`generation_tally`.

    An engine that cannot score (``ScoringUnsupportedError``, SGLang-based servers) fails every
    evaluation with that reason under the log-likelihood scorings; under ``scoring="generate"`` its
    probes are judged by the greedy answer and the multiple-choice fields stay empty. A transient error
    (a server down) is raised, not recorded: it is not the policy's failure.
    """

    fidelity = "model"

    def __init__(self, engine: ChatEngine, config: EvalConfig | None = None,
                 generation: BatchGeneration | None = None):
        self.engine = engine
        self.config = config or EvalConfig()
        self.generation = generation or BatchGeneration()
        self.generation_tally = GenerationTally()
        self.rates: Rates = load_rates(self.config.rates)
        self._rendered: dict[str, Rendered] = {}
        self._episodes: dict[str, Episode] = {}
        self._outputs: dict[str, dict[int, list[int]]] = {}
        self._full_turns: dict[str, list[TurnScore]] = {}  # a log task's turn scores under the full cache

    def rendered(self, task: Task) -> Rendered:
        """``task``'s whole trajectory rendered by the engine (once per task; each request is a prefix)."""
        if task.id not in self._rendered:
            self._rendered[task.id] = self.engine.render(list(task.messages))
        return self._rendered[task.id]

    def token_counts(self, task: Task) -> list[int]:
        return self.rendered(task).message_tokens

    def evaluate(self, spec: PolicySpec, task: Task) -> TaskResult:
        """Replay ``task`` under ``spec`` (see the module docstring)."""
        t0 = time.perf_counter()
        try:
            return self._evaluate(spec, task, t0)
        except AKVError as err:
            if err.transient:
                raise
            return self.failed_row(spec, task, f"{type(err).__name__}: {err}", t0)

    def evaluate_policies(self, specs: Sequence[PolicySpec], task: Task) -> list[TaskResult]:
        """Every policy of ``specs`` on ``task`` in lockstep: the rows ``[self.evaluate(s, task) for s
        in specs]`` gives (``seconds`` aside), each probe's scorings batched across the policies in
        one forward when the engine can (:mod:`evals.cache.lockstep`). A failing policy is its
        own failed row; the others go on."""
        from evals.cache.lockstep import evaluate_policies

        return evaluate_policies(self, specs, task)

    def batch_scorer(self) -> BatchScorer | None:
        """The engine, when :meth:`evaluate_policies` may batch its scorings (it scores several
        requests in one pass); ``None``: one policy after another."""
        return self.engine if isinstance(self.engine, BatchScorer) else None

    def failed_row(self, spec: PolicySpec, task: Task, reason: str, t0: float) -> TaskResult:
        """The row of ``spec`` failing on ``task`` for ``reason`` (its first line, at most 500
        characters), begun at ``t0`` (``time.perf_counter``)."""
        return TaskResult(task.id, task.family, task.split, spec.display, spec.key, dict(spec.params), False,
                          reason.splitlines()[0][:500], (), (), CostBreakdown(), time.perf_counter() - t0,
                          task.generator, task.generator_version, self.fidelity)

    def episode(self, task: Task) -> Episode:
        """``task`` as the policies see it, cut at :func:`request_cuts` (made once per task: an
        episode is frozen, and freezing the messages is most of the cost of making one)."""
        if task.id not in self._episodes:
            self._episodes[task.id] = Episode.of(list(task.messages), self.token_counts(task), request_cuts(task))
        return self._episodes[task.id]

    def _decisions(self, policy: Policy | None, task: Task, cuts: Sequence[int]) -> dict[int, Decision | None]:
        if policy is None:
            return dict.fromkeys(cuts)
        return dict(zip(cuts, policy.run_episodes([self.episode(task)])[0]))

    def _evaluate(self, spec: PolicySpec, task: Task, t0: float) -> TaskResult:
        return self.evaluate_decisions(spec, task, self.decide(spec, task), t0)

    def decide(self, spec: PolicySpec, task: Task) -> dict[int, Decision | None]:
        """``spec``'s decision at every request cut of ``task`` (:func:`request_cuts`), as the
        evaluation takes them (guarded under :attr:`EvalConfig.frame_guard`).

        Raises:
            AKVError: the policy cannot run or decides invalidly; ``drop_other`` (BFCL's judge only).
        """
        if spec.name == OTHER_CONTROL:
            raise TaskError(f"{OTHER_CONTROL} is a control of the BFCL judge only (--suite bfcl-base|bfcl-long); "
                            f"a probe evaluation has {DIAGNOSTIC} alone", field="policy", value=spec.name)
        cuts = request_cuts(task)
        if spec.name == DIAGNOSTIC:
            return _diagnostic_decisions(task, cuts)
        return self._guarded(task, self._decisions(spec.build(), task, cuts))

    def _guarded(self, task: Task, decisions: Mapping[int, Decision | None]) -> dict[int, Decision | None]:
        """``decisions`` as the evaluation takes them: under :attr:`EvalConfig.frame_guard`, guarded."""
        return guard_decisions(task.messages, decisions) if self.config.frame_guard else dict(decisions)

    def cost(self, spec: PolicySpec, task: Task) -> CostBreakdown:
        """``spec``'s exact cost on ``task`` (the session's accounting only: no probe is answered,
        so no forward runs; what :meth:`evaluate` reports as ``cost``).

        Raises:
            AKVError: the policy cannot run or decides invalidly (raised, not recorded).
        """
        _, cost = self.account(task, list(request_points(list(task.messages))), self.decide(spec, task))
        return cost

    def evaluate_decisions(self, spec: PolicySpec, task: Task, decisions: Mapping[int, Decision | None],
                           t0: float) -> TaskResult:
        """``spec``'s row on ``task`` under ``decisions`` (cut -> decision, already decided): the
        session accounted and the probes answered; ``t0`` (``time.perf_counter``) starts its clock."""
        msgs = list(task.messages)
        points = list(request_points(msgs))
        requests, cost = self.account(task, points, decisions)
        if not task.probes and is_log_task(task):  # an agent log: its one "probe" is its turns' fidelity
            return self.scored_row(spec, task, (self._fidelity_probe(spec, task),), tuple(requests), cost,
                                time.perf_counter() - t0)
        probes = tuple(self._probe(task, i, decisions[p.after_message + 1], spec)
                       for i, p in enumerate(task.probes))
        return self.scored_row(spec, task, probes, tuple(requests), cost, time.perf_counter() - t0)

    def _fidelity_probe(self, spec: PolicySpec, task: Task) -> ProbeResult:
        """Pass when no recorded assistant turn loses more than ``fidelity_bound`` log-likelihood per
        token against the full cache (the full cache's turn scores are made once per task)."""
        if task.id not in self._full_turns:
            self._full_turns[task.id] = self.turn_scores(PolicySpec("full"), task, first_tokens=False)
        full = self._full_turns[task.id]
        turns = self.turn_scores(spec, task, first_tokens=False)
        f = compare(task.id, spec.display, full, turns, 0.0, 0.0)  # (costs: accounted by the caller)
        last = turns[-1].index if turns else len(task.messages) - 1
        return ProbeResult(0, "fidelity", last, "", f"worst change of log-likelihood per token {f.worst_delta:+.6f}",
                           False, False, "", False, False, (), passes(f, self.config.fidelity_bound))

    def turn_scores(self, spec: PolicySpec, task: Task, *, first_tokens: bool = True,
                    full: Sequence[TurnScore] | None = None) -> list[TurnScore]:
        """Every assistant turn a request of ``task`` produces, scored under ``spec``'s decision at
        that request: its teacher-forced log-likelihood given the history (all turns in one forward
        pass when the engine batches scorings), and with ``first_tokens`` the greedy first token of
        the reply (``evals.cache.log_fidelity``; no probe is needed). ``full``: the full cache's turn
        scores of ``task``; a turn whose request keeps the whole cache under ``spec`` (no drop, no
        reposition, the history not rewritten: the same context) takes its score from there rather
        than being scored again.

        Raises:
            AKVError: the policy cannot run or decides invalidly.
        """
        decisions = self.decide(spec, task)
        template = self.engine.renderer.template
        msgs = list(task.messages)
        asks = []
        known = {f.index: f for f in full or ()}
        same: dict[int, TurnScore] = {}
        for t in scored_turns(msgs, request_points(msgs)):
            decision = decisions.get(t)
            if t in known and (decision is None or (decision.messages is None and (
                    decision.schedule is None or decision.schedule.is_empty))) and (known[t].first_token or
                                                                                    not first_tokens):
                same[t] = known[t]
                continue
            if decision is not None and decision.messages is not None:  # a text policy rewrote the history
                context, schedule = [dict(m) for m in decision.messages], None
            else:
                context, schedule = msgs[:t], decision.schedule if decision is not None else None
            asks.append((t, context, schedule, turn_text(template, msgs[t], t)))
        scorer = self.batch_scorer()
        if scorer is not None and asks:  # every turn in one forward pass (engine.batch_score)
            scores = scorer.score_many([scorer.prepare(c, s, candidates=[text]) for _, c, s, text in asks])
        else:
            scores = [self.engine.score(c, [text], s) for _, c, s, text in asks]
        out = list(same.values())
        for (t, context, schedule, _), scored in zip(asks, scores):
            first = self.engine.chat(context, schedule, max_tokens=1).text if first_tokens else ""
            out.append(TurnScore(t, scored.n_tokens[0], scored.logprobs[0], first))
        return sorted(out, key=lambda turn: turn.index)

    def scored_row(self, spec: PolicySpec, task: Task, probes: tuple[ProbeResult, ...],
                   requests: tuple[RequestCost, ...], cost: CostBreakdown, seconds: float) -> TaskResult:
        """The row of ``spec`` evaluated on ``task``: its probes' results, requests and cost."""
        return TaskResult(task.id, task.family, task.split, spec.display, spec.key, dict(spec.params), True, None,
                          probes, requests, cost, seconds, task.generator, task.generator_version, self.fidelity)

    def account(self, task: Task, points: list[int], decisions: Mapping[int, Decision | None],
                 ) -> tuple[list[RequestCost], CostBreakdown]:
        """Every request's usage and cost, and the session's cost (summary calls included)."""
        eng = self.engine
        whole = self.rendered(task)
        session = self._session_layout(task, points, decisions)
        acc: Accountant | SessionAccountant = (
            SessionAccountant(eng.renderer) if self.config.pool_bytes is None
            else eng.accountant(pool_bytes=self.config.pool_bytes, host_bytes=0))
        out: list[RequestCost] = []
        total = CostBreakdown()
        seen_events = 0
        for n in points:
            d = decisions[n]
            output = self._output_ids(task, n)
            summary_usd = 0.0
            if d is not None and d.messages is not None:
                usage = acc.request_rendered(eng.render([dict(m) for m in d.messages]), None, output)
                events = list(d.meta.get("events") or [])
                for ev in events[seen_events:]:
                    if ev.get("input_tokens") is not None:
                        call = {"prompt_tokens": ev["input_tokens"], "prefill_tokens": ev["input_tokens"],
                                "cached_tokens": 0, "drop_skipped_tokens": 0, "repos_tokens": 0,
                                "completion_tokens": ev.get("output_tokens") or 0}
                        summary_usd += request_cost(call, self.rates).total
                seen_events = len(events)
            elif session is not None and isinstance(acc, SessionAccountant):
                usage = acc.request_layout(session, n, output)
            else:
                usage = acc.request_rendered(whole.prefix(n), d.schedule if d is not None else None, output)
            cost = request_cost(usage, self.rates)
            total = total + cost + CostBreakdown(summary=summary_usd)
            out.append(RequestCost(n, usage.as_dict(), cost.total, summary_usd))
        return out, total

    def _session_layout(self, task: Task, points: list[int], decisions: Mapping[int, Decision | None],
                        ) -> SessionLayout | None:
        """The session compiled once (:class:`engine.layout.SessionLayout`) when every request is
        under a cache schedule that extends the previous ones and the pool is unbounded; ``None``
        otherwise (a text rewrite, a bounded pool: each request is compiled on its own)."""
        if self.config.pool_bytes is not None:
            return None
        schedules: list[Schedule] = []
        for n in points:
            d = decisions[n]
            schedule = EMPTY if d is None else d.schedule
            if schedule is None:
                return None
            schedules.append(schedule)
        last = schedules[-1]
        triggers = [t for t, _ in last.drops]
        for n, s in zip(points, schedules):
            if (s.drops != last.drops[:bisect_left(triggers, n)]
                    or s.repositions != last.repositions[:bisect_left(last.repositions, n)]):
                return None
        return self.engine.renderer.compile_session(self.rendered(task), last)

    def _output_ids(self, task: Task, n: int) -> list[int]:
        """The tokens generated for request ``n`` of ``task``: its recorded assistant turn, if any."""
        outputs = self._outputs.setdefault(task.id, {})
        if n not in outputs:
            msgs = task.messages
            outputs[n] = (self.engine.renderer.output_ids(msgs[n], n)
                          if n < len(msgs) and msgs[n]["role"] == "assistant" else [])
        return outputs[n]

    def _probe(self, task: Task, index: int, decision: Decision | None, spec: PolicySpec) -> ProbeResult:
        ask = self.ask_probe(task, index, decision, spec)
        scored = self.score_probe(ask.context, list(ask.prompt.continuations), ask.schedule, ask.prompt.prefix)
        return self.answer_probe(task, ask, scored)

    def ask_probe(self, task: Task, index: int, decision: Decision | None, spec: PolicySpec) -> ProbeAsk:
        """What probe ``index`` asks the engine under ``decision``."""
        prompt = probe_prompt(task, task.probes[index], self.config.probe)
        context, schedule, dropped = probe_state(task, index, decision, spec.name == DIAGNOSTIC)
        return ProbeAsk(index, prompt, context + [dict(m) for m in prompt.question_turn], schedule, dropped)

    def answer_options(self, ask: ProbeAsk) -> ChatOptions:
        """The chat options of ``ask``'s greedy answer (its lead-in, the probe format's length, one line)."""
        return {"max_tokens": self.config.probe.max_tokens, "prefix": ask.prompt.prefix, "stop": ["\n"]}

    def generate_answers(self, task: Task, asks: Sequence[tuple[str, ProbeAsk]]) -> list[ChatResult | AKVError]:
        """The greedy answers of ``asks`` ((policy label, ask) pairs on ``task``), in order; a
        request the engine refuses is its error in its place. Batched in shared decode steps when
        the engine can (:attr:`generation`), else generated one by one, as :meth:`answer_probe`
        would; counted, and with ``generation.check`` compared alone, in :attr:`generation_tally`.

        Raises:
            AKVError: only a transient one (a server down).
        """
        eng = self.engine
        out: list[ChatResult | AKVError | None] = [None] * len(asks)
        if not isinstance(eng, BatchGenerator) or self.generation.batch_size == 1 or len(asks) < 2:
            for i, (_, ask) in enumerate(asks):
                out[i] = _or_error(partial(eng.chat, ask.context, ask.schedule, **self.answer_options(ask)))
            self.generation_tally.alone += len(asks)
            return [r for r in out if r is not None]
        requests: dict[int, Request] = {}
        for i, (_, ask) in enumerate(asks):  # each refused on its own, as it would be alone
            built = _or_error(partial(eng.request, ask.context, ask.schedule, **self.answer_options(ask)))
            prepared = built if isinstance(built, AKVError) else _or_error(partial(eng.prepare_request, built))
            if isinstance(prepared, AKVError):
                out[i] = prepared
            else:
                requests[i] = prepared
        for i, result in zip(requests, eng.generate_many(list(requests.values()), self.generation.batch_size)):
            out[i] = result
            label, ask = asks[i]
            if self.generation.check:
                self.generation_tally.compare(f"{task.id}/{label}/probe {ask.index}", task.probes[ask.index].answer,
                                              result, eng.chat(ask.context, ask.schedule, **self.answer_options(ask)))
        self.generation_tally.batched += len(requests)
        return [r for r in out if r is not None]

    def answer_probe(self, task: Task, ask: ProbeAsk, scored: ScoreResult | None,
                     generated: ChatResult | None = None) -> ProbeResult:
        """The probe's result from its candidates' scores (and, with ``generate``, a greedy answer:
        ``generated`` where the caller generated it, :meth:`generate_answers`, else made now)."""
        probe = task.probes[ask.index]
        generated_text, exact, contains = "", False, False
        if self.config.generate:
            if generated is None:
                generated = self.engine.chat(ask.context, ask.schedule, **self.answer_options(ask))
                self.generation_tally.alone += 1
            generated_text = generated.text
            exact, contains = answer_matches(generated_text, probe.answer)
        choice = probe.candidates[scored.best] if scored is not None else ""
        mc = scored is not None and probe.candidates[scored.best] == probe.answer
        mc_norm = scored is not None and probe.candidates[scored.best_norm] == probe.answer
        passed = {"loglik": mc, "loglik-norm": mc_norm, "generate": exact}[self.config.scoring]
        return ProbeResult(ask.index, probe.kind, probe.after_message, probe.answer, generated_text, exact, contains,
                           choice, mc, mc_norm, tuple(sorted(ask.dropped & set(probe.evidence_ids))), passed)

    def score_probe(self, context: list[dict[str, Any]], continuations: list[str],
               schedule: Schedule | Mapping[str, Any] | None, prefix: str) -> ScoreResult | None:
        """Candidate log-likelihoods, or ``None`` when scoring is by generation and the probe has no
        candidates or the engine cannot score.

        Raises:
            TaskError: the probe has no candidates and scoring is by log-likelihood.
        """
        if not continuations:
            if self.config.scoring != "generate":
                raise TaskError("a probe without candidates cannot be scored by log-likelihood: give candidates, "
                                "or score by generation", field="candidates", value=[])
            return None
        try:
            return self.engine.score(context, continuations, schedule, prefix=prefix)
        except ScoringUnsupportedError:
            if self.config.scoring != "generate":
                raise
            return None


def _or_error(call: Callable[[], _T]) -> _T | AKVError:
    """``call()``, or the non-transient :class:`AKVError` it raised."""
    try:
        return call()
    except AKVError as err:
        if err.transient:
            raise
        return err


def request_cuts(task: Task) -> list[int]:
    """Where a policy decides on ``task``: every request point of the trajectory and every probe."""
    points = request_points(list(task.messages))
    return sorted(set(points) | {p.after_message + 1 for p in task.probes})


def probe_dropped(task: Task, index: int, decision: Decision | None, diagnostic: bool = False) -> set[int]:
    """The ids of messages whose content is gone when probe ``index`` is asked: what
    :func:`probe_state` gives third, without building the context."""
    probe = task.probes[index]
    return set(probe.evidence_ids) if diagnostic else _dropped_ids(decision, probe.after_message)


def probe_state(task: Task, index: int, decision: Decision | None, diagnostic: bool = False,
                ) -> tuple[list[dict[str, Any]], Schedule | Mapping[str, Any] | None, set[int]]:
    """What probe ``index`` of ``task`` is asked under: (context messages, cache schedule or None,
    ids of messages whose content is gone by then), given the policy's ``decision`` at the probe
    (``diagnostic``: the ``drop_evidence`` control, exactly the probe's evidence dropped)."""
    probe = task.probes[index]
    if diagnostic:
        return task.context(probe), drop_evidence_schedule(task, probe), set(probe.evidence_ids)
    dropped = _dropped_ids(decision, probe.after_message)
    if decision is not None and decision.messages is not None:
        return [dict(m) for m in decision.messages], None, dropped
    return task.context(probe), decision.schedule if decision is not None else None, dropped


def _diagnostic_decisions(task: Task, cuts: Sequence[int]) -> dict[int, Decision | None]:
    """The ``drop_evidence`` session: at request ``n`` (messages ``0..n-1``), the evidence of every
    probe asked before it (``after_message < n``) is dropped, triggered at the probe's
    ``after_message`` (each id once, at its first trigger). Probes without evidence drop nothing."""
    out: dict[int, Decision | None] = {}
    probes = sorted(task.probes, key=lambda p: p.after_message)
    for n in cuts:
        table: dict[str, list[int]] = {}
        seen: set[int] = set()
        for p in probes:
            if p.after_message >= n:
                break
            ids = sorted(set(p.evidence_ids) - seen)
            seen.update(ids)
            if ids:
                table.setdefault(str(p.after_message), []).extend(ids)
        wire = {"drop_message": {k: sorted(v) for k, v in table.items()}}
        out[n] = Decision(PolicyKind.CACHE, n, schedule=parse_schedule(wire, n)) if table else None
    return out


def evaluate(
    engine: ChatEngine,
    specs: Sequence[PolicySpec],
    tasks: Iterable[Task],
    config: EvalConfig | None = None,
    on_result: Callable[[TaskResult], None] | None = None,
) -> list[TaskResult]:
    """Evaluate every policy on every task, task by task (policies share the task's KV):
    :func:`evaluate_with` on a :class:`Replay` of ``engine`` and ``config``."""
    return evaluate_with(Replay(engine, config), specs, tasks, on_result)


def evaluate_with(replay: Replay, specs: Sequence[PolicySpec], tasks: Iterable[Task],
                  on_result: Callable[[TaskResult], None] | None = None) -> list[TaskResult]:
    """Every policy of ``specs`` on every task, task by task, the task's policies in lockstep
    (:meth:`Replay.evaluate_policies`: the rows one policy after another gives, each probe's
    scorings and greedy answers batched across the policies when the engine can). ``on_result``
    is called with each row, in order, once its task is done."""
    results = []
    for task in tasks:
        for r in replay.evaluate_policies(specs, task):
            results.append(r)
            if on_result is not None:
                on_result(r)
    return results
