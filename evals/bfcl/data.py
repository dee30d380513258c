"""BFCL v4 multi-turn tasks (``base``, ``long_context``) as tasks of the project's schema.

The benchmark is the PyPI package ``bfcl-eval`` at :data:`BFCL_VERSION`, installed without its
dependencies by ``make bfcl`` (the multi-turn backends need only ``mpmath`` beside it). A BFCL
entry becomes a :class:`evals.tasks.Task` whose messages are what a model sees when every earlier
turn went as the gold answer says::

    0            system: BFCL's multi-turn instructions; tools: the involved classes' function docs
    turn k:      user: the turn's question
                 assistant: the turn's gold calls as tool_calls (no prose)   (absent when the gold is empty)
                 tool: each call's output, as BFCL's backends return it      (run here, evals.bfcl.backends)

``meta["bfcl"]`` keeps what the judge needs: the entry's id, category, ``initial_config``,
``involved_classes``, the gold calls per turn (BFCL's strings), and ``turn_starts`` (the message
index of each turn's question). The split is fixed by a hash of the task id (:func:`split_of`,
:data:`SPLIT_RULE`), recorded in every task's meta.

Not for: judging a model's answers (:mod:`evals.bfcl.judge`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata, resources
from typing import Any

from evals.bfcl.backends import Backends
from evals.bfcl.calls import Call, parse_python_calls
from evals.errors import TaskError
from evals.tasks.schema import Task

BFCL_VERSION = "2026.3.23"
INSTALL_COMMAND = "make bfcl"
SUITES: Mapping[str, str] = {"bfcl-base": "multi_turn_base", "bfcl-long": "multi_turn_long_context"}
"""Suite name -> BFCL category."""
HELDOUT_PERCENT = 30
SPLIT_RULE = f"heldout when int(sha256(task id)[:8], 16) % 100 < {HELDOUT_PERCENT}, else train"
GENERATOR = "bfcl-eval"


def split_of(task_id: str) -> str:
    """``train`` or ``heldout`` for a BFCL task id (:data:`SPLIT_RULE`)."""
    return "heldout" if int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) % 100 < HELDOUT_PERCENT else "train"


def require_bfcl() -> None:
    """Raise :class:`TaskError` (one line naming the command) unless ``bfcl-eval`` is installed at
    :data:`BFCL_VERSION` with what its multi-turn backends import."""
    try:
        have = metadata.version("bfcl-eval")
    except metadata.PackageNotFoundError:
        raise TaskError(f"the BFCL suites need bfcl-eval=={BFCL_VERSION}: run `{INSTALL_COMMAND}`",
                        field="suite", value="bfcl") from None
    if have != BFCL_VERSION:
        raise TaskError(f"the BFCL suites need bfcl-eval=={BFCL_VERSION}, this environment has {have}: run "
                        f"`{INSTALL_COMMAND}`", field="suite", value=have)
    try:
        import bfcl_eval.eval_checker.multi_turn_eval.func_source_code.math_api  # noqa: F401 (needs mpmath)
    except ImportError as err:
        raise TaskError(f"bfcl-eval's multi-turn backends cannot import {err.name!r}: run `{INSTALL_COMMAND}`",
                        field="suite", value=err.name) from None


def _read_lines(path: str) -> list[dict[str, Any]]:
    text = resources.files("bfcl_eval").joinpath("data", path).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _openai_types(schema: Any) -> Any:
    """A BFCL parameter schema with its Gorilla type names as OpenAPI's (``dict`` -> ``object``, ...)."""
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI

    if isinstance(schema, list):
        return [_openai_types(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _openai_types(v) for k, v in schema.items()}
    if isinstance(schema.get("type"), str):
        out["type"] = GORILLA_TO_OPENAPI.get(schema["type"], "string")
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: _openai_types(v) for k, v in schema["properties"].items()}
    return out


