"""The conversation a workload session sends: as chat messages (the real replay) or as token ids (the simulator).

A session's request at turn k carries its whole history (stateless interface): the shared system
prompt, the task, and for each earlier turn the assistant's message (the trace's text, not what the
model generated) and the tool's output. :func:`turn_messages` says which messages turn k appends,
with their words (indices into ``evals.survival.text``'s abstract vocabulary); the real replay
renders them to text, and :class:`ChatTokens` turns them into the token ids the engine's renderer
would produce, without a tokenizer: per role the template's header and footer ids, the generation
prompt's ids, the beginning-of-sequence id and the token id of every vocabulary word, all measured
once from the engine's renderer (:meth:`ChatTokens.from_renderer`) and stored in the calibration.
A simulator fed these ids builds exactly the engine's histories, so its radix tree makes the same
decisions.

Not covered: literal turn text (``Turn.text``, from imported recordings) is simulated as the
trace's count of synthetic words, so its exact ids (and any text two sessions share) are not
reproduced; a tool whose name the template's header spells out (the ``plain`` template) and that
is not one of the generator's tools gets the generic tool header.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from engine.history import Item
from evals.survival.generate import TOOL_KINDS
from evals.survival.text import VOCAB, render, word_ids
from evals.survival.trace import SessionSpec, TraceHeader, WorkloadError

ROLES = ("system", "user", "assistant", "tool")


def common_prefix(a: Sequence[Item], b: Sequence[Item]) -> int:
    """Length of the common prefix of two histories."""
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):
        return n
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def new_tokens(prev: Sequence[Item], items: Sequence[Item]) -> int:
    """Tokens of ``items`` after its longest common prefix with ``prev`` (new to the session)."""
    shared = common_prefix(prev, items)
    return sum(map(isinstance, items[shared:], repeat(int)))


@dataclass(frozen=True)
class Message:
    """One message of a session: its role, its words, and its literal text when the trace has it."""

    role: str
    words: tuple[int, ...]
    text: str | None = None
    name: str | None = None

    def as_chat(self, vocab: Sequence[str]) -> dict[str, Any]:
        """The OpenAI-style message the real replay sends."""
        out: dict[str, Any] = {"role": self.role,
                               "content": self.text if self.text is not None else render(self.words, vocab)}
        if self.name is not None:
            out["name"] = self.name
        return out


def turn_messages(header: TraceHeader, spec: SessionSpec, turn: int) -> list[Message]:
    """The messages request ``turn`` of ``spec`` adds to the previous request's (before its
    generation prompt): turn 0 the system prompt (when the trace has one) and the task; turn
    k > 0 the assistant's message of turn k - 1 and the output of the tool it called."""
    t = spec.turns[turn]
    if turn == 0:
        out = []
        if header.system_tokens:
            out.append(Message("system", tuple(word_ids(header.seed, 0, "system", header.system_tokens, 0.0))))
        out.append(Message("user", tuple(word_ids(spec.seed, 0, "user", t.input_tokens, 1.0)), t.text))
        return out
    prev = spec.turns[turn - 1]
    focus = 1.0 if turn == 1 else 0.5  # the assistant text of turn 0 is on-task
    return [Message("assistant", tuple(word_ids(spec.seed, turn - 1, "assistant", prev.output_tokens, focus))),
            Message("tool", tuple(word_ids(spec.seed, turn, "tool", t.input_tokens, 0.5)), t.text, prev.tool)]


def _ids(raw: Any, where: str) -> tuple[int, ...]:
    if not isinstance(raw, list | tuple) or not all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
        raise WorkloadError(f"calibration chat tokens: {where} must be a list of integers", field=where, value=None)
    return tuple(raw)


