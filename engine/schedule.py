"""The cache schedule: the AKV wire format parsed into one typed, validated object.

Wire format (top-level request fields, all optional; see docs/wire-format.md)::

    "drop_message": {"7": [3, 5]}     after message 7 is processed, messages 3 and 5 leave the KV
    "reposition":   [7, 12]           after message 7 (after its drops) compact positions; again after 12
    "drop_rule":    {"type": "message_drop",  "drop_messages": {"7": [3, 5]}}
                  | {"type": "thinking_drop", "drop_messages": {"7": [3]}}     reasoning parts only
                  | {"type": "text_drop",     "drop_messages": {"7": [{"message": 3, "start": 0, "end": 80}]}}
                    (a list of rules is accepted too; drop_rule is never combined with drop_message)
    "cache":        {"drop_message": ..., "reposition": ..., "drop_rule": ...}   the same, nested

Message ids are 0-based indices into the request's message list. The schedule is cumulative: a
request carries every event since the start of the history. This module does not know about
tokens; ``engine.layout`` turns a schedule plus messages into token-level events.
"""

from __future__ import annotations

import enum
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.errors import ScheduleError, check_int, show

SCHEDULE_KEYS = ("drop_message", "reposition", "drop_rule")


class DropKind(enum.Enum):
    """What part of a message a drop removes from the KV."""

    MESSAGE = "message"  # every token of the message
    THINKING = "thinking"  # the reasoning part of an assistant message
    TEXT = "text"  # the content tokens lying inside a character range of the content


@dataclass(frozen=True)
class DropTarget:
    """One thing to drop. ``start``/``end`` are character offsets into the content (TEXT only)."""

    message: int
    kind: DropKind = DropKind.MESSAGE
    start: int = 0
    end: int = 0

    @property
    def sort_key(self) -> tuple[int, str, int, int]:
        return (self.message, self.kind.value, self.start, self.end)

    def to_wire(self) -> int | dict[str, int]:
        if self.kind is DropKind.TEXT:
            return {"message": self.message, "start": self.start, "end": self.end}
        return self.message


@dataclass(frozen=True)
class Schedule:
    """A validated cumulative cache schedule.

    Attributes:
        drops: trigger message id -> what to drop after it, sorted by trigger.
        repositions: trigger message ids, strictly increasing.
    """

    drops: tuple[tuple[int, tuple[DropTarget, ...]], ...] = ()
    repositions: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        triggers = [t for t, _ in self.drops]
        assert triggers == sorted(set(triggers)), "drop triggers must be unique and sorted"

    @property
    def is_empty(self) -> bool:
        return not self.drops and not self.repositions

    def drops_at(self, trigger: int) -> tuple[DropTarget, ...]:
        for t, targets in self.drops:
            if t == trigger:
                return targets
        return ()

    def changes_before(self, previous: Schedule, covered: int) -> PastChanges:
        """How this schedule differs from ``previous`` before message ``covered`` (the messages a
        previous request held, which the engine has processed under ``previous``). A schedule may
        only *extend* its predecessor: the same drops at every trigger below ``covered``, no new
        ones there, the same repositions there. The server's sessions and the policy decision
        checks both ask this, and word the refusal each for its reader."""
        old = {t: ds for t, ds in previous.drops if t < covered}
        new = {t: ds for t, ds in self.drops if t < covered}
        triggers = tuple(sorted(t for t in old.keys() | new.keys() if old.get(t, ()) != new.get(t, ())))
        return PastChanges({t: (old.get(t, ()), new.get(t, ())) for t in triggers},
                           tuple(r for r in previous.repositions if r < covered),
                           tuple(r for r in self.repositions if r < covered))

    def to_wire(self) -> dict[str, Any]:
        """The schedule in the wire format (``drop_rule`` when it has non-message drops)."""
        out: dict[str, Any] = {}
        plain = all(d.kind is DropKind.MESSAGE for _, ds in self.drops for d in ds)
        if self.drops and plain:
            out["drop_message"] = {str(t): [d.message for d in ds] for t, ds in self.drops}
        elif self.drops:
            rules = []
            for kind, name in ((DropKind.MESSAGE, "message_drop"), (DropKind.THINKING, "thinking_drop"),
                               (DropKind.TEXT, "text_drop")):
                table = {str(t): [d.to_wire() for d in ds if d.kind is kind] for t, ds in self.drops}
                table = {t: v for t, v in table.items() if v}
                if table:
                    rules.append({"type": name, "drop_messages": table})
            out["drop_rule"] = rules[0] if len(rules) == 1 else rules
        if self.repositions:
            out["reposition"] = list(self.repositions)
        return out

    def validate_against(self, n_messages: int) -> None:
        """Check that every id lies within a message list of length ``n_messages``."""
        for t, targets in self.drops:
            if t >= n_messages:
                raise ScheduleError(
                    f"drop_message[{t!r}]: trigger {t} is out of range for {n_messages} messages",
                    field="drop_message", value=t)
            for d in targets:
                if d.message >= n_messages:
                    raise ScheduleError(
                        f"drop_message[{t!r}]: message id {d.message} is out of range for {n_messages} messages",
                        field="drop_message", value=d.message)
        for r in self.repositions:
            if r >= n_messages:
                raise ScheduleError(f"reposition: id {r} is out of range for {n_messages} messages",
                                    field="reposition", value=r)


