"""The turn-by-turn BFCL judge: a policy's schedule, the model's calls, BFCL's checker.

For a policy and a BFCL task (:mod:`evals.bfcl.data`), turn ``k`` is judged on its own:

1. the context is the gold history up to turn ``k``'s question (earlier turns' gold calls and their
   outputs, rendered as the model's template renders tool calls and results), under the policy's
   decision at that request (its cumulative schedule; a text policy's rewritten history);
2. a responder (:mod:`evals.bfcl.responders`: the engine, or the gold calls) writes a reply; its calls are
   parsed (:func:`evals.bfcl.calls.parse_reply`) and run on a copy of the backends in the state
   the gold history left, their outputs appended as tool messages, and the model asked again, until
   a reply holds no call or ``max_steps`` replies were made (the schedule stays the turn's: later
   messages are kept);
3. BFCL's own sub-checkers decide: ``state_checker`` (every instance's public state equals the
   state after the gold calls) and ``response_checker`` (every gold output occurs among the
   outputs so far: the gold outputs of earlier turns, which the history holds, and the model's);
   a turn whose gold is empty passes when the model makes no call (BFCL's irrelevance check).

A reply piece that is no acceptable call is recorded with its reason and not run. An engine error
that is not transient makes the task's result ``ok=False`` with that reason, never a score.

A (policy, task) judgement is a generator (:func:`_turns`) that yields each reply it needs
(a :class:`~evals.bfcl.responders.ReplyAsk`) and receives its text, so that the driver decides
how replies are written: :func:`judge_task` asks a responder one reply at a time; :func:`judge`, with the engine's
responder on an engine that decodes in shared steps (``engine.interface.BatchGenerator``), keeps up
to ``batch_size`` jobs in flight and decodes all their pending replies together in each round
(``Engine.generate_many``), which on CPU makes several replies in about the time of one.

Not for: the options and result types (:mod:`evals.bfcl.judgement`), summarizing results
(:mod:`evals.bfcl.report`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

from engine.decode import GENERATE_BATCH
from engine.errors import AKVError
from engine.interface import BatchGenerator, ChatEngine
from evals.bfcl.backends import Backends
from evals.bfcl.calls import Call, parse_reply
from evals.bfcl.controls import TurnControl
from evals.bfcl.data import Entry, split_of
from evals.bfcl.evidence import evidence_turns
from evals.bfcl.judgement import JudgeConfig, TaskJudgement, TurnResult
from evals.bfcl.responders import EngineResponder, ReplyAsk, Responder
from evals.bfcl.store import ResultLog
from evals.cache.evaluator import CONTROLS, PolicySpec
from evals.errors import TaskError
from evals.tasks.schema import Task
from search_spaces import Episode, Policy, request_points


def _checkers() -> tuple[Any, Any]:
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import response_checker, state_checker

    return state_checker, response_checker


def check_turn(model: Backends, gold: Backends, outputs_so_far: Sequence[str], gold_outputs: Sequence[str],
               gold_empty: bool, model_calls: int, turn: int) -> tuple[bool, str]:
    """BFCL's verdict on one turn: ``(passed, reason)`` (see the module docstring)."""
    if gold_empty:
        return (model_calls == 0, "" if model_calls == 0 else "multi_turn:irrelevance_error: calls where the gold "
                "has none")
    if model_calls == 0:
        return False, f"multi_turn:empty_turn_model_response: no call in turn {turn}"
    state_checker, response_checker = _checkers()
    for verdict in (state_checker(model.instances, gold.instances),
                    response_checker(list(outputs_so_far), list(gold_outputs), turn)):
        if not verdict["valid"]:
            return False, f"{verdict['error_type']}: {verdict['error_message']}"[:300]
    return True, ""


