"""Turns as probes: each BFCL turn's evidence among the earlier tool outputs, and the task with probes.

A BFCL task (:mod:`evals.bfcl.data`) has no probes, so the project's probe machinery (the
``drop_evidence`` diagnostic, the hindsight oracle, the rule-table bound, the headroom) has nothing
to read. Here a turn plays the probe: the gold calls the turn must make are its answer, and the
earlier tool outputs that hold one of their literal argument values are its evidence.

The rule (a string match on the messages as the task holds them, nothing inferred):

- *Values*: every leaf of a gold call's arguments (lists and objects flattened): strings as they
  are, numbers as ``str()`` writes them. Booleans, ``None`` and values shorter than
  :data:`MIN_CHARS` characters (``"a"``, ``5``, ``".."``) are skipped: they match by chance.
- *Match*: the value occurs in a message's text as a whole word or phrase, case-sensitive (a value
  is never matched inside a longer word: ``temp`` is not found in ``temperature``).
- *Evidence*: a tool output before the turn's cut (the request that writes the turn's first
  reply) whose content matches a value, provided the value is *not also* found where the model
  could read it without that output: the system prompt and the tool specs, any user message up to
  the cut (the turn's own question and every earlier one), any earlier assistant message (its text
  or its calls' argument values: a value the agent already wrote down is read from there), or the
  output of an earlier gold call of the same turn (the model makes that call in the turn and reads
  the value afresh). What remains is a value that only earlier outputs hold: without them the
  model must guess it.

What the rule misses: a value derived from an output rather than copied (a sum, a reformatted
date, a file name read off a listing but written with another path), and an output that says
*which* call to make without holding an argument value. Those turns count as turns without
evidence; the counts are a lower bound on the turns that need an earlier output.

Not for: judging (:mod:`evals.bfcl.judge`), or dropping the evidence (:mod:`evals.bfcl.controls`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from evals.bfcl.data import Entry
from evals.tasks.schema import Probe, Task

MIN_CHARS = 3
"""The shortest argument value (as text) that is looked for."""
PROBE_KIND = "bfcl_turn"


@dataclass(frozen=True)
class ValueMatch:
    """One argument value of a turn's gold calls and the earlier tool outputs that hold it.

    Attributes:
        call: the gold call's function name.
        argument: the argument's name (``name[0]``, ``name.key`` for a leaf inside a list or object).
        value: the value as matched (``str()`` of a number).
        outputs: message ids of the tool outputs before the cut that hold it (non-empty).
    """

    call: str
    argument: str
    value: str
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class TurnEvidence:
    """One turn of a BFCL task and its evidence (see the module docstring).

    Attributes:
        turn: the turn's index.
        cut: the turn's request holds ``messages[:cut]`` (its question is ``messages[cut - 1]``).
        start: the message id of the turn's first question (``meta["bfcl"]["turn_starts"]``).
        outputs_before: ids of every tool output before the cut.
        matches: the values only earlier outputs hold, in call and argument order.
    """

    turn: int
    cut: int
    start: int
    outputs_before: tuple[int, ...]
    matches: tuple[ValueMatch, ...]

    def __post_init__(self) -> None:
        assert all(m.outputs and set(m.outputs) <= set(self.outputs_before) for m in self.matches), self

    @property
    def evidence_ids(self) -> tuple[int, ...]:
        """Every tool output that holds a matched value, in message order."""
        return tuple(sorted({i for m in self.matches for i in m.outputs}))

    @property
    def has_evidence(self) -> bool:
        return bool(self.matches)

    def to_dict(self) -> dict[str, Any]:
        return {"turn": self.turn, "cut": self.cut, "evidence_ids": list(self.evidence_ids),
                "outputs_before": len(self.outputs_before),
                "matches": [{"call": m.call, "argument": m.argument, "value": m.value, "outputs": list(m.outputs)}
                            for m in self.matches]}


def _leaves(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _leaves(v, f"{path}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{path}[{i}]")
    else:
        yield path, value


def _as_text(value: Any) -> str | None:
    """The text a value is looked for as, or ``None`` when it is not looked for (module docstring)."""
    if isinstance(value, bool) or value is None or not isinstance(value, str | int | float):
        return None
    text = str(value)
    return text if len(text.strip()) >= MIN_CHARS else None


def _calls(message: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(call id, function name, arguments) of an assistant message's tool calls."""
    out = []
    for call in message.get("tool_calls") or ():
        fn = call.get("function", call)
        args = fn.get("arguments") or {}
        out.append((call.get("id", ""), fn.get("name", ""), json.loads(args) if isinstance(args, str) else dict(args)))
    return out