@dataclass(frozen=True)
class PastChanges:
    """What :meth:`Schedule.changes_before` found.

    Attributes:
        drops: each trigger below ``covered`` whose targets differ -> (before, now), by trigger.
        repositions_before / repositions_now: the repositions below ``covered`` in each.
    """

    drops: Mapping[int, tuple[tuple[DropTarget, ...], tuple[DropTarget, ...]]]
    repositions_before: tuple[int, ...]
    repositions_now: tuple[int, ...]

    def __bool__(self) -> bool:
        return bool(self.drops) or self.repositions_before != self.repositions_now


EMPTY = Schedule()


def parse_schedule(body: Mapping[str, Any] | Schedule | None, n_messages: int | None = None) -> Schedule:
    """Parse the schedule fields of a request body into a :class:`Schedule`.

    Args:
        body: a request body (or any mapping holding the schedule keys, possibly under ``cache``),
            an already parsed :class:`Schedule`, or ``None`` for no cache operations.
        n_messages: when given, every id must be < n_messages.

    Raises:
        ScheduleError: naming the offending key and value, for any rule violation.
    """
    if body is None:
        return EMPTY
    if isinstance(body, Schedule):
        if n_messages is not None:
            body.validate_against(n_messages)
        return body
    if not isinstance(body, Mapping):
        raise ScheduleError(f"schedule must be an object, got {show(body)}", field="schedule", value=body)
    fields = _merge_cache_alias(body)
    drops: dict[int, list[DropTarget]] = {}
    if fields.get("drop_message") is not None and fields.get("drop_rule") is not None:
        raise ScheduleError("drop_rule cannot be combined with drop_message; send one of them",
                            field="drop_rule", value=fields["drop_rule"])
    if fields.get("drop_message") is not None:
        _parse_table(fields["drop_message"], "drop_message", DropKind.MESSAGE, drops)
    if fields.get("drop_rule") is not None:
        rules = fields["drop_rule"]
        rules = rules if isinstance(rules, list) else [rules]
        for i, rule in enumerate(rules):
            _parse_rule(rule, f"drop_rule[{i}]" if len(rules) > 1 else "drop_rule", drops)
    repositions = _parse_reposition(fields.get("reposition"))
    schedule = Schedule(
        drops=tuple((t, tuple(sorted(ds, key=lambda d: d.sort_key))) for t, ds in sorted(drops.items())),
        repositions=repositions,
    )
    _check_no_double_drop(schedule)
    if n_messages is not None:
        schedule.validate_against(n_messages)
    return schedule


def parse_extension(raw: Any, previous_raw: Any, previous: Schedule, horizon: int, n_messages: int) -> Schedule | None:
    """``parse_schedule(raw, n_messages)`` in time proportional to what ``raw`` adds, when it only
    appends to ``previous_raw`` (parsed as ``previous``): the same entries at every trigger of
    ``previous_raw``, new ones only at triggers >= ``horizon`` (the previous request's length), the
    same repositions followed by new ones >= ``horizon``. ``None`` for anything else (another
    layout, a text drop, an entry changed or added below the horizon, an invalid addition): parse
    that in full, and check it against the past, to get the result or the error.

    A schedule this returns equals the full parse's and extends ``previous`` (the tests check it
    against :func:`parse_schedule` and the decision checks on random sequences of decisions).
    """
    new, old = _plain_tables(raw), _plain_tables(previous_raw)
    if new is None or old is None or not n_messages >= horizon > max(
            [t for t, _ in previous.drops] + list(previous.repositions), default=-1):
        return None
    tables, repositions = new
    old_tables, old_repositions = old
    if (not _ints(repositions) or repositions[:len(old_repositions)] != old_repositions
            or old_tables.keys() - tables.keys()):
        return None
    delta: list[dict[str, Any]] = []
    kept_ids: list[tuple[set[int], Mapping[Any, Any]]] = []  # per kind: ids dropped before, the added entries
    for kind, table in tables.items():
        before = old_tables.get(kind, {})
        kept: dict[Any, Any] = {key: table.get(key) for key in before}
        if kept != before or not _ints(itertools.chain.from_iterable(kept.values())):  # (True == 1: see _ints)
            return None
        added = {key: ids for key, ids in table.items() if key not in before} if len(table) > len(before) else {}
        if any(not isinstance(key, str) or not _CANONICAL_ID.fullmatch(key) or int(key) < horizon for key in added):
            return None
        if added:
            delta.append({"type": kind.value + "_drop", "drop_messages": added})
            kept_ids.append((set(itertools.chain.from_iterable(kept.values())), added))
    added_repositions = repositions[len(old_repositions):]
    if any(r < horizon for r in added_repositions):
        return None
    try:
        extra = parse_schedule({"drop_rule": delta, "reposition": added_repositions} if delta
                               else {"reposition": added_repositions}, n_messages)
    except ScheduleError:
        return None
    if any(before & set(itertools.chain.from_iterable(added.values())) for before, added in kept_ids):
        return None  # a message dropped twice (the added ids are valid ints: they parsed)
    return Schedule(previous.drops + extra.drops, previous.repositions + extra.repositions)