def tools_into_text(engine: Any, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as the engine's template takes them: a template that does not render tool specs
    (``gemma``, ``plain``; or an engine without a renderer) gets them listed in the system text, in
    BFCL's words; one that does (``chatml``) keeps them on message 0, the request's tools."""
    renderer = getattr(engine, "renderer", None)
    if (renderer is not None and renderer.template.renders_tools) or "tools" not in messages[0]:
        return messages
    first = dict(messages[0])
    tools = first.pop("tools")
    first["content"] += "\n\nHere is a list of functions in json format that you can invoke.\n" + json.dumps(tools)
    return [first, *messages[1:]]


Judged = Policy | TurnControl | None
"""What a job judges: a policy, a per-turn control (:mod:`evals.bfcl.controls`), or ``None`` (the full cache)."""

Turns = Generator[ReplyAsk, str, list[TurnResult]]
"""A (policy, task) judgement in progress (:func:`_turns`): yields each reply it needs, is sent its
text, and returns the task's turns."""


def _reply_alone(responder: Responder, ask: ReplyAsk) -> str | AKVError:
    """``responder``'s reply to ``ask``, or the non-transient :class:`AKVError` it raised (a
    transient one propagates)."""
    try:
        return responder.reply(ask.context, ask.schedule, ask.turn, ask.step)
    except AKVError as err:
        if err.transient:
            raise
        return err


class _Job:
    """One (policy, task) judgement: its :func:`_turns` generator, the reply it waits for
    (``pending``) and, once it ends, its ``result``; exactly one of the two is ``None``. Its
    ``seconds`` run from the job's start (this object's creation) to its end, replies of other jobs
    decoded beside its own included. A non-transient :class:`AKVError`, the engine's or the
    judgement's own, ends the job ``ok=False`` with its reason; a transient one propagates."""

    def __init__(self, engine: ChatEngine, task: Task, policy: Judged, label: str, config: JudgeConfig):
        self.t0 = time.perf_counter()
        self.task, self.label = task, label
        self.entry = Entry.of_task(task)
        self.pending: ReplyAsk | None = None
        self.result: TaskJudgement | None = None
        self._turns = _turns(engine, task, self.entry, policy, config)
        self._advance(None)

    def answer(self, reply: str | AKVError) -> None:
        """Give the pending reply its text (the job goes on to its next reply or ends), or the
        engine's error (the job ends ``ok=False``)."""
        assert self.pending is not None, f"{self.label} on {self.task.id} has ended; it takes no reply"
        if isinstance(reply, AKVError):
            self._turns.close()
            self._fail(reply)
        else:
            self._advance(reply)

    def _advance(self, text: str | None) -> None:
        try:
            self.pending = next(self._turns) if text is None else self._turns.send(text)
        except StopIteration as stop:
            self.pending = None
            self.result = TaskJudgement(self.task.id, self.entry.category, split_of(self.task.id), self.label, True,
                                        None, tuple(stop.value), time.perf_counter() - self.t0,
                                        self.task.meta["bfcl"]["split_rule"])
        except AKVError as err:
            if err.transient:
                raise
            self._fail(err)

    def _fail(self, err: AKVError) -> None:
        self.pending = None
        self.result = TaskJudgement(self.task.id, self.entry.category, split_of(self.task.id), self.label, False,
                                    f"{type(err).__name__}: {err}".splitlines()[0][:500], (),
                                    time.perf_counter() - self.t0)


def judge_task(engine: ChatEngine, responder: Responder, task: Task, policy: Judged,
               label: str, config: JudgeConfig | None = None) -> TaskJudgement:
    """Every turn of ``task`` under ``policy`` (``None``: the full cache; a :class:`TurnControl`: its
    drops at each turn, :mod:`evals.bfcl.controls`), ``responder`` writing one
    reply at a time; see the module docstring. Raises a transient :class:`AKVError` (a server down)."""
    job = _Job(engine, task, policy, label, config or JudgeConfig())
    while (ask := job.pending) is not None:
        job.answer(_reply_alone(responder, ask))
    assert job.result is not None
    return job.result


def _turns(engine: ChatEngine, task: Task, entry: Entry, policy: Judged, config: JudgeConfig) -> Turns:
    """The judgement of ``task`` under ``policy``, turn by turn (the module docstring's steps), as a
    generator: each reply is yielded as a :class:`ReplyAsk` and its text sent back."""
    msgs = tools_into_text(engine, [dict(m) for m in task.messages])
    declared = [t["function"]["name"] for t in task.tools]
    starts = task.meta["bfcl"]["turn_starts"]
    cuts = [s + len(turn) for s, turn in zip(starts, entry.turns)]
    decisions: dict[int, Any] = {}
    if isinstance(policy, TurnControl):
        decisions = policy.decisions(task)
    elif policy is not None:
        every = sorted(set(request_points(msgs)) | set(cuts))
        counts = engine.render(msgs).message_tokens
        decisions = dict(zip(every, policy.run_episodes([Episode.of(msgs, counts, every)])[0]))
    gold_calls = entry.gold_calls(declared)
    state = entry.backends(declared)
    outputs: list[str] = []  # every output the conversation holds so far (BFCL's "all turns" list)
    answered = None if config.turns == "all" else set(evidence_turns(task))
    out = []
    for k, (cut, calls) in enumerate(zip(cuts, gold_calls)):
        if answered is not None and k not in answered:  # not judged: the gold calls carry the state on
            gold = state.copy()
            state, outputs = gold, outputs + [e.output for e in gold.run(calls)]
            continue
        decision = decisions.get(cut)
        if decision is not None and decision.messages is not None:
            context, schedule = [dict(m) for m in decision.messages], None
        else:
            context = msgs[:cut]
            schedule = decision.schedule if decision is not None else None
        dropped = len({d.message for _, ds in schedule.drops for d in ds if d.kind.value == "message"}) \
            if schedule is not None else 0
        model, made, refused = state.copy(), [], []
        model_outputs: list[str] = []
        steps = 0
        while steps < config.max_steps:
            text = yield ReplyAsk(context, schedule, k, steps)
            steps += 1
            parsed = parse_reply(text, declared)
            refused += [r.reason for r in parsed.refused]
            if not parsed.calls:
                break
            executed = model.run(parsed.calls)
            made += [e.call for e in executed]
            model_outputs += [e.output for e in executed]
            context = context + _step_messages(model, k, steps, parsed.calls, [e.output for e in executed])
        gold = state.copy()
        gold_outputs = [e.output for e in gold.run(calls)]
        passed, reason = check_turn(model, gold, outputs + model_outputs, gold_outputs, not calls, len(made), k)
        out.append(TurnResult(k, passed, reason, tuple(made), tuple(refused), steps, dropped))
        state, outputs = gold, outputs + gold_outputs
    return out


def _step_messages(backends: Backends, turn: int, step: int, calls: Sequence[Call], outputs: Sequence[str],
                   ) -> list[dict[str, Any]]:
    """The model's calls of one step and their outputs, as messages. The model's own text is not
    kept: each call is written from its parsed values (positional arguments named by the method's
    signature; one that does not fit it keeps them under ``"args"``)."""
    ids = [f"model_{turn}_{step}_{i}" for i in range(len(calls))]
    named = [backends.named_arguments(c) for c in calls]
    return [{"role": "assistant", "content": "", "tool_calls": [
        {"id": i, "type": "function", "function": {"name": c.name, "arguments": json.dumps(
            a if a is not None else {"args": list(c.args), **c.kwargs}, default=repr)}}
        for i, c, a in zip(ids, calls, named)]},
        *({"role": "tool", "name": c.name, "tool_call_id": i, "content": o} for i, c, o in zip(ids, calls, outputs))]


def judge(engine: ChatEngine, tasks: Sequence[Task], specs: Sequence[PolicySpec], config: JudgeConfig | None = None,
          responder: Responder | None = None, on_result: Callable[[TaskJudgement], None] | None = None,
          log: ResultLog | None = None, batch_size: int = GENERATE_BATCH) -> list[TaskJudgement]:
    """Every policy of ``specs`` on every task; the responder defaults to the engine
    (:class:`EngineResponder`). The results are in task order, each task's policies in ``specs``
    order. With ``log``, each result is recorded there as it finishes, and one it already holds (a
    rerun of the same run) is taken from it, not judged again; ``on_result`` sees each result as it
    is taken from the log or finishes (with batching, in the order jobs end).

    With the engine's responder, an engine that decodes in shared steps
    (``engine.interface.BatchGenerator``) and ``batch_size`` above 1, up to ``batch_size`` (policy,
    task) jobs are judged at once, started in that order (:func:`_judge_batched`); otherwise one at a
    time (:func:`judge_task`). Batching changes how the replies are computed, not what is asked: a
    greedy reply is the same but where the batched step's float rounding flips a near-tied argmax
    (``Engine.generate_many``), so ``batch_size`` is not part of a run's identity (a batched rerun
    resumes a sequential run's ``log``). A result's ``seconds`` is the wall time from its job's start
    to its end, so a batched job's includes the other jobs' replies decoded beside its own.

    The controls ``drop_evidence`` and ``drop_other`` drop each turn's evidence, or as many other
    outputs, at that turn (:mod:`evals.bfcl.controls`).

    Raises:
        ValueError: ``batch_size`` below 1.
        TaskError: a task that is not a BFCL task, before any work.
        AKVError: a policy that cannot be built (before any work); a transient engine error.
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    alien = next((t.id for t in tasks if "bfcl" not in t.meta), None)
    if alien is not None:
        raise TaskError(f"task {alien} is not a BFCL task", field="suite", value=alien)
    config = config or JudgeConfig()
    policies = [(TurnControl(s.name) if s.name in CONTROLS else s.build(), s.display) for s in specs]
    responder = responder or EngineResponder(engine, config.max_tokens, config.tool_choice)
    results: list[TaskJudgement | None] = [None] * (len(tasks) * len(policies))
    work: list[tuple[int, Task, Judged, str]] = []  # (position in results, task, policy, label)
    for i, (task, (policy, label)) in enumerate((t, p) for t in tasks for p in policies):
        done = log.get(label, task.id) if log is not None else None
        if done is None:
            work.append((i, task, policy, label))
            continue
        results[i] = logged = TaskJudgement.from_row(done)
        if on_result is not None:
            on_result(logged)
    if isinstance(responder, EngineResponder) and isinstance(responder.engine, BatchGenerator) and batch_size > 1:
        finished = _judge_batched(engine, responder, responder.engine, work, config, batch_size)
    else:
        finished = ((i, judge_task(engine, responder, task, policy, label, config)) for i, task, policy, label in work)
    for i, r in finished:
        if log is not None:
            log.add(r.to_row())
        results[i] = r
        if on_result is not None:
            on_result(r)
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


def _judge_batched(engine: ChatEngine, responder: EngineResponder, batcher: BatchGenerator,
                   work: Sequence[tuple[int, Task, Judged, str]], config: JudgeConfig, batch_size: int,
                   ) -> Iterator[tuple[int, TaskJudgement]]:
    """Judge ``work`` ((position, task, policy, label) jobs), up to ``batch_size`` jobs in flight,
    started in order as others end; yields (position, judgement) as each job ends. Each round, every
    live job's pending reply is built and prepared on its own (``batcher.request``,
    ``prepare_request``: a request refused there ends only its job), then all are decoded together
    in one ``batcher.generate_many`` and each text sent to its job. Should ``generate_many`` itself
    raise a non-transient error, which no request's preparation foretold, that round's replies are
    made again one at a time (``responder.reply``), so that the error ends only the job it belongs to."""
    waiting = iter(work)
    live: list[tuple[int, _Job]] = []
    while True:
        while len(live) < batch_size and (nxt := next(waiting, None)) is not None:
            i, task, policy, label = nxt
            job = _Job(engine, task, policy, label, config)
            if job.result is not None:  # ended before its first reply (a policy that failed on the task)
                yield i, job.result
            else:
                live.append((i, job))
        if not live:
            return
        _answer_round(responder, batcher, [job for _, job in live], batch_size)
        for i, job in live:
            if job.result is not None:
                yield i, job.result
        live = [(i, job) for i, job in live if job.result is None]


def _answer_round(responder: EngineResponder, batcher: BatchGenerator, jobs: Sequence[_Job], batch_size: int) -> None:
    """Answer every job's pending reply (see :func:`_judge_batched`)."""
    ready = []
    for job in jobs:
        ask = job.pending
        assert ask is not None
        try:
            ready.append((job, batcher.prepare_request(batcher.request(ask.context, ask.schedule,
                                                                       **responder.options(ask.step)))))
        except AKVError as err:
            if err.transient:
                raise
            job.answer(err)
    try:
        replies = batcher.generate_many([request for _, request in ready], batch_size)
    except AKVError as err:
        if err.transient:
            raise
        for job, _ in ready:
            ask = job.pending
            assert ask is not None
            job.answer(_reply_alone(responder, ask))
        return
    for (job, _), reply in zip(ready, replies):
        job.answer(reply.text)
