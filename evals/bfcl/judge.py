"""The turn-by-turn BFCL judge: a policy's schedule, the model's calls, BFCL's checker.

For a policy and a BFCL task (:mod:`evals.bfcl.data`), turn ``k`` is judged on its own:

1. the context is the gold history up to turn ``k``'s question (earlier turns' gold calls and their
   outputs, rendered as the model's template renders tool calls and results), under the policy's
   decision at that request (its cumulative schedule; a text policy's rewritten history);
2. a :class:`Responder` (the engine, or :class:`GoldResponder`) writes a reply; its calls are
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

Not for: summarizing results (:mod:`evals.bfcl.report`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from engine.errors import AKVError
from engine.interface import ChatEngine
from engine.template import render_tool_calls
from evals.bfcl.backends import Backends
from evals.bfcl.calls import Call, parse_reply
from evals.bfcl.controls import TurnControl
from evals.bfcl.data import Entry, split_of
from evals.bfcl.store import ResultLog
from evals.cache.evaluator import CONTROLS, PolicySpec
from evals.errors import TaskError
from evals.tasks.schema import Task
from search_spaces import Episode, Policy, request_points


class Responder(Protocol):
    """Writes the assistant's reply to ``context`` under ``schedule`` (the wire format, or ``None``);
    ``turn`` and ``step`` say where in the task it is. Raises ``AKVError`` when it cannot."""

    def reply(self, context: list[dict[str, Any]], schedule: Any, turn: int, step: int) -> str: ...


@dataclass
class EngineResponder:
    """The engine's greedy reply. ``tool_choice``: ``auto`` (OpenAI's: the model may end its turn in
    prose at any reply) or ``required`` (a turn's first reply is a call of a declared tool, decoded
    under the tools' grammar; later replies ``auto``, so the turn can end)."""

    engine: ChatEngine
    max_tokens: int = 256
    tool_choice: str = "auto"

    def reply(self, context: list[dict[str, Any]], schedule: Any, turn: int, step: int) -> str:
        choice = "required" if self.tool_choice == "required" and step == 0 else "auto"
        return self.engine.chat(context, schedule, max_tokens=self.max_tokens, temperature=0.0,
                                tool_choice=choice).text


@dataclass
class GoldResponder:
    """Replies with the gold calls of each turn (as ``<tool_call>`` blocks), then with no call: a
    check of the judge itself, which must pass every turn."""

    task: Task

    def reply(self, context: list[dict[str, Any]], schedule: Any, turn: int, step: int) -> str:
        if step > 0:
            return "Done."
        calls = [c for m in self._assistant_of(turn) for c in m.get("tool_calls") or ()]
        return render_tool_calls(calls, leading_newline=False, style="qwen") if calls else "Done."

    def _assistant_of(self, turn: int) -> list[Mapping[str, Any]]:
        starts = [*self.task.meta["bfcl"]["turn_starts"], len(self.task.messages)]
        return [m for m in self.task.messages[starts[turn]:starts[turn + 1]] if m["role"] == "assistant"]


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
    """A policy on a BFCL task. ``ok=False``: the run failed (``error``), and it has no score."""

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


@dataclass(frozen=True)
class JudgeConfig:
    """``max_steps``: replies per turn (BFCL allows 20); ``max_tokens``: tokens per reply."""

    max_steps: int = 5
    max_tokens: int = 256
    tool_choice: str = "auto"

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.max_tokens < 1:
            raise ValueError(f"max_steps and max_tokens must be >= 1, got {self.max_steps}, {self.max_tokens}")
        if self.tool_choice not in ("auto", "required"):
            raise ValueError(f"tool_choice must be 'auto' or 'required', got {self.tool_choice!r}")


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


def judge_task(engine: ChatEngine, responder: Responder, task: Task, policy: Policy | TurnControl | None,
               label: str, config: JudgeConfig = JudgeConfig()) -> TaskJudgement:
    """Every turn of ``task`` under ``policy`` (``None``: the full cache; a :class:`TurnControl`: its
    drops at each turn, :mod:`evals.bfcl.controls`); see the module docstring."""
    t0 = time.perf_counter()
    entry = Entry.of_task(task)
    try:
        turns = _judge(engine, responder, task, entry, policy, config)
    except AKVError as err:
        if err.transient:
            raise
        return TaskJudgement(task.id, entry.category, split_of(task.id), label, False,
                             f"{type(err).__name__}: {err}".splitlines()[0][:500], (), time.perf_counter() - t0)
    return TaskJudgement(task.id, entry.category, split_of(task.id), label, True, None, tuple(turns),
                         time.perf_counter() - t0, task.meta["bfcl"]["split_rule"])


def _judge(engine: ChatEngine, responder: Responder, task: Task, entry: Entry, policy: Policy | TurnControl | None,
           config: JudgeConfig) -> list[TurnResult]:
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
    out = []
    for k, (cut, calls) in enumerate(zip(cuts, gold_calls)):
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
            text = responder.reply(context, schedule, k, steps)
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


def judge(engine: ChatEngine, tasks: Sequence[Task], specs: Sequence[PolicySpec], config: JudgeConfig = JudgeConfig(),
          responder: Responder | None = None, on_result: Callable[[TaskJudgement], None] | None = None,
          log: ResultLog | None = None) -> list[TaskJudgement]:
    """Every policy of ``specs`` on every task, task by task; the responder defaults to the engine
    (:class:`EngineResponder`). With ``log``, each result is recorded there as it finishes, and one
    it already holds (a rerun of the same run) is taken from it, not judged again.

    The controls ``drop_evidence`` and ``drop_other`` drop each turn's evidence, or as many other
    outputs, at that turn (:mod:`evals.bfcl.controls`).

    Raises:
        TaskError: a task that is not a BFCL task.
        AKVError: a policy that cannot be built (before any work).
    """
    policies = [(TurnControl(s.name) if s.name in CONTROLS else s.build(), s.display) for s in specs]
    responder = responder or EngineResponder(engine, config.max_tokens, config.tool_choice)
    results = []
    for task in tasks:
        if "bfcl" not in task.meta:
            raise TaskError(f"task {task.id} is not a BFCL task", field="suite", value=task.id)
        for policy, label in policies:
            done = log.get(label, task.id) if log is not None else None
            if done is not None:
                r = TaskJudgement.from_row(done)
            else:
                r = judge_task(engine, responder, task, policy, label, config)
                if log is not None:
                    log.add(r.to_row())
            results.append(r)
            if on_result is not None:
                on_result(r)
    return results