def _ints(values: Any) -> bool:
    """Whether every value is an int (not a bool: ``True == 1``, and a full parse refuses ``True``)."""
    return set(map(type, values)) <= {int}


def _plain_tables(raw: Any) -> tuple[dict[DropKind, Mapping[Any, Any]], list[Any]] | None:
    """A wire schedule's drop tables per kind (message and reasoning drops only, each kind in one
    table) and its reposition list; ``None`` for any other layout."""
    if not isinstance(raw, Mapping) or raw.keys() - {"drop_message", "drop_rule", "reposition"}:
        return None
    message, rule, reposition = raw.get("drop_message"), raw.get("drop_rule"), raw.get("reposition")
    if (message is not None and rule is not None) or not isinstance(reposition, list | None):
        return None
    tables: dict[DropKind, Mapping[Any, Any]] = {}
    if message is not None:
        tables[DropKind.MESSAGE] = message
    for r in rule if isinstance(rule, list) else [] if rule is None else [rule]:
        kind = _RULE_KINDS.get(r["type"]) if isinstance(r, Mapping) and isinstance(r.get("type"), str) else None
        if kind is None or kind is DropKind.TEXT or kind in tables or r.keys() != {"type", "drop_messages"}:
            return None
        tables[kind] = r["drop_messages"]
    if any(not isinstance(t, Mapping) for t in tables.values()):
        return None
    return {kind: t for kind, t in tables.items() if t}, list(reposition or [])


def _merge_cache_alias(body: Mapping[str, Any]) -> dict[str, Any]:
    fields = {k: body.get(k) for k in SCHEDULE_KEYS}
    nested = body.get("cache")
    if nested is None:
        return fields
    if not isinstance(nested, Mapping):
        raise ScheduleError(f"cache must be an object, got {show(nested)}", field="cache", value=nested)
    unknown = sorted(set(nested) - set(SCHEDULE_KEYS))
    if unknown:
        raise ScheduleError(f"cache: unknown key {unknown[0]!r} (expected one of {', '.join(SCHEDULE_KEYS)})",
                            field=f"cache.{unknown[0]}", value=unknown[0])
    for key in SCHEDULE_KEYS:
        if nested.get(key) is None:
            continue
        if fields[key] is not None and fields[key] != nested[key]:
            raise ScheduleError(f"{key} is given both at the top level and in cache, with different values",
                                field=f"cache.{key}", value=nested[key])
        fields[key] = nested[key]
    return fields


_CANONICAL_ID = re.compile(r"0|[1-9][0-9]{0,17}")


def _parse_trigger(key: Any, where: str) -> int:
    if isinstance(key, str):
        # Only the canonical decimal form: " 3", "03", "+3" and non-ASCII digits ("\u0663") would
        # otherwise alias "3" and hide a caller's mistake; 18 digits bound the conversion.
        if not _CANONICAL_ID.fullmatch(key):
            raise ScheduleError(f"{where}: trigger key {show(key)} is not a message id (a decimal integer "
                                "without sign, spaces or leading zeros)", field=where, value=show(key))
        key = int(key)
    trigger = check_int(key, where)
    if trigger < 0:
        raise ScheduleError(f"{where}: trigger {trigger} is negative", field=where, value=trigger)
    return trigger


