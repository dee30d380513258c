"""What a policy sees: one :class:`Request`, or an :class:`Episode` of requests over one trajectory.

A request is the message list at one turn of an agent session plus what the policy needs to decide
on it (token counts under the model's template, the call index, the schedule it emitted for the
previous request). An episode is one trajectory with the turns at which requests are made, so a
batch of whole trajectories can be decided in one call (one sandbox process for a program).
This module holds data only; policies live in ``policy.py``.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from engine.errors import MessageError, show
from engine.template import normalize_message
from search_spaces.cache import program_api


class PolicyKind(enum.StrEnum):
    """What a policy emits: a cache schedule (``cache``) or a rewritten message list (``text``)."""

    CACHE = "cache"
    TEXT = "text"


def _freeze_messages(messages: Sequence[Any]) -> tuple[Mapping[str, Any], ...]:
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence) or not messages:
        raise MessageError("messages must be a non-empty list", field="messages", value=messages)
    for i, m in enumerate(messages):
        normalize_message(m, i)  # raises MessageError naming messages[i].field
    return tuple(MappingProxyType(copy.deepcopy(dict(m))) for m in messages)


def _counts(values: Sequence[Any], n: int, field: str) -> tuple[int, ...]:
    out = tuple(values)
    if len(out) != n:
        raise MessageError(f"{field}: {len(out)} values for {n} messages", field=field, value=len(out))
    for i, v in enumerate(out):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise MessageError(f"{field}[{i}] must be a non-negative integer, got {show(v)}", field=field, value=v)
    return out


def _relevance(values: Sequence[Any] | None, n: int) -> tuple[float, ...] | None:
    if values is None:
        return None
    out = tuple(float(v) for v in values)
    if len(out) != n:
        raise MessageError(f"relevance: {len(out)} values for {n} messages", field="relevance", value=len(out))
    return out


def request_points(messages: Sequence[Mapping[str, Any]]) -> tuple[int, ...]:
    """Message counts at which an agent harness sends a request: before each assistant turn, and at
    the end when the last message is not the assistant's. ``n`` means the request holds ``messages[:n]``.
    """
    points = []
    for n in range(1, len(messages) + 1):
        before_assistant = n == len(messages) or messages[n].get("role") == "assistant"
        if before_assistant and messages[n - 1].get("role") != "assistant":
            points.append(n)
    return tuple(points)


@dataclass(frozen=True)
class Request:
    """One turn of a session, as a policy sees it.

    Attributes:
        messages: the history so far (OpenAI-style dicts, copied and read-only at the top level).
        token_counts: tokens of each message under the model's template.
        call_index: how many assistant turns happened before this request.
        previous: the cumulative decision this policy emitted for the previous request (wire dict),
            or ``None`` at the first request.
        previous_messages: how many messages that previous request had (0 = unknown); decisions
            may add nothing at triggers below it.
        relevance: per message, similarity to the session's intent (first user message), or ``None``.
    """

    messages: tuple[Mapping[str, Any], ...]
    token_counts: tuple[int, ...]
    call_index: int
    previous: Mapping[str, Any] | None = None
    previous_messages: int = 0
    relevance: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if len(self.token_counts) != len(self.messages):
            raise MessageError(f"token_counts: {len(self.token_counts)} values for {len(self.messages)} messages",
                               field="token_counts", value=len(self.token_counts))
        if not 0 <= self.previous_messages <= len(self.messages):
            raise MessageError(f"previous_messages {self.previous_messages} is outside 0..{len(self.messages)}",
                               field="previous_messages", value=self.previous_messages)
        if self.call_index < 0:
            raise MessageError(f"call_index {self.call_index} is negative", field="call_index", value=self.call_index)

    @classmethod
    def of(cls, messages: Sequence[Any], token_counts: Sequence[int], *, previous: Mapping[str, Any] | None = None,
           previous_messages: int = 0, relevance: Sequence[float] | None = None) -> Request:
        """Build a request, copying and checking the messages and computing ``call_index``.

        Raises:
            MessageError: a malformed message, or counts/relevance of the wrong length or type.
        """
        frozen = _freeze_messages(messages)
        counts = _counts(token_counts, len(frozen), "token_counts")
        calls = sum(1 for m in frozen if m.get("role") == "assistant")
        prev = MappingProxyType(copy.deepcopy(dict(previous))) if previous is not None else None
        return cls(frozen, counts, calls, prev, previous_messages, _relevance(relevance, len(frozen)))

    @property
    def n(self) -> int:
        return len(self.messages)

    def view(self) -> program_api.RequestView:
        """The read-only view programs and built-in families decide on."""
        return program_api.RequestView(self.messages, self.token_counts, self.call_index,
                                       dict(self.previous) if self.previous is not None else None, self.relevance,
                                       previous_n=self.previous_messages)

    def plain_messages(self) -> list[dict[str, Any]]:
        """A mutable deep copy of the messages."""
        return [copy.deepcopy(dict(m)) for m in self.messages]


@dataclass(frozen=True)
class Episode:
    """One trajectory and the turns at which requests are made.

    Attributes:
        messages: the whole trajectory (read-only copies).
        token_counts: per message.
        cuts: request sizes, strictly increasing, each in ``1..len(messages)``; request k holds
            ``messages[:cuts[k]]`` (default: :func:`request_points`).
        relevance: per message, or ``None``.
    """

    messages: tuple[Mapping[str, Any], ...]
    token_counts: tuple[int, ...]
    cuts: tuple[int, ...]
    relevance: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if any(b <= a for a, b in zip(self.cuts, self.cuts[1:])) or any(
                not 1 <= c <= len(self.messages) for c in self.cuts):
            raise MessageError(f"cuts must be strictly increasing within 1..{len(self.messages)}, got "
                               f"{show(list(self.cuts))}", field="cuts", value=self.cuts)

    @classmethod
    def of(cls, messages: Sequence[Any], token_counts: Sequence[int], cuts: Sequence[int] | None = None,
           relevance: Sequence[float] | None = None) -> Episode:
        frozen = _freeze_messages(messages)
        points = request_points(frozen) if cuts is None else tuple(cuts)
        return cls(frozen, _counts(token_counts, len(frozen), "token_counts"), points,
                   _relevance(relevance, len(frozen)))

    def request(self, n: int, previous: Mapping[str, Any] | None, previous_messages: int) -> Request:
        """The request holding the first ``n`` messages."""
        calls = sum(1 for m in self.messages[:n] if m.get("role") == "assistant")
        prev = MappingProxyType(copy.deepcopy(dict(previous))) if previous is not None else None
        rel = self.relevance[:n] if self.relevance is not None else None
        return Request(self.messages[:n], self.token_counts[:n], calls, prev, previous_messages, rel)