@dataclass(frozen=True)
class ChatTokens:
    """Token ids of a chat template and of the workload vocabulary (see the module docstring).

    Attributes:
        template: the template's name (``"generic"``: made-up ids, for calibrations of engines
            that are not here; histories then have the right shape, not the engine's ids).
        bos: ids the first message starts with.
        headers: per role (and ``"tool:<name>"`` where the header names the tool) the header's ids.
        footer: ids that close every message.
        prompt: the generation prompt's ids.
        words: the token id of each of the ``VOCAB`` workload words.
    """

    template: str
    bos: tuple[int, ...]
    headers: Mapping[str, tuple[int, ...]]
    footer: tuple[int, ...]
    prompt: tuple[int, ...]
    words: tuple[int, ...] = field(repr=False)

    def __post_init__(self) -> None:
        missing = [r for r in ROLES if r not in self.headers]
        if missing:
            raise WorkloadError(f"calibration chat tokens: no header for role {missing[0]!r}", field="headers",
                                value=missing[0])
        if len(self.words) != VOCAB:
            raise WorkloadError(f"calibration chat tokens: {len(self.words)} word ids, {VOCAB} needed",
                                field="words", value=len(self.words))

    @classmethod
    def generic(cls) -> ChatTokens:
        """A Gemma-shaped template with made-up ids (3-token headers, 2-token footer)."""
        headers = {"system": (3, 4, 5), "user": (3, 6, 5), "assistant": (3, 7, 5), "tool": (3, 8, 5)}
        return cls("generic", (1,), headers, (9, 5), (3, 7, 5), tuple(range(100, 100 + VOCAB)))

    @classmethod
    def from_renderer(cls, renderer: Any, vocab: Sequence[str], tools: Iterable[str] = ()) -> ChatTokens:
        """Measure the ids from an engine's renderer (``engine.layout.Renderer``) and the workload
        vocabulary ``vocab`` (``evals.survival.text.vocabulary``).

        Raises:
            WorkloadError: the tokenizer does not split the workload's words one token each.
        """
        encode = renderer.encode_text
        template = renderer.template
        if template.footers or template.default_system is not None:
            raise WorkloadError(f"template {template.name!r} gives some roles their own footer or writes a default "
                                "system turn; the simulator's token model has one footer for every role (gemma, plain)",
                                field="template", value=template.name)
        words = tuple(encode(" " + w)[0] for w in vocab)
        sample = list(range(0, VOCAB, 37))
        if encode(render(sample, vocab)) != [words[i] for i in sample]:
            raise WorkloadError("the tokenizer merges the workload's words; the simulator cannot count its tokens",
                                field="tokenizer", value=renderer.template.name)

        def parts(role: str, name: str | None = None) -> tuple[tuple[int, ...], tuple[int, ...]]:
            msg = {"role": role, "content": "x", **({"name": name} if name else {})}
            ps = renderer.message_parts(msg, 1)
            return tuple(ps[0][1]), tuple(ps[-1][1])

        headers = {r: parts(r)[0] for r in ROLES}
        if "{name}" in template.headers["tool"]:
            all_tools = {t for k in TOOL_KINDS.values() for t in k.tools} | set(tools)
            headers.update({f"tool:{t}": parts("tool", t)[0] for t in sorted(all_tools)})
        bos_id = renderer.tokenizer.bos_token_id
        bos = (bos_id,) if template.bos and bos_id is not None else ()
        return cls(template.name, bos, headers, parts("user")[1], tuple(renderer.prompt_ids), words)

    def header(self, message: Message) -> tuple[int, ...]:
        if message.role == "tool" and message.name is not None:
            return self.headers.get(f"tool:{message.name}", self.headers["tool"])
        return self.headers[message.role]

    def message(self, message: Message, index: int) -> list[int]:
        """Ids of ``message`` at position ``index`` of the conversation (message 0 starts with BOS)."""
        out = [*self.bos] if index == 0 else []
        out.extend(self.header(message))
        words = self.words
        out.extend(words[w] for w in message.words)
        out.extend(self.footer)
        return out

    def wire(self) -> dict[str, Any]:
        return {"template": self.template, "bos": list(self.bos),
                "headers": {k: list(v) for k, v in self.headers.items()}, "footer": list(self.footer),
                "prompt": list(self.prompt), "words": list(self.words)}

    @classmethod
    def from_wire(cls, raw: Any) -> ChatTokens:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("headers"), Mapping):
            raise WorkloadError("calibration chat tokens must be an object with headers", field="chat", value=None)
        return cls(str(raw.get("template", "")), _ids(raw.get("bos"), "chat.bos"),
                   {str(k): _ids(v, f"chat.headers.{k}") for k, v in raw["headers"].items()},
                   _ids(raw.get("footer"), "chat.footer"), _ids(raw.get("prompt"), "chat.prompt"),
                   _ids(raw.get("words"), "chat.words"))


class SessionTokens:
    """The histories (token ids) of one session's requests, built turn by turn."""

    def __init__(self, chat: ChatTokens, header: TraceHeader, spec: SessionSpec) -> None:
        self.chat = chat
        self.header = header
        self.spec = spec
        self._body: list[int] = []
        self._messages = 0
        self._built = -1

    def at(self, turn: int) -> list[int]:
        """The history of request ``turn`` (turns must be asked for in order)."""
        while self._built < turn:
            k = self._built + 1
            for m in turn_messages(self.header, self.spec, k):
                self._body.extend(self.chat.message(m, self._messages))
                self._messages += 1
            self._built = k
        return [*self._body, *self.chat.prompt]
