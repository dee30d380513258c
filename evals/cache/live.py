"""Live-agent evaluation: the model drives the tools, the policy shapes its cache, the answer is scored.

Where the replay evaluator (:mod:`evals.cache.evaluator`) walks a recorded trajectory, a live episode lets
the model act. For one (policy, task, probe) the agent gets a system prompt listing four tools and
the probe's question; each turn it asks the endpoint for the assistant's next message with the
policy's cumulative schedule (``drop_message`` / ``reposition``) attached, runs the
``<tool_call>`` blocks the model wrote, and stops at ``submit_answer``, at a reply without a tool
call (the reply is the answer), or after ``max_steps`` turns. The answer is scored against the
probe's gold answer (normalised exact match, contains-match reported separately) and every
request's usage is priced with :mod:`evals.cache.cost`.

The tools run here, in this process, over a corpus made from the task: every tool response the
trajectory had seen by the probe becomes a document (``doc-<message id>``).

- ``search(query)``: the best three documents by idf-weighted word overlap, with a snippet each;
- ``read(doc_id)``: a document's text (at most ``read_chars`` characters);
- ``calculator(expression)``: integer and decimal arithmetic (no names, bounded powers);
- ``submit_answer(answer)``: declared with a side effect; it runs at most once per episode.

Episodes are durable (:class:`engine.durable.DurableSession`): every step is checkpointed under the
run directory, and a rerun replays finished steps from the record (no request is sent again, no
side-effecting tool runs twice) and continues live from the first unfinished one.

The endpoint is any server that speaks the wire format (:class:`engine.remote.RemoteEngine`:
``akv serve``, or an AKV/SGLang server); a model as small as the default gemma-3-270m rarely
follows the tool protocol, so on it this measures the harness and the cost, not the agent.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import operator
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from engine.durable import CheckpointStore, DurableSession, StepKind, Tool, ToolBox
from engine.template import attach_tools
from engine.toolcalls import message_tools, parse_tool_calls, tool_names
from evals.cache.cost import task_cost
from evals.cache.scoring import contains_match, exact_match
from evals.errors import AKVError, TaskError
from evals.rates import load_rates
from evals.tasks.paged import PAGES_SYSTEM
from evals.tasks.schema import Task

SYSTEM = """You are a research agent. Answer the user's question from the documents, using these tools:
- search(query): find documents; returns ids and snippets.
- read(doc_id): the full text of a document.
- calculator(expression): arithmetic, e.g. "(120 - 45) * 3".
- submit_answer(answer): your final answer, as short as possible (a name, a number, a status).

