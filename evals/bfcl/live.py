"""BFCL multi-turn live, as BFCL runs it: the model acts on the task's backends with its own calls.

Where the replay judge (:mod:`evals.bfcl.judge`) gives the model the gold history before each turn,
a live episode lets the model's own calls carry the task, as BFCL's own harness does. For a policy
and a BFCL task (:mod:`evals.bfcl.data`), through an endpoint (:class:`engine.remote.RemoteEngine`,
``akv serve``):

1. the conversation opens with BFCL's system setup (the function docs as the request's tools where
   the template renders them, else in the system text: :func:`evals.bfcl.judge.tools_into_text`)
   and the first turn's question;
2. each request carries the policy's schedule for the conversation so far (``policy.decide``, as
   ``akv live``: :class:`evals.cache.served.CountedPolicy` with the served model's token counts);
   ``tool_choice`` is ``required`` on a turn's first reply and ``auto`` after it (or ``auto``
   throughout, as the replay judge asks); the reply's calls are parsed
   (:func:`evals.bfcl.calls.parse_reply`, never evaluated), run on the task's own backend instances
   in the state the model's earlier calls left, and their outputs appended as tool messages; a reply
   with no acceptable call ends the turn, as does the ``max_steps``-th reply;
3. after each turn BFCL's checker judges it (:func:`evals.bfcl.judge.check_turn`): the model's
   backends against the gold calls' (run cumulatively from the initial state), and this turn's gold
   outputs among every output the model's calls have given so far; then the next question.

A refused piece of a reply (an undeclared name, an attribute, a call in an argument, ``__import__``
...) is an invalid call with its one-line reason: never run, and no message to the model (as the
replay judge). Per episode: every turn's verdict, the task's (every turn passes), the calls, the
invalid calls, the cost of every request's usage (:mod:`evals.cache.cost`).

Durable: each episode is a :class:`engine.durable.DurableSession` under ``RUN_DIR/sessions`` (a rerun
replays its finished replies from the record, sending nothing, and runs the recorded calls again on
fresh backends, which live in memory, checking each output against the record); each finished
episode is appended to ``RUN_DIR/episodes.jsonl`` (:class:`evals.bfcl.store.ResultLog`), and a rerun
takes it from there. :func:`evals.bfcl.export.export_episodes` writes the sessions as OpenAI logs and ATIF.

Not for: the gold-history judge (:mod:`evals.bfcl.judge`), nor the command line (:mod:`evals.bfcl.cli`).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from engine.durable import CheckpointStore, DurableSession, StepKind, Tool, ToolBox
from engine.toolcalls import message_tools
from evals.bfcl.backends import Backends
from evals.bfcl.calls import parse_reply
from evals.bfcl.data import Entry, split_of
from evals.bfcl.judge import check_turn, tools_into_text
from evals.bfcl.judgement import TaskJudgement, TurnResult
from evals.bfcl.store import ResultLog
from evals.cache.cost import task_cost
from evals.cache.live import session_name
from evals.errors import AKVError, TaskError
from evals.rates import load_rates
from evals.tasks.schema import Task

RESULTS_FILE = "episodes.jsonl"


@dataclass(frozen=True)
class BfclLiveConfig:
    """Knobs of a live BFCL episode.

    Attributes:
        max_steps: replies per turn (the replay judge's 5; BFCL's harness allows 20).
        max_tokens: tokens per reply.
        tool_choice: ``required``: a turn's first reply must open with a call, later ones may end the
            turn (``auto``); ``auto``: every reply may (the replay judge's). Sent only where the
            tools are declared to the endpoint (a template that renders them).
        min_tokens: no reply ends before this many tokens (``engine.interface.ChatOptions``).
        rates: price point for the cost (``evals/data/rates.yaml``).
    """

    max_steps: int = 5
    max_tokens: int = 256
    tool_choice: str = "required"
    min_tokens: int = 1
    rates: str = "gpt-oss-120b"

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise AKVError(f"BfclLiveConfig.{name} must be an integer >= 1, got {value!r}", field=name,
                               value=value)
        if not isinstance(self.min_tokens, int) or not 0 <= self.min_tokens <= self.max_tokens:
            raise AKVError(f"BfclLiveConfig.min_tokens must be an integer from 0 to max_tokens, got "
                           f"{self.min_tokens!r}", field="min_tokens", value=self.min_tokens)
        if self.tool_choice not in ("required", "auto"):
            raise AKVError(f"BfclLiveConfig.tool_choice must be 'required' or 'auto', got {self.tool_choice!r}",
                           field="tool_choice", value=self.tool_choice)
        load_rates(self.rates)  # an unknown price point is refused before any episode


@dataclass(frozen=True)
class LiveEpisode:
    """One live episode: BFCL's verdicts (``judgement``: ``ok=False`` when the run failed, unscored),
    the usage summed over its requests and its cost, and how many steps a resume replayed.
    ``transient``: it failed for the infrastructure's reason (a server down), so a rerun plays it again."""

    judgement: TaskJudgement
    usage: Mapping[str, int] = field(default_factory=dict)
    cost_cents: float = 0.0
    replayed_steps: int = 0
    transient: bool = False

    @property
    def calls(self) -> int:
        """Calls run on the backends (an output each)."""
        return sum(len(t.calls) for t in self.judgement.turns)

    @property
    def invalid_calls(self) -> int:
        """Reply pieces refused as calls (never run)."""
        return sum(len(t.refused) for t in self.judgement.turns)

    def to_row(self) -> dict[str, Any]:
        return {**self.judgement.to_row(), "usage": dict(self.usage), "cost_cents": self.cost_cents,
                "replayed_steps": self.replayed_steps, "calls": self.calls, "invalid_calls": self.invalid_calls}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> LiveEpisode:
        return cls(TaskJudgement.from_row(row), dict(row.get("usage") or {}), float(row.get("cost_cents", 0.0)),
                   int(row.get("replayed_steps", 0)))


def _dropped(schedule: Mapping[str, Any] | None) -> int:
    """Messages a wire schedule drops (``drop_message``: trigger -> message ids)."""
    table = (schedule or {}).get("drop_message") or {}
    return len({int(i) for ids in table.values() for i in ids})


class TurnPlay(NamedTuple):
    """What the model did in one turn: the calls run (rebuilt strings), the refused pieces' reasons,
    the replies made, and the messages the last request's schedule dropped."""

    calls: tuple[str, ...]
    refused: tuple[str, ...]
    steps: int
    dropped: int


class _Episode:
    """The driver of one episode over a durable session (see the module docstring)."""

    def __init__(self, session: DurableSession, backends: Backends, outputs: list[str], declared: Sequence[str],
                 config: BfclLiveConfig):
        self.session, self.backends, self.outputs = session, backends, outputs
        self.declared = declared
        self.config = config
        self.choice = bool(message_tools(session.messages))  # tool_choice goes where the tools are declared

    def turn(self, policy: Any) -> TurnPlay:
        """The model's replies of one turn, its calls run (their outputs appended to ``outputs``)."""
        made: list[str] = []
        refused: list[str] = []
        steps = dropped = 0
        while steps < self.config.max_steps:
            replaying = self.session.replaying
            schedule = policy.decide(self.session.messages) if policy is not None and not replaying else None
            choice = "required" if self.config.tool_choice == "required" and steps == 0 else "auto"
            text = self.session.llm(schedule=schedule, max_tokens=self.config.max_tokens,
                                    min_tokens=self.config.min_tokens, temperature=0.0,
                                    **({"tool_choice": choice} if self.choice else {}))
            dropped = _dropped(self.session.steps[self.session.cursor - 1].schedule)
            steps += 1
            parsed = parse_reply(text, self.declared)
            refused += [r.reason for r in parsed.refused]
            if not parsed.calls:
                break
            for call in parsed.calls:
                executed = self.backends.execute(call)  # replayed or not: the backends live in memory
                self.outputs.append(executed.output)
                named = self.backends.named_arguments(call)
                arguments = json.dumps(named if named is not None else {"args": list(call.args), **call.kwargs},
                                       default=repr)  # for the logs (evals.bfcl.export)
                seen = self.session.tool(call.name, {"call": executed.call, "arguments": arguments})
                if seen != executed.output:
                    raise TaskError(f"resuming {self.session.id}: {executed.call} now gives another output than "
                                    "the record (a backend that is not deterministic); start the episode over",
                                    field="session", value=self.session.id)
                made.append(executed.call)
        return TurnPlay(tuple(made), tuple(refused), steps, dropped)


def run_bfcl_episode(engine: Any, policy: Any, label: str, task: Task, store: CheckpointStore,
                     config: BfclLiveConfig = BfclLiveConfig()) -> LiveEpisode:
    """Play (or resume) ``task`` live under ``policy``; see the module docstring.

    Args:
        engine: anything with ``chat(messages, schedule, **sampling)`` like ``Engine.chat``
            (:class:`engine.remote.RemoteEngine` for an endpoint); its ``renderer``, when it has one,
            says whether the tools are declared to it.
        policy: anything whose ``decide(messages)`` gives a wire schedule, or ``None`` (the full cache).
        label: the name results and checkpoints are filed under.
        store: where the episode's checkpoints live (resume by calling again with the same store).

    Raises:
        TaskError: ``task`` is not a BFCL task, or a gold call is refused (the data is bad).
    """
    t0 = time.perf_counter()
    entry = Entry.of_task(task)
    declared = [t["function"]["name"] for t in task.tools]
    gold_calls = entry.gold_calls(declared)
    outputs: list[str] = []  # the output of the call being recorded is the last one
    tools = ToolBox(Tool(n, lambda _args: outputs[-1]) for n in declared)
    name = session_name(label, task, 0)
    if store.exists(name):
        session = DurableSession.open(store, name, engine, tools)
    else:
        start = [dict(task.messages[0]), *({"role": m["role"], "content": m["content"]} for m in entry.turns[0])]
        session = DurableSession.create(store, name, engine, tools, tools_into_text(engine, start))
    replayed = len(session.steps)
    episode = _Episode(session, entry.backends(declared), outputs, declared, config)
    gold_state = entry.backends(declared)
    turns: list[TurnResult] = []
    error, transient = None, False
    try:
        for k, (question, calls) in enumerate(zip(entry.turns, gold_calls)):
            for m in question if k else ():
                session.say({"role": m["role"], "content": m["content"]})
            play = episode.turn(policy)
            gold = gold_state.copy()
            gold_outputs = [e.output for e in gold.run(calls)]
            passed, reason = check_turn(episode.backends, gold, outputs, gold_outputs, not calls, len(play.calls), k)
            turns.append(TurnResult(k, passed, reason, play.calls, play.refused, play.steps, play.dropped))
            gold_state = gold
    except AKVError as err:  # the endpoint failed or refused, or the policy failed: no score
        error, transient = f"{type(err).__name__}: {err}".splitlines()[0][:500], err.transient
    usages = [r.usage for r in session.steps if r.kind is StepKind.LLM and r.usage]
    total = Counter[str]()
    for u in usages:
        total.update(u)
    judgement = TaskJudgement(task.id, entry.category, split_of(task.id), label, error is None, error,
                              tuple(turns) if error is None else (), time.perf_counter() - t0,
                              task.meta["bfcl"]["split_rule"])
    return LiveEpisode(judgement, dict(total), task_cost(usages, load_rates(config.rates)).cents, replayed, transient)


def run_bfcl_live(engine: Any, policies: Sequence[tuple[Any, str]], tasks: Sequence[Task], run_dir: str | Path,
                  config: BfclLiveConfig = BfclLiveConfig(), header: Mapping[str, Any] | None = None,
                  on_result: Callable[[LiveEpisode], None] | None = None) -> list[LiveEpisode]:
    """Every (policy, label) of ``policies`` on every task, task by task, durable under ``run_dir``.

    A finished episode is appended to ``run_dir/episodes.jsonl`` (with ``header`` and ``config`` as
    the run's identity) and a rerun takes it from there; one that failed transiently (a server
    down) is not, so a rerun plays it again from its checkpoints.

    Raises:
        TaskError: a task that is not a BFCL task (before any episode).
        AKVError: ``run_dir`` holds another run (:class:`evals.bfcl.store.ResultLog`).
    """
    for task in tasks:
        if "bfcl" not in task.meta:
            raise TaskError(f"task {task.id} is not a BFCL task", field="suite", value=task.id)
    run = Path(run_dir)
    store = CheckpointStore(run / "sessions")
    log = ResultLog(run / RESULTS_FILE, {**(header or {}), "config": asdict(config)})
    out = []
    for task in tasks:
        for policy, label in policies:
            done = log.get(label, task.id)
            episode = LiveEpisode.from_row(done) if done is not None else \
                run_bfcl_episode(engine, policy, label, task, store, config)
            if done is None and not episode.transient:
                log.add(episode.to_row())
            out.append(episode)
            if on_result is not None:
                on_result(episode)
    return out


def live_summary(episodes: Sequence[LiveEpisode], policies: Sequence[str]) -> list[dict[str, Any]]:
    """Per policy (in ``policies``' order): :func:`evals.bfcl.report.summarize`'s turn and task accuracy
    with 95% intervals (and retention against ``full`` where it ran), plus calls, invalid calls (with a
    few reasons), the mean cost per episode and the failed episodes."""
    from evals.bfcl.report import summarize

    rows = summarize([e.judgement for e in episodes], policies)
    for row in rows:
        mine = [e for e in episodes if e.judgement.policy == row["policy"]]
        row.update({"calls": sum(e.calls for e in mine), "invalid_calls": sum(e.invalid_calls for e in mine),
                    "invalid_reasons": sorted({r for e in mine for t in e.judgement.turns for r in t.refused})[:5],
                    "cost_cents_mean": sum(e.cost_cents for e in mine) / max(1, len(mine)),
                    "cost_cents": sum(e.cost_cents for e in mine)})
    return rows