def _found(text: str, value: str) -> bool:
    """Whether ``value`` occurs in ``text`` as a whole word or phrase (case-sensitive)."""
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text) is not None


def _readable(message: Mapping[str, Any]) -> str:
    """What a non-output message lets the model read: its text, its calls' argument values, and
    (on the system message) the tool specs."""
    parts = [str(message.get("content") or "")]
    parts += [str(v) for _, _, args in _calls(message) for _, v in _leaves(args, "")]
    if "tools" in message:
        parts.append(json.dumps(message["tools"], ensure_ascii=False))
    return "\n".join(parts)


def turn_cuts(task: Task) -> list[tuple[int, int]]:
    """(start, cut) of every turn of a BFCL task: where its question starts and where its request
    ends (the judge's cuts). Raises :class:`~evals.errors.TaskError` for a task without ``meta.bfcl``."""
    entry = Entry.of_task(task)
    starts = task.meta["bfcl"]["turn_starts"]
    return [(s, s + len(turn)) for s, turn in zip(starts, entry.turns)]


def turn_evidence(task: Task) -> list[TurnEvidence]:
    """Every turn of a BFCL task with its evidence (module docstring), in turn order.

    Raises:
        TaskError: ``task`` is not a BFCL task.
    """
    msgs = task.messages
    bounds = turn_cuts(task)
    ends = [s for s, _ in bounds[1:]] + [len(msgs)]
    out = []
    for k, ((start, cut), end) in enumerate(zip(bounds, ends)):
        before = [i for i in range(cut) if msgs[i]["role"] == "tool"]
        elsewhere = "\n".join(_readable(m) for m in msgs[:cut] if m["role"] != "tool")
        output_of = {m.get("tool_call_id"): str(m.get("content") or "") for m in msgs[cut:end] if m["role"] == "tool"}
        matches: list[ValueMatch] = []
        seen: set[str] = set()
        for m in msgs[cut:end]:
            earlier_outputs: list[str] = []  # outputs of this turn's gold calls made before the current one
            for call_id, name, args in _calls(m):
                for path, leaf in _leaves(args, ""):
                    value = _as_text(leaf)
                    if value is None or value in seen or _found(elsewhere, value) or \
                            any(_found(o, value) for o in earlier_outputs):
                        continue
                    held = tuple(i for i in before if _found(str(msgs[i].get("content") or ""), value))
                    if held:
                        seen.add(value)
                        matches.append(ValueMatch(name, path.lstrip("."), value, held))
                earlier_outputs.append(output_of.get(call_id, ""))
        out.append(TurnEvidence(k, cut, start, tuple(before), tuple(matches)))
    return out


def evidence_turns(task: Task) -> tuple[int, ...]:
    """The turns of a BFCL task that have evidence (:func:`turn_evidence`), in turn order: the turns
    ``--turns evidence`` answers and the report scores apart.

    Raises:
        TaskError: ``task`` is not a BFCL task.
    """
    return tuple(t.turn for t in turn_evidence(task) if t.has_evidence)


def turn_probes(evidence: Sequence[TurnEvidence]) -> tuple[Probe, ...]:
    """One probe per matched value of every turn with evidence, asked after the turn's question
    (``after_message = cut - 1``), its answer the value and its evidence the outputs that hold it.

    A turn with several values is several probes: the probe machinery reads an evidence message that
    mentions the answer as a copy of it (one suffices; :func:`evals.cache.fidelity.evidence_split`),
    so each value's outputs are copies of that value, and a turn's evidence is the union of its
    probes' (:attr:`TurnEvidence.evidence_ids`)."""
    return tuple(Probe(t.cut - 1, f"BFCL turn {t.turn}: the value of {m.call}'s argument {m.argument}", m.value,
                       evidence_ids=m.outputs, kind=PROBE_KIND)
                 for t in evidence for m in t.matches)


def as_probe_task(task: Task, evidence: Sequence[TurnEvidence] | None = None) -> Task:
    """``task`` with :func:`turn_probes` as its probes, for the probe machinery (the oracle's and the
    table bound's cost accounting, the proxy). ``evidence``: :func:`turn_evidence` of ``task``, when
    the caller has it.

    Raises:
        TaskError: ``task`` is not a BFCL task.
    """
    return replace(task, probes=turn_probes(turn_evidence(task) if evidence is None else evidence))