def tool_specs(involved_classes: Sequence[str], excluded: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The function docs of ``involved_classes`` (BFCL's ``multi_turn_func_doc``), less ``excluded``,
    as OpenAI tools."""
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    specs = []
    for name in involved_classes:
        for doc in _read_lines(f"multi_turn_func_doc/{MULTI_TURN_FUNC_DOC_FILE_MAPPING[name]}"):
            if doc["name"] not in excluded:
                specs.append({"type": "function", "function": {
                    "name": doc["name"], "description": doc.get("description", ""),
                    "parameters": _openai_types(doc.get("parameters", {"type": "object", "properties": {}}))}})
    return specs


def system_prompt() -> str:
    """BFCL's own words for the multi-turn protocol (its ``classic`` prompt style)."""
    from bfcl_eval.constants.default_prompts import PROMPT_STYLE_TEMPLATES

    style = PROMPT_STYLE_TEMPLATES["classic"]
    return f"{style['persona']} {style['multiturn_behavior']}"


@dataclass(frozen=True)
class Entry:
    """One BFCL multi-turn entry: its questions per turn, backends' state and gold calls per turn."""

    id: str
    category: str
    turns: tuple[tuple[Mapping[str, Any], ...], ...]
    initial_config: Mapping[str, Any]
    involved_classes: tuple[str, ...]
    excluded: tuple[str, ...]
    gold: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        if len(self.turns) != len(self.gold):
            raise TaskError(f"BFCL entry {self.id}: {len(self.turns)} turns but {len(self.gold)} gold turns",
                            field="ground_truth", value=self.id)

    @property
    def long_context(self) -> bool:
        return "long_context" in self.category

    def backends(self, declared: Sequence[str]) -> Backends:
        """Fresh backends in the entry's initial state, running only ``declared`` functions."""
        return Backends(self.involved_classes, self.initial_config, long_context=self.long_context, declared=declared)

    def gold_calls(self, declared: Sequence[str]) -> tuple[tuple[Call, ...], ...]:
        """The gold calls parsed like a model's (they are data too); raises :class:`TaskError` for one
        that is not a declared function with literal arguments."""
        out = []
        for k, turn in enumerate(self.gold):
            parsed = parse_python_calls("[" + ", ".join(turn) + "]", declared) if turn else None
            if parsed is not None and (parsed.refused or len(parsed.calls) != len(turn)):
                reason = parsed.refused[0].reason if parsed.refused else "not a list of calls"
                raise TaskError(f"BFCL entry {self.id}, turn {k}: a gold call is refused: {reason}",
                                field="ground_truth", value=list(turn))
            out.append(parsed.calls if parsed is not None else ())
        return tuple(out)

    def to_meta(self) -> dict[str, Any]:
        return {"id": self.id, "category": self.category, "initial_config": self.initial_config,
                "involved_classes": list(self.involved_classes), "excluded_function": list(self.excluded),
                "gold": [list(t) for t in self.gold], "version": BFCL_VERSION, "split_rule": SPLIT_RULE}

    @classmethod
    def of_task(cls, task: Task) -> Entry:
        """The entry a BFCL task was made from (its ``meta["bfcl"]``)."""
        m = task.meta.get("bfcl")
        if not isinstance(m, Mapping):
            raise TaskError(f"task {task.id} is not a BFCL task (no meta.bfcl)", field="meta", value=task.id)
        starts = m["turn_starts"]
        ends = [*starts[1:], len(task.messages)]
        turns = tuple(tuple(x for x in task.messages[s:e] if x["role"] in ("user", "system"))
                      for s, e in zip(starts, ends))
        return cls(m["id"], m["category"], turns, m["initial_config"], tuple(m["involved_classes"]),
                   tuple(m["excluded_function"]), tuple(tuple(t) for t in m["gold"]))


def read_entries(category: str) -> list[Entry]:
    """Every entry of BFCL category ``category`` with its gold calls."""
    require_bfcl()
    gold = {g["id"]: g["ground_truth"] for g in _read_lines(f"possible_answer/BFCL_v4_{category}.json")}
    return [Entry(e["id"], category, tuple(tuple(turn) for turn in e["question"]), e["initial_config"],
                  tuple(e["involved_classes"]), tuple(e.get("excluded_function") or ()),
                  tuple(tuple(t) for t in gold[e["id"]]))
            for e in _read_lines(f"BFCL_v4_{category}.json")]


def _arguments(backends: Backends, call: Call) -> dict[str, Any]:
    """``call``'s arguments by name (positional ones named by the method's signature)."""
    named = backends.named_arguments(call)
    if named is None:
        raise TaskError(f"gold call {call.source} does not fit its method", field="ground_truth", value=call.source)
    return named


def to_task(entry: Entry) -> Task:
    """``entry`` as a task (see the module docstring); the gold calls run on fresh backends."""
    tools = tool_specs(entry.involved_classes, entry.excluded)
    declared = [t["function"]["name"] for t in tools]
    backends = entry.backends(declared)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt(), "tools": tools}]
    starts = []
    for k, (turn, calls) in enumerate(zip(entry.turns, entry.gold_calls(declared))):
        ids = [f"call_{k}_{i}" for i in range(len(calls))]
        starts.append(len(messages))
        messages += [{"role": m["role"], "content": m["content"]} for m in turn]
        if not calls:
            continue
        named = [json.dumps(_arguments(backends, c)) for c in calls]
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": i, "type": "function", "function": {"name": c.name, "arguments": a}}
            for i, c, a in zip(ids, calls, named)]})
        messages += [{"role": "tool", "name": c.name, "tool_call_id": i, "content": backends.execute(c).output}
                     for i, c in zip(ids, calls)]
    return Task(id=entry.id, messages=tuple(messages), probes=(), family=entry.category, split=split_of(entry.id),
                domain="+".join(entry.involved_classes), generator=GENERATOR, generator_version=BFCL_VERSION,
                tools=tuple(tools), meta={"bfcl": {**entry.to_meta(), "turn_starts": starts}})


def load_bfcl_suite(name: str, split: str | None = "train") -> list[Task]:
    """The tasks of BFCL suite ``name`` (:data:`SUITES`), one split (``None``: all).

    Raises:
        TaskError: an unknown suite or split, or bfcl-eval missing (one line naming ``make bfcl``).
    """
    if name not in SUITES:
        raise TaskError(f"unknown BFCL suite {name!r}; valid: {', '.join(SUITES)}", field="suite", value=name)
    if split not in (None, "train", "heldout"):
        raise TaskError(f"{name} has no split {split!r}; splits: train, heldout (or split=None)", field="split",
                        value=split)
    entries = [e for e in read_entries(SUITES[name]) if split is None or split_of(e.id) == split]
    return [to_task(e) for e in entries]