Call one tool per message by writing one line:
<tool_call>{"name": "search", "arguments": {"query": "order 4821 warehouse"}}</tool_call>
The result comes back in the next message. When you know the answer, call submit_answer."""

TOOL_SPECS: tuple[dict[str, Any], ...] = tuple(
    {"type": "function", "function": {"name": n, "description": d, "parameters": {
        "type": "object", "properties": {a: {"type": "string"}}, "required": [a]}}}
    for n, d, a in (("search", "Find documents; returns ids and snippets.", "query"),
                    ("read", "The full text of a document.", "doc_id"),
                    ("calculator", "Evaluate an arithmetic expression.", "expression"),
                    ("submit_answer", "Submit the final answer (once).", "answer")))

PAGE_TOOL_SPECS: tuple[dict[str, Any], ...] = (
    {"type": "function", "function": {"name": "read_page", "description": "One page of the report and the next cursor.",
                                      "parameters": {"type": "object", "properties": {"cursor": {"type": "integer"}},
                                                     "required": ["cursor"]}}},
    *(s for s in TOOL_SPECS if s["function"]["name"] == "submit_answer"),
)


class Pages:
    """The paged-report tool (``meta.live = "pages"``, :mod:`evals.tasks.paged`): the task's tool
    responses are the pages, read in any order, each at most once."""

    def __init__(self, task: Task):
        self.pages = [str(m.get("content") or "") for m in task.messages if m.get("role") == "tool"]
        if not self.pages:
            raise TaskError(f"task {task.id!r} has no pages (tool messages)", field="task", value=task.id)
        self.read: set[int] = set()

    def read_page(self, args: Mapping[str, Any]) -> str:
        raw = args.get("cursor")
        try:
            cursor = int(str(raw).strip())
        except ValueError:
            return f"error: cursor must be an integer from 0 to {len(self.pages) - 1}, got {raw!r}"
        if not 0 <= cursor < len(self.pages):
            return f"error: no page at cursor {cursor}; cursors run from 0 to {len(self.pages) - 1}"
        if cursor in self.read:
            unread = [c for c in range(len(self.pages)) if c not in self.read]
            hint = f"the next unread cursor is {unread[0]}" if unread else "every page is read: submit your answer"
            return f"error: page {cursor} was already read (its text is earlier in this conversation); {hint}"
        self.read.add(cursor)
        return self.pages[cursor]


_WORD = re.compile(r"[a-z0-9]+(?:[-.#][a-z0-9]+)*")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class Corpus:
    """The documents an episode's tools search: ``doc id -> (title, text)``."""

    docs: Mapping[str, tuple[str, str]]

    @classmethod
    def from_task(cls, task: Task, upto: int | None = None) -> Corpus:
        """Every tool response of ``task`` up to message ``upto`` (inclusive), titled by its call."""
        docs: dict[str, tuple[str, str]] = {}
        calls: dict[str, str] = {}
        last = len(task.messages) - 1 if upto is None else upto
        for i, m in enumerate(task.messages[:last + 1]):
            for c in _tool_calls(m):
                fn = c.get("function") or {}
                calls[str(c.get("id"))] = f"{fn.get('name', 'tool')} {fn.get('arguments', '')}"[:120]
            if m.get("role") == "tool":
                title = calls.get(str(m.get("tool_call_id")), str(m.get("name") or "tool output"))
                docs[f"doc-{i}"] = (title, str(m.get("content") or ""))
        if not docs:
            raise TaskError(f"task {task.id!r} has no tool responses up to message {last}: nothing to search",
                            field="task", value=task.id)
        return cls(docs)

    @cached_property
    def _index(self) -> tuple[Counter[str], dict[str, frozenset[str]]]:
        """Document frequency of every word (in texts), and each document's words (title and text)."""
        df = Counter(w for _, text in self.docs.values() for w in set(_words(text)))
        return df, {d: frozenset(_words(title + " " + text)) for d, (title, text) in self.docs.items()}

    def search(self, query: str, k: int = 3, snippet: int = 160) -> str:
        terms = set(_words(query))
        if not terms:
            return "error: empty query"
        df, doc_words = self._index
        n = len(self.docs)
        scored = []
        for doc_id, words in doc_words.items():
            score = sum(math.log(1 + n / df[w]) for w in terms & words if df[w])
            if score > 0:
                scored.append((-score, doc_id))
        if not scored:
            return f"no document matches {query!r}"
        lines = []
        for _, doc_id in sorted(scored)[:k]:
            title, text = self.docs[doc_id]
            lines.append(f"{doc_id} ({title}): {' '.join(text.split())[:snippet]}")
        return "\n".join(lines)

    def read(self, doc_id: str, limit: int) -> str:
        doc = self.docs.get(str(doc_id).strip())
        if doc is None:
            some = ", ".join(list(self.docs)[:4])
            return f"error: no document {doc_id!r}; ids look like {some}"
        return doc[1][:limit]


_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def calculate(expression: str) -> str:
    """``expression``'s value as text, or ``error: ...``: numbers, + - * / // % **, parentheses."""
    if not isinstance(expression, str) or len(expression) > 200:
        return "error: give an arithmetic expression of at most 200 characters"

    def ev(node: ast.AST) -> float | int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value  # type: ignore[return-value]
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](ev(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 1e6):
                raise ValueError("power too large")
            return _BINARY[type(node.op)](left, right)
        raise ValueError(f"unsupported syntax {type(node).__name__}")

    try:
        value = ev(ast.parse(expression.replace(",", ""), mode="eval"))
    except ZeroDivisionError:
        return "error: division by zero"
    except (SyntaxError, ValueError, TypeError, OverflowError, RecursionError) as err:
        return f"error: {err}"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    return str(value)


@dataclass(frozen=True)
class LiveConfig:
    """Knobs of an episode.

    Attributes:
        max_steps: assistant turns before the episode ends unanswered.
        max_tokens: tokens per assistant turn.
        read_chars: characters ``read`` returns.
        rates: price point for the cost (``evals/data/rates.yaml``).
        min_tokens: no reply ends before this many tokens (``engine.interface.ChatOptions``): with 1,
            a model cannot answer a turn with nothing.
        tool_choice: OpenAI's, sent each turn where the tools are declared to the endpoint (a
            template that renders them): ``required`` (every reply opens with a call; the answer comes
            by ``submit_answer``) or ``auto`` (the model may reply in text, which ends the episode).
    """

    max_steps: int = 8
    max_tokens: int = 96
    read_chars: int = 1500
    rates: str = "gpt-oss-120b"
    tool_choice: str = "required"
    min_tokens: int = 1

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_tokens", "read_chars"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise AKVError(f"LiveConfig.{name} must be a positive integer, got {getattr(self, name)!r}", field=name,
                               value=getattr(self, name))
        if not isinstance(self.min_tokens, int) or not 0 <= self.min_tokens <= self.max_tokens:
            raise AKVError(f"LiveConfig.min_tokens must be an integer from 0 to max_tokens, got {self.min_tokens!r}",
                           field="min_tokens", value=self.min_tokens)
        if self.tool_choice not in ("required", "auto"):
            raise AKVError(f"LiveConfig.tool_choice must be 'required' or 'auto', got {self.tool_choice!r}",
                           field="tool_choice", value=self.tool_choice)
        load_rates(self.rates)  # an unknown price point is refused before any episode runs, not after


