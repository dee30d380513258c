"""Layout: messages -> per-message token spans -> the event history a request implies.

Regions of a rendered request (token indices, half-open)::

    | msg 0 (BOS+header|content|footer) | msg 1 ... | msg n-1 | generation prompt |
    ^0                                  ^spans[1][0]          ^prompt_start       ^len(token_ids)

Each message part is tokenized on its own and cached, so message i's tokens are the same in
every request that contains it, whatever follows. :meth:`Renderer.compile` interleaves the
schedule's events after their trigger messages: ``TOKENS(msg i) DROP(...) REPOSITION`` (drop runs
before reposition at one trigger), then the generation prompt.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any, Protocol

from engine.errors import MessageError, ScheduleError
from engine.history import REPOSITION, Drop, Item, Reposition, event_indices, merge_ranges
from engine.schedule import DropKind, DropTarget, Schedule, parse_schedule
from engine.template import ChatTemplate, get_template, normalize_message
from engine.tokenbound import TokenBound, token_bound


class Tokenizer(Protocol):
    """What the layout needs from a tokenizer (a transformers tokenizer satisfies it)."""

    bos_token_id: int | None

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


@dataclass(frozen=True)
class PartSpan:
    """One part of a rendered message: its kind and token range [start, end)."""

    kind: str
    start: int
    end: int


@dataclass(frozen=True)
class Rendered:
    """A rendered message list.

    Attributes:
        token_ids: every token, including the generation prompt at the end.
        spans: per message, its token range (start, end), half-open; contiguous, from 0 to
            ``prompt_start``.
        parts: per message, its parts with token ranges.
        prompt_start: where the generation prompt starts.
        messages: the normalized messages.
    """

    token_ids: list[int]
    spans: list[tuple[int, int]]
    parts: list[tuple[PartSpan, ...]]
    prompt_start: int
    messages: list[dict[str, Any]]

    @property
    def message_tokens(self) -> list[int]:
        """Token count of each message."""
        return [e - s for s, e in self.spans]

    def prefix(self, n: int) -> Rendered:
        """The rendering of the first ``n`` messages, generation prompt included: equal to rendering
        them anew, because every message is rendered on its own (the module docstring)."""
        if not 1 <= n <= len(self.spans):
            raise MessageError(f"a prefix needs 1..{len(self.spans)} messages, got {n}", field="messages", value=n)
        end = self.spans[n - 1][1]
        return Rendered(self.token_ids[:end] + self.token_ids[self.prompt_start:], self.spans[:n], self.parts[:n],
                        end, self.messages[:n])


@dataclass(frozen=True)
class Layout:
    """A request compiled to its event history."""

    rendered: Rendered
    schedule: Schedule
    items: list[Item]


@dataclass(frozen=True)
class SessionLayout:
    """A whole trajectory compiled once under the schedule of its last request.

    When the schedules of a session's requests extend each other (each keeps every earlier entry
    and adds only at triggers past the previous request, which is what validated policy decisions
    do), the request holding the first ``n`` messages has as schedule the last one's entries
    triggered before ``n``, so its history is a prefix of :attr:`items` followed by the generation
    prompt. Compiling once instead of once per request makes a session linear in its length.

    Attributes:
        items: the history of every message with its events (generation prompt excluded).
        ends: ``ends[n]``: how many of :attr:`items` the first ``n`` messages and their events fill.
        prompt: the generation prompt's tokens.
        events: where the events lie in :attr:`items`, ascending (``known_events``: the compiler's own
            record of them, which is what a scan of :attr:`items` finds; ``None``: scanned).
        repositions: whether any event is a reposition.
    """

    items: list[Item]
    ends: list[int]
    prompt: list[int]
    events: list[int] = field(init=False)
    repositions: bool = field(init=False)
    known_events: InitVar[list[int] | None] = None

    def __post_init__(self, known_events: list[int] | None) -> None:
        events = event_indices(self.items) if known_events is None else known_events
        object.__setattr__(self, "events", events)
        object.__setattr__(self, "repositions", any(isinstance(self.items[e], Reposition) for e in events))

    def request(self, n: int) -> list[Item]:
        """The history of the request holding the first ``n`` messages (its generation prompt included)."""
        return [*self.items[:self.ends[n]], *self.prompt]


@functools.cache
def _renderer_for(model: str, template: str) -> Renderer:
    from engine.models.loading import load_tokenizer

    return Renderer(load_tokenizer(model), template)


class Renderer:
    """Tokenizes messages through a template, with a cache of per-message token parts.

    Args:
        tokenizer: anything with ``encode``/``decode`` and ``bos_token_id``.
        template: a :class:`ChatTemplate` or its name.
        cache_size: how many distinct messages to keep tokenized.
        cache_tokens: how many tokens the cache may hold in all (about 40 bytes each, key text
            included); a message of more than a quarter of that is tokenized but not kept, so that
            huge one-off messages (a hostile request) neither evict the cache nor grow memory.
    """

    def __init__(self, tokenizer: Tokenizer, template: str | ChatTemplate = "gemma", cache_size: int = 50_000,
                 cache_tokens: int = 2_000_000):
        self.tokenizer = tokenizer
        self.template = get_template(template)
        self._cache: OrderedDict[str, list[tuple[str, list[int]]]] = OrderedDict()
        self._cache_size = cache_size
        self._cache_tokens = cache_tokens
        self._cached_tokens = 0
        self._lock = threading.Lock()  # the server renders on pool threads while the engine thread runs
        self.prompt_ids = self.encode_text(self.template.generation_prompt)

    @classmethod
    def for_model(cls, model: str, template: str = "gemma") -> Renderer:
        """The renderer of ``model`` (a registered name or a local path) and ``template``, one per
        process: token counts without loading the weights (seconds on first use)."""
        return _renderer_for(model, template)

    @property
    def cached_tokens(self) -> int:
        """Tokens held by the per-message cache (at most ``cache_tokens``)."""
        return self._cached_tokens

    def encode_text(self, text: str) -> list[int]:
        """The token ids of plain ``text`` (no special tokens, no template): a reply's prefix, a
        scored candidate."""
        return list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []

    @property
    def token_bound(self) -> TokenBound | None:
        """The tokenizer's lower bound on tokens from text length (``engine.tokenbound``), if proven."""
        return token_bound(self.tokenizer)

    def min_tokens(self, messages: Sequence[Any], prefix: str = "") -> int | None:
        """A lower bound on ``len(render(messages).token_ids)`` plus the tokens of ``prefix``, from the
        text's length alone (milliseconds for megabytes); ``None`` if the tokenizer has no proven bound
        (the messages are checked all the same).

        Raises:
            MessageError: for an empty list or a malformed message, as :meth:`render` would.
        """
        if not isinstance(messages, Sequence) or isinstance(messages, str | bytes) or not messages:
            raise MessageError("messages must be a non-empty list", field="messages", value=messages)
        normalized = [normalize_message(m, i) for i, m in enumerate(messages)]
        bound = self.token_bound
        if bound is None:
            return None
        n = len(self.prompt_ids) + bound.at_least(prefix)
        if self.template.bos and self.tokenizer.bos_token_id is not None:
            n += 1
        for i, msg in enumerate(normalized):
            n += sum(bound.at_least(p.text) for p in self.template.parts(msg, i))  # each part is encoded alone
        return n

    def message_parts(self, message: Mapping[str, Any], index: int) -> list[tuple[str, list[int]]]:
        """The (kind, token ids) parts of one normalized message; message 0 starts with BOS."""
        key = json.dumps([index == 0, message], sort_keys=True, ensure_ascii=False)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        parts = [(p.kind, self.encode_text(p.text)) for p in self.template.parts(message, index)]
        if index == 0 and self.template.bos and self.tokenizer.bos_token_id is not None:
            kind, ids = parts[0]
            parts[0] = (kind, [self.tokenizer.bos_token_id, *ids])
        size = sum(len(ids) for _, ids in parts)
        if size > self._cache_tokens // 4:
            return parts
        with self._lock:
            if key not in self._cache:
                self._cache[key] = parts
                self._cached_tokens += size
            while len(self._cache) > self._cache_size or self._cached_tokens > self._cache_tokens:
                _, old = self._cache.popitem(last=False)
                self._cached_tokens -= sum(len(ids) for _, ids in old)
        return parts

    def output_ids(self, message: Mapping[str, Any], index: int) -> list[int]:
        """The tokens a model generates to produce assistant ``message`` after the generation prompt.

        That is the message's parts after its header, and of its footer only the first token (the
        stop token: generation ends there and the rest of the footer is prompt text next turn).
        Used by dry-run replays to account a recorded assistant turn as generated output.
        """
        msg = normalize_message(message, index)
        parts = self.message_parts(msg, index)
        body = [t for kind, ids in parts[1:-1] for t in ids]
        footer = parts[-1][1][:1] if parts[-1][0] == "footer" else []
        return body + footer

    def render(self, messages: Sequence[Any]) -> Rendered:
        """Render ``messages`` (OpenAI-style dicts) and append the generation prompt.

        Raises:
            MessageError: for an empty list or a malformed message (the message names the field).
        """
        if not isinstance(messages, Sequence) or isinstance(messages, str | bytes) or not messages:
            raise MessageError("messages must be a non-empty list", field="messages", value=messages)
        normalized = [normalize_message(m, i) for i, m in enumerate(messages)]
        token_ids: list[int] = []
        spans: list[tuple[int, int]] = []
        parts: list[tuple[PartSpan, ...]] = []
        for i, msg in enumerate(normalized):
            start = len(token_ids)
            mparts = []
            for kind, ids in self.message_parts(msg, i):
                mparts.append(PartSpan(kind, len(token_ids), len(token_ids) + len(ids)))
                token_ids.extend(ids)
            spans.append((start, len(token_ids)))
            parts.append(tuple(mparts))
        prompt_start = len(token_ids)
        token_ids.extend(self.prompt_ids)
        return Rendered(token_ids, spans, parts, prompt_start, normalized)

    def layout(self, messages: Sequence[Any], schedule: Mapping[str, Any] | Schedule | None = None) -> Layout:
        """Render and compile in one step (the schedule is validated against the messages)."""
        return self.layout_rendered(self.render(messages), schedule)

    def layout_rendered(self, rendered: Rendered, schedule: Mapping[str, Any] | Schedule | None = None) -> Layout:
        """:meth:`layout` of messages already rendered."""
        sched = parse_schedule(schedule, n_messages=len(rendered.spans))
        return Layout(rendered, sched, self.compile(rendered, sched))

    def compile(self, rendered: Rendered, schedule: Schedule) -> list[Item]:
        """Interleave ``schedule``'s events with the rendered tokens (operate-after order).

        Raises:
            ScheduleError: an id beyond the message list, or a text range beyond a message's content.
        """
        items, _ = self._compile(rendered, schedule)
        items.extend(rendered.token_ids[rendered.prompt_start:])
        return items

    def compile_session(self, rendered: Rendered, schedule: Schedule) -> SessionLayout:
        """``rendered`` (a whole trajectory) compiled once under ``schedule`` (its last request's),
        for every request of the session (see :class:`SessionLayout`).

        Raises:
            ScheduleError: as :meth:`compile`.
        """
        at: list[int] = []
        items, events = self._compile(rendered, schedule, at)
        ends, seen = [0], 0
        for n, (_, end) in enumerate(rendered.spans, start=1):
            seen += events.get(n - 1, 0)
            ends.append(end + seen)
        return SessionLayout(items, ends, rendered.token_ids[rendered.prompt_start:], at)

    def _compile(self, rendered: Rendered, schedule: Schedule, at: list[int] | None = None,
                 ) -> tuple[list[Item], dict[int, int]]:
        """The messages' tokens with ``schedule``'s events after their triggers (no generation
        prompt), and how many event items each trigger added (``at``: filled with where the event
        items lie, ascending)."""
        schedule.validate_against(len(rendered.spans))
        repositions = set(schedule.repositions)
        drops = dict(schedule.drops)
        items: list[Item] = []
        events: dict[int, int] = {}
        done = 0  # tokens copied so far: the spans are contiguous, so only events need a step each
        for i in sorted(drops.keys() | repositions):
            end = rendered.spans[i][1]
            items.extend(rendered.token_ids[done:end])
            done = end
            before = len(items)
            targets = drops.get(i)
            if targets:
                ranges = merge_ranges([r for d in targets for r in self._target_ranges(rendered, d, i)])
                if ranges:
                    items.append(Drop(ranges))
            if i in repositions:
                items.append(REPOSITION)
            events[i] = len(items) - before
            if at is not None:
                at.extend(range(before, len(items)))
        items.extend(rendered.token_ids[done:rendered.prompt_start])
        return items, events

    def _target_ranges(self, rendered: Rendered, target: DropTarget, trigger: int) -> list[tuple[int, int]]:
        m = target.message
        if target.kind is DropKind.MESSAGE:
            return [rendered.spans[m]]
        if target.kind is DropKind.THINKING:
            return [(p.start, p.end) for p in rendered.parts[m] if p.kind == "thinking"]
        content = rendered.messages[m]["content"]
        if target.end > len(content):
            raise ScheduleError(
                f"drop_rule[{trigger!r}]: text range [{target.start}, {target.end}) is beyond the "
                f"{len(content)} characters of message {m}'s content", field="drop_rule", value=target.end)
        part = next((p for p in rendered.parts[m] if p.kind == "content"), None)
        if part is None:
            return []
        # A token belongs to the range when its characters, leading whitespace aside, lie inside it.
        inside = []
        for j, (a, b) in enumerate(self._content_offsets(content)):
            while a < b - 1 and content[a].isspace():
                a += 1
            if target.start <= a and b <= target.end:
                inside.append(part.start + j)
        return [(t, t + 1) for t in inside]

    def _content_offsets(self, content: str) -> list[tuple[int, int]]:
        """Character range of every token of ``content`` (tokenized alone, as in rendering)."""
        enc = self.tokenizer(content, add_special_tokens=False, return_offsets_mapping=True)  # type: ignore[operator]
        offsets: list[tuple[int, int]] = [(int(a), int(b)) for a, b in enc["offset_mapping"]]
        if len(offsets) != len(self.encode_text(content)):
            raise MessageError("tokenizer offsets disagree with its encoding; text_drop is unavailable",
                               field="drop_rule", value=None)
        return offsets
