"""Task and probe records (docs/tasks.md): typed, validated, and convertible to and from plain JSON.

A :class:`Task` is a trajectory (OpenAI-style messages, kept as plain dicts) plus :class:`Probe` s:
questions asked after a given message, with a gold answer, candidates for multiple choice, and the
ids of the messages that hold the evidence. Message ids are 0-based indices into ``messages``, the
same ids the wire format's ``drop_message`` uses.

This module knows nothing about how tasks are generated or stored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.errors import MessageError
from engine.template import normalize_message
from evals.errors import TaskError

FAMILIES = ("evidence-in-old-tool-response", "evidence-restated", "decision-then-reversal", "multi-hop",
            "recent-only")
PROBE_FIELDS = ("after_message", "question", "cloze_prefix", "answer", "candidates", "evidence_ids", "kind")


def message_text(message: Mapping[str, Any]) -> str:
    """Everything a message says: content, reasoning, and the names and arguments of its tool calls."""
    parts = [str(message.get("content") or ""), str(message.get("reasoning_content") or "")]
    for call in message.get("tool_calls") or ():
        fn = call.get("function", call)
        parts += [str(fn.get("name", "")), str(fn.get("arguments", ""))]
    return "\n".join(p for p in parts if p)


def mentions(text: str, value: str) -> bool:
    """Whether ``value`` occurs in ``text`` as a whole word or phrase, ignoring case."""
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text, re.IGNORECASE) is not None


@dataclass(frozen=True)
class Probe:
    """A question about the trajectory, asked after message ``after_message``.

    Attributes:
        after_message: the probe sees messages ``0..after_message`` (inclusive).
        question: an open question; its gold answer is ``answer`` (normalised exact match).
        answer: the gold answer, as written in the evidence.
        cloze_prefix: a lead-in whose continuation is the answer (``" " + answer``); may be empty.
        candidates: answers for log-likelihood multiple choice (``answer`` among them), or empty.
        evidence_ids: the messages that hold the evidence, each ``<= after_message``.
        kind: what is asked (``fact``, ``multi_hop``, ``status_before``, ``status_now``,
            ``original_reason``, or anything a custom task uses).
    """

    after_message: int
    question: str
    answer: str
    cloze_prefix: str = ""
    candidates: tuple[str, ...] = ()
    evidence_ids: tuple[int, ...] = ()
    kind: str = "fact"

    def __post_init__(self) -> None:
        object.__setattr__(self, "candidates", tuple(self.candidates))
        object.__setattr__(self, "evidence_ids", tuple(self.evidence_ids))
        if isinstance(self.after_message, bool) or not isinstance(self.after_message, int) or self.after_message < 0:
            raise TaskError(f"probe after_message must be a non-negative integer, got {self.after_message!r}",
                            field="after_message", value=self.after_message)
        if not isinstance(self.answer, str) or not self.answer.strip():
            raise TaskError(f"probe answer must be a non-empty string, got {self.answer!r}", field="answer",
                            value=self.answer)
        if not isinstance(self.question, str) or not isinstance(self.cloze_prefix, str):
            raise TaskError("probe question and cloze_prefix must be strings", field="question", value=self.question)
        if not self.question and not self.cloze_prefix:
            raise TaskError("a probe needs a question or a cloze_prefix", field="question", value=self.question)
        if self.candidates:
            if len(set(self.candidates)) != len(self.candidates) or not all(
                    isinstance(c, str) and c for c in self.candidates):
                raise TaskError(f"probe candidates must be distinct non-empty strings, got {list(self.candidates)}",
                                field="candidates", value=list(self.candidates))
            if self.answer not in self.candidates:
                raise TaskError(f"probe answer {self.answer!r} is not among its candidates {list(self.candidates)}",
                                field="candidates", value=list(self.candidates))
        bad = [i for i in self.evidence_ids if isinstance(i, bool) or not isinstance(i, int) or not
               0 <= i <= self.after_message]
        if bad:
            raise TaskError(f"probe evidence_ids must lie in [0, after_message={self.after_message}], got {bad}",
                            field="evidence_ids", value=list(self.evidence_ids))

    @property
    def gold_index(self) -> int:
        """Index of ``answer`` in ``candidates`` (raises :class:`TaskError` without candidates)."""
        if not self.candidates:
            raise TaskError("probe has no candidates", field="candidates", value=[])
        return self.candidates.index(self.answer)

    @property
    def continuations(self) -> tuple[str, ...]:
        """The candidates as scored continuations (lm-evaluation-harness: ``" " + candidate``)."""
        return tuple(" " + c for c in self.candidates)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["candidates"], d["evidence_ids"] = list(self.candidates), list(self.evidence_ids)
        return {k: d[k] for k in PROBE_FIELDS}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Probe:
        unknown = sorted(set(d) - set(PROBE_FIELDS))
        if unknown:
            raise TaskError(f"unknown probe fields {unknown}; valid: {', '.join(PROBE_FIELDS)}", field="probes",
                            value=unknown)
        missing = [k for k in ("after_message", "answer") if k not in d]
        if missing:
            raise TaskError(f"probe is missing {missing}", field="probes", value=dict(d))
        return cls(d["after_message"], d.get("question") or "", d["answer"], d.get("cloze_prefix") or "",
                   tuple(d.get("candidates") or ()), tuple(d.get("evidence_ids") or ()), d.get("kind") or "fact")


@dataclass(frozen=True)
class Task:
    """A trajectory with probes (see docs/tasks.md for every field).

    ``seed``, ``generator`` and ``generator_version`` say how a generated task was made (empty for
    hand-written ones); ``entities`` lists the entity values it uses; ``n_tokens`` is the length of
    ``messages`` under the gemma template, when measured.
    """

    id: str
    messages: tuple[dict[str, Any], ...]
    probes: tuple[Probe, ...]
    family: str = "custom"
    split: str = "custom"
    domain: str = ""
    seed: int | None = None
    generator: str = ""
    generator_version: str = ""
    tools: tuple[dict[str, Any], ...] = ()
    entities: tuple[str, ...] = ()
    n_tokens: int | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("messages", "probes", "tools", "entities"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not isinstance(self.id, str) or not self.id:
            raise TaskError(f"task id must be a non-empty string, got {self.id!r}", field="id", value=self.id)
        if not self.messages:
            raise TaskError(f"task {self.id}: messages must be a non-empty list", field="messages", value=[])
        for i, m in enumerate(self.messages):
            try:
                normalize_message(m, i)
            except MessageError as err:
                raise TaskError(f"task {self.id}: {err}", field=err.field, value=err.value) from None
        for p in self.probes:
            if not isinstance(p, Probe):
                raise TaskError(f"task {self.id}: probes must be Probe objects, got {type(p).__name__}",
                                field="probes", value=p)
            if p.after_message >= len(self.messages):
                raise TaskError(f"task {self.id}: probe after_message {p.after_message} is past the last message "
                                f"({len(self.messages) - 1})", field="after_message", value=p.after_message)

    def context(self, probe: Probe) -> list[dict[str, Any]]:
        """The messages a probe sees: ``messages[0..after_message]`` (copies)."""
        return [dict(m) for m in self.messages[: probe.after_message + 1]]

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready dict (the JSON-lines schema of docs/tasks.md)."""
        return {"id": self.id, "family": self.family, "split": self.split, "domain": self.domain, "seed": self.seed,
                "generator": self.generator, "generator_version": self.generator_version,
                "messages": [dict(m) for m in self.messages], "tools": [dict(t) for t in self.tools],
                "probes": [p.to_dict() for p in self.probes], "entities": list(self.entities),
                "n_tokens": self.n_tokens, "meta": dict(self.meta)}

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> Task:
        """Inverse of :meth:`to_record`; ``messages``, ``tools``, ``meta`` may also be JSON strings."""
        if not isinstance(d, Mapping):
            raise TaskError(f"a task must be an object, got {type(d).__name__}", field="task", value=d)

        def loads(name: str, default: Any) -> Any:
            value = d.get(name, default)
            return json.loads(value) if isinstance(value, str) else (default if value is None else value)

        probes = d.get("probes") or ()
        if not isinstance(probes, Sequence) or not all(isinstance(p, Mapping) for p in probes):
            raise TaskError(f"task {d.get('id')!r}: probes must be a list of objects", field="probes", value=probes)
        return cls(id=str(d.get("id") or ""), messages=tuple(loads("messages", [])),
                   probes=tuple(Probe.from_dict(p) for p in probes), family=d.get("family") or "custom",
                   split=d.get("split") or "custom", domain=d.get("domain") or "", seed=d.get("seed"),
                   generator=d.get("generator") or "", generator_version=d.get("generator_version") or "",
                   tools=tuple(loads("tools", [])), entities=tuple(d.get("entities") or ()),
                   n_tokens=d.get("n_tokens"), meta=loads("meta", {}))