@dataclass
class LiveResult:
    """One episode's outcome (``to_row`` is its JSON form)."""

    task_id: str
    family: str
    probe: int
    policy: str
    question: str
    gold: str
    answer: str | None
    exact: bool
    contains: bool
    submitted: bool
    steps: int
    tool_calls: list[str] = field(default_factory=list)
    invalid_calls: int = 0
    usage: dict[str, int] = field(default_factory=dict)
    cost_cents: float = 0.0
    replayed_steps: int = 0
    seconds: float = 0.0
    error: str | None = None

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


def _tool_calls(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    calls = message.get("tool_calls") or []
    return [c for c in calls if isinstance(c, Mapping)] if isinstance(calls, list) else []


def with_tool_specs(engine: Any, messages: list[dict[str, Any]], specs: Sequence[Mapping[str, Any]]) -> list[Any]:
    """``messages`` with the tools declared on message 0 where the engine's template renders tool
    specs (``chatml``: the request's ``tools``); as they are otherwise (the system prompt lists them)."""
    renderer = getattr(engine, "renderer", None)
    if renderer is not None and renderer.template.renders_tools:
        return attach_tools(messages, specs)
    return messages


def session_name(policy: str, task: Task | str, probe: int) -> str:
    """The checkpoint name of the episode of ``policy`` on ``task`` (or its id) at ``probe``."""
    task_id = task if isinstance(task, str) else task.id
    digest = hashlib.sha256(f"{policy}|{task_id}|{probe}".encode()).hexdigest()[:10]
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{policy}-{task_id}")[-80:].strip("-.")
    return f"{slug}-p{probe}-{digest}"


def run_episode(engine: Any, policy: Any, policy_label: str, task: Task, probe: int, store: CheckpointStore,
                config: LiveConfig = LiveConfig()) -> LiveResult:
    """Play (or resume) one episode; see the module docstring.

    Args:
        engine: anything with ``chat(messages, schedule, **sampling)`` like ``Engine.chat``
            (:class:`engine.remote.RemoteEngine` for an endpoint).
        policy: a :class:`search_spaces.Policy` whose ``decide(messages)`` gives the schedule, or
            ``None`` for the full cache.
        policy_label: the name results and checkpoints are filed under.
        task, probe: the task and the index of the probe whose question is asked.
        store: where the episode's checkpoints live (resume by calling again with the same store).
    """
    if not 0 <= probe < len(task.probes):
        raise TaskError(f"probe: task {task.id!r} has {len(task.probes)} probes, got index {probe}",
                        field="probe", value=probe)
    p = task.probes[probe]
    paged = task.meta.get("live") == "pages"
    pages = Pages(task) if paged else None
    specs = PAGE_TOOL_SPECS if paged else TOOL_SPECS
    if pages is not None:
        system = next((str(m["content"]) for m in task.messages if m.get("role") == "system"), PAGES_SYSTEM)
        own = [Tool("read_page", pages.read_page)]
    else:
        system = SYSTEM
        corpus = Corpus.from_task(task, p.after_message)
        own = [Tool("search", lambda a: corpus.search(str(a.get("query", "")))),
               Tool("read", lambda a: corpus.read(str(a.get("doc_id", "")), config.read_chars)),
               Tool("calculator", lambda a: calculate(str(a.get("expression", ""))))]
    listed = ", ".join([*(t.name for t in own), "submit_answer"])
    tools = ToolBox([*own, Tool("submit_answer", lambda a: "answer recorded", side_effect=True),
                     Tool("invalid_call", lambda a: f"error: {a.get('problem')}; tools are {listed}")])
    name = session_name(policy_label, task, probe)
    t0 = time.perf_counter()
    if store.exists(name):
        session = DurableSession.open(store, name, engine, tools)
        if pages is not None:  # the pages read before the restart stay read
            for step in session.steps:
                if step.tool == "read_page" and step.result is not None and not str(step.result).startswith("error"):
                    pages.read_page(step.args or {})
    else:
        ask = next((str(m["content"]) for m in task.messages if m.get("role") == "user"), p.question) \
            if pages is not None else p.question  # a paged task may ask on its last page
        start = [{"role": "system", "content": system}, {"role": "user", "content": ask}]
        session = DurableSession.create(store, name, engine, tools, with_tool_specs(engine, start, specs))
    declared = bool(message_tools(session.messages))
    choice = {"tool_choice": config.tool_choice} if declared else {}
    replayed = len(session.steps)
    answer: str | None = None
    calls: list[str] = []
    invalid = steps = 0
    error = None
    try:
        while steps < config.max_steps and answer is None:
            steps += 1
            schedule = policy.decide(session.messages) if policy is not None else None
            text = session.llm(schedule=schedule, max_tokens=config.max_tokens, min_tokens=config.min_tokens,
                               temperature=0.0, **choice)
            reply = parse_tool_calls(text, tool_names(specs))
            if not reply.tool_calls and not reply.invalid:
                answer = reply.content or text.strip()
                break
            for raw in reply.invalid:
                invalid += 1
                session.tool("invalid_call", {"problem": f"not a JSON tool call: {raw[:80]}"})
            for call in reply.tool_calls:
                fn = call["function"]
                try:
                    args = json.loads(fn["arguments"])
                    if not isinstance(args, dict):
                        raise ValueError
                except ValueError:
                    invalid += 1
                    session.tool("invalid_call", {"problem": f"arguments of {fn['name']} must be a JSON object"})
                    continue
                if fn["name"] not in tools.names() or fn["name"] == "invalid_call":
                    invalid += 1
                    session.tool("invalid_call", {"problem": f"unknown tool {fn['name']!r}"})
                    continue
                calls.append(fn["name"])
                session.tool(fn["name"], args)
                if fn["name"] == "submit_answer":
                    answer = str(args.get("answer", ""))
                    break
    except AKVError as err:  # the endpoint failed or refused: record it, keep the checkpoints for a rerun
        error = f"{type(err).__name__}: {err}"
    usages = [r.usage for r in session.steps if r.kind is StepKind.LLM and r.usage]
    total = Counter[str]()
    for u in usages:
        total.update(u)
    cost = task_cost(usages, load_rates(config.rates))
    return LiveResult(
        task_id=task.id, family=task.family, probe=probe, policy=policy_label, question=p.question, gold=p.answer,
        answer=answer, exact=answer is not None and exact_match(answer, p.answer),
        contains=answer is not None and contains_match(answer, p.answer),
        submitted=any(r.tool == "submit_answer" for r in session.steps),
        steps=sum(r.kind is StepKind.LLM for r in session.steps), tool_calls=calls, invalid_calls=invalid,
        usage=dict(total), cost_cents=cost.cents, replayed_steps=replayed, seconds=time.perf_counter() - t0,
        error=error)


def run_live(engine: Any, policy: Any, policy_label: str, tasks: Sequence[Task], run_dir: str | Path,
             config: LiveConfig = LiveConfig(), probes_per_task: int = 1, progress: bool = True,
             on_result: Callable[[LiveResult], None] | None = None, concurrency: int = 1) -> list[LiveResult]:
    """Episodes of one policy for the first ``probes_per_task`` probes of every task, checkpointed
    under ``run_dir``, ``concurrency`` at a time; sorted by (task, probe). Several policies at once:
    :func:`evals.cache.live_runs.run_policies`, which this calls."""
    from evals.cache.live_runs import LivePolicy, run_policies

    runs = run_policies(engine, [LivePolicy(policy_label, policy, Path(run_dir))], tasks, config,
                        probes_per_task=probes_per_task, concurrency=concurrency, progress=progress,
                        on_result=on_result)
    return runs[policy_label]


def summary(results: Iterable[LiveResult]) -> dict[str, Any]:
    """Pass rate (exact and contains), mean cost, steps and tool use over ``results``."""
    from evals.cache.scoring import pass_rate

    rs = list(results)
    exact, contains = pass_rate(r.exact for r in rs), pass_rate(r.contains for r in rs)
    n = max(1, len(rs))
    return {"episodes": len(rs), "pass_rate": exact.rate, "pass_rate_ci95": [exact.interval.low, exact.interval.high],
            "contains_rate": contains.rate, "cost_cents_mean": sum(r.cost_cents for r in rs) / n,
            "steps_mean": sum(r.steps for r in rs) / n, "submitted": sum(r.submitted for r in rs),
            "tool_calls": dict(Counter(c for r in rs for c in r.tool_calls)),
            "invalid_calls": sum(r.invalid_calls for r in rs), "errors": sum(r.error is not None for r in rs)}
