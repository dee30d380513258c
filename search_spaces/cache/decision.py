"""Decisions and their validation: every decision passes here before anyone sees it.

A cache decision is parsed with :func:`engine.parse_schedule` against the request's message count,
then checked to *extend* the previous decision: same entries at every earlier trigger, nothing
new at a trigger the previous request already covered, earlier repositions kept. A text decision
is a message list that must pass the engine's message checks. Violations raise
:class:`DecisionError` with a one-line message (fit to show a proposer). Nothing here decides.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from engine.errors import AKVError, show
from engine.schedule import SCHEDULE_KEYS, DropKind, Schedule, parse_extension, parse_schedule
from engine.template import normalize_message
from search_spaces.cache.request import PolicyKind, Request
from search_spaces.errors import DecisionError

_WIRE_KEYS = (*SCHEDULE_KEYS, "cache")


@dataclass(frozen=True)
class Decision:
    """A validated decision for one request.

    Attributes:
        kind: ``cache`` (``schedule`` is set) or ``text`` (``messages`` is set).
        n_messages: the length of the request's message list.
        schedule: the parsed cumulative cache schedule.
        messages: the rewritten message list of a text baseline.
        meta: how a text decision was made (threshold, summarizer, summarized ids, ...).
    """

    kind: PolicyKind
    n_messages: int
    schedule: Schedule | None = None
    messages: tuple[Mapping[str, Any], ...] | None = None
    meta: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        assert (self.schedule is not None) == (self.kind is PolicyKind.CACHE), "cache decisions carry a schedule"
        assert (self.messages is not None) == (self.kind is PolicyKind.TEXT), "text decisions carry messages"

    @property
    def wire(self) -> dict[str, Any]:
        """A fresh wire-format dict: ``{"drop_message", "reposition"}`` (or ``drop_rule``) for a cache
        decision, ``{"messages": [...], **meta}`` for a text decision."""
        if self.schedule is not None:
            return canonical_wire(self.schedule)
        assert self.messages is not None
        return {"messages": [copy.deepcopy(dict(m)) for m in self.messages], **copy.deepcopy(dict(self.meta))}


def canonical_wire(schedule: Schedule) -> dict[str, Any]:
    """The schedule as a wire dict that always has ``reposition`` and, unless it needs a
    ``drop_rule``, ``drop_message`` (ids sorted, triggers in order)."""
    wire = schedule.to_wire()
    out: dict[str, Any] = {}
    if "drop_rule" in wire:
        out["drop_rule"] = wire["drop_rule"]
    else:
        out["drop_message"] = wire.get("drop_message", {})
    out["reposition"] = wire.get("reposition", [])
    return out


def cache_decision(raw: Any, request: Request, previous: Schedule | None = None) -> Decision:
    """Validate a proposed cache decision for ``request`` (``previous``: ``request.previous``
    already parsed, when the caller has it).

    Raises:
        DecisionError: not a mapping, unknown keys, a wire-format violation, or a rewrite of the
            previous decision (the message names the trigger and ids).
    """
    if not isinstance(raw, Mapping):
        raise DecisionError(f"a cache decision must be a dict, got {type(raw).__name__}", field="decision")
    unknown = sorted(str(k) for k in raw if k not in _WIRE_KEYS)
    if unknown:
        raise DecisionError(f"unknown key {unknown[0]!r} in the decision (expected {', '.join(SCHEDULE_KEYS)})",
                            field="decision", value=unknown[0])
    try:
        schedule = parse_schedule(raw, n_messages=request.n)
    except AKVError as err:
        raise DecisionError(f"{err} (request with {request.n} messages)", field="decision") from err
    for trigger, targets in schedule.drops:
        for d in targets:
            if d.kind is DropKind.TEXT:
                size = len(normalize_message(request.messages[d.message], d.message)["content"])
                if d.end > size:
                    raise DecisionError(f"drop_rule[{str(trigger)!r}]: text range [{d.start}, {d.end}) is beyond "
                                        f"the {size} characters of message {d.message}", field="decision")
    if request.previous is not None:
        check_extends(request.previous, request.previous_messages, schedule, previous)
    return Decision(PolicyKind.CACHE, request.n, schedule=schedule)


def appended_decision(raw: Any, n: int, previous_raw: Any, previous: Decision) -> Decision | None:
    """:func:`cache_decision` of ``raw`` for a request of ``n`` messages in time proportional to
    what it adds, when it only appends to the previous request's decision (``previous_raw``, valid
    as ``previous``): see :func:`engine.schedule.parse_extension`. ``None`` otherwise: then
    :func:`cache_decision` gives the decision or the error."""
    if previous.schedule is None:
        return None
    schedule = parse_extension(raw, previous_raw, previous.schedule, previous.n_messages, n)
    return Decision(PolicyKind.CACHE, n, schedule=schedule) if schedule is not None else None


def check_extends(previous: Mapping[str, Any], previous_messages: int, schedule: Schedule,
                  parsed: Schedule | None = None) -> None:
    """Raise :class:`DecisionError` unless ``schedule`` keeps ``previous`` unchanged (``parsed``:
    ``previous`` already parsed, when the caller has it).

    ``previous_messages`` is the length of the previous request (0 when unknown: then the previous
    schedule's largest trigger stands for it). Triggers below it are history: the serving engine has
    processed those messages under the previous schedule, so changing them forces recomputation.
    """
    try:
        prev = parsed if parsed is not None else parse_schedule(previous)
    except AKVError as err:
        raise DecisionError(f"the previous decision is not a valid schedule: {err}", field="previous") from err
    horizon = previous_messages or max([t + 1 for t, _ in prev.drops] + [r + 1 for r in prev.repositions], default=0)
    # every earlier drop is kept (whatever its trigger), and none is added below the horizon
    changes = schedule.changes_before(prev, max([horizon] + [t + 1 for t, _ in prev.drops]))
    for trigger, (before, now) in changes.drops.items():
        if before:
            raise DecisionError(
                f"the decision rewrites the past: trigger {trigger} dropped {_ids(before)} before and "
                f"now drops {_ids(now)}", field="decision", value=trigger)
    for trigger, (_, now) in changes.drops.items():
        if trigger < horizon:
            raise DecisionError(
                f"the decision rewrites the past: it adds drops {_ids(now)} at trigger {trigger}, which an "
                f"earlier request (of {horizon} messages) already covered", field="decision", value=trigger)
    old = list(prev.repositions)
    now_r = [r for r in schedule.repositions if r < horizon]
    if now_r != old:
        raise DecisionError(f"the decision rewrites the past: repositions before message {horizon} were {old} "
                            f"and are now {now_r}", field="decision", value=now_r)


def _ids(targets: Sequence[Any]) -> str:
    return show([t.to_wire() for t in targets])


def text_decision(messages: Sequence[Mapping[str, Any]], meta: Mapping[str, Any], request: Request) -> Decision:
    """Validate a text baseline's rewritten message list.

    Raises:
        DecisionError: an empty list, a malformed message, or metadata that is not JSON.
    """
    if not messages:
        raise DecisionError("a text decision must keep at least one message", field="messages")
    try:
        for i, m in enumerate(messages):
            normalize_message(m, i)
        json.dumps(dict(meta))
    except AKVError as err:
        raise DecisionError(f"text decision: {err}", field="messages") from err
    except (TypeError, ValueError) as err:
        raise DecisionError(f"text decision metadata is not JSON: {err}", field="meta") from err
    frozen = tuple(MappingProxyType(copy.deepcopy(dict(m))) for m in messages)
    return Decision(PolicyKind.TEXT, request.n, messages=frozen, meta=MappingProxyType(copy.deepcopy(dict(meta))))