def _parse_table(table: Any, where: str, kind: DropKind, out: dict[int, list[DropTarget]]) -> None:
    if not isinstance(table, Mapping):
        raise ScheduleError(f"{where} must be an object of trigger -> ids, got {show(table)}",
                            field=where, value=table)
    for key, ids in table.items():
        trigger = _parse_trigger(key, where)
        if not isinstance(ids, list | tuple):
            raise ScheduleError(f"{where}[{key!r}] must be a list of message ids, got {show(ids)}",
                                field=f"{where}.{key}", value=ids)
        for raw in ids:
            target = _parse_target(raw, kind, f"{where}.{key}")
            if target.message > trigger:
                raise ScheduleError(
                    f"{where}[{key!r}]: message {target.message} comes after its trigger {trigger} "
                    "(dropped ids must be <= trigger)", field=f"{where}.{key}", value=target.message)
            out.setdefault(trigger, []).append(target)


def _parse_target(raw: Any, kind: DropKind, where: str) -> DropTarget:
    if kind is not DropKind.TEXT:
        msg = check_int(raw, where)
        if msg < 0:
            raise ScheduleError(f"{where}: message id {msg} is negative", field=where, value=msg)
        return DropTarget(msg, kind)
    if not isinstance(raw, Mapping) or set(raw) != {"message", "start", "end"}:
        raise ScheduleError(f"{where}: a text_drop target is {{'message', 'start', 'end'}}, got {show(raw)}",
                            field=where, value=raw)
    msg, start, end = (check_int(raw[k], f"{where}.{k}") for k in ("message", "start", "end"))
    if msg < 0 or start < 0 or end <= start:
        raise ScheduleError(f"{where}: bad text range {show(dict(raw))} (need message >= 0, 0 <= start < end)",
                            field=where, value=raw)
    return DropTarget(msg, kind, start, end)


_RULE_KINDS = {"message_drop": DropKind.MESSAGE, "thinking_drop": DropKind.THINKING, "text_drop": DropKind.TEXT}


def _parse_rule(rule: Any, where: str, out: dict[int, list[DropTarget]]) -> None:
    if not isinstance(rule, Mapping):
        raise ScheduleError(f"{where} must be an object, got {show(rule)}", field=where, value=rule)
    rule_type = rule.get("type")
    kind = _RULE_KINDS.get(rule_type) if isinstance(rule_type, str) else None  # a list or dict is unhashable
    if kind is None:
        raise ScheduleError(f"{where}.type must be one of {', '.join(_RULE_KINDS)}, got {show(rule.get('type'))}",
                            field=f"{where}.type", value=rule.get("type"))
    extra = sorted(set(rule) - {"type", "drop_messages"})
    if extra:
        raise ScheduleError(f"{where}: unknown key {extra[0]!r}", field=f"{where}.{extra[0]}", value=extra[0])
    if "drop_messages" not in rule:
        raise ScheduleError(f"{where}: missing drop_messages", field=f"{where}.drop_messages", value=None)
    _parse_table(rule["drop_messages"], f"{where}.drop_messages", kind, out)


def _parse_reposition(raw: Any) -> tuple[int, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple):
        raise ScheduleError(f"reposition must be a list of message ids, got {show(raw)}",
                            field="reposition", value=raw)
    ids = [check_int(x, "reposition") for x in raw]
    for prev, cur in itertools.pairwise(ids):
        if cur <= prev:
            raise ScheduleError(f"reposition must be strictly increasing: {cur} follows {prev}",
                                field="reposition", value=cur)
    if ids and ids[0] < 0:
        raise ScheduleError(f"reposition: id {ids[0]} is negative", field="reposition", value=ids[0])
    return tuple(ids)


def _check_no_double_drop(schedule: Schedule) -> None:
    seen: dict[tuple[int, DropKind], int] = {}
    text_ranges: dict[int, list[tuple[int, int, int]]] = {}
    for trigger, targets in schedule.drops:
        for d in targets:
            if d.kind is DropKind.TEXT:
                for s, e, t in text_ranges.get(d.message, []):
                    if d.start < e and s < d.end:
                        raise ScheduleError(
                            f"drop_rule: text range [{d.start}, {d.end}) of message {d.message} at trigger "
                            f"{trigger} overlaps [{s}, {e}) dropped at trigger {t}",
                            field="drop_rule", value=d.message)
                text_ranges.setdefault(d.message, []).append((d.start, d.end, trigger))
                continue
            key = (d.message, d.kind)
            if key in seen:
                what = "message" if d.kind is DropKind.MESSAGE else "reasoning of message"
                raise ScheduleError(
                    f"drop_message[{str(trigger)!r}]: {what} {d.message} is dropped twice "
                    f"(already at trigger {seen[key]})", field="drop_message", value=d.message)
            seen[key] = trigger
