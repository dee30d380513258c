"""The wire-format parser: every rule, hostile inputs, and round trips (hypothesis)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import DropKind, Schedule, ScheduleError, parse_schedule


def test_drop_message_and_reposition_parse():
    s = parse_schedule({"drop_message": {"7": [3, 5], "12": [9]}, "reposition": [7, 12]}, n_messages=13)
    assert [t for t, _ in s.drops] == [7, 12]
    assert [d.message for d in s.drops_at(7)] == [3, 5]
    assert s.repositions == (7, 12)
    assert s.to_wire() == {"drop_message": {"7": [3, 5], "12": [9]}, "reposition": [7, 12]}


def test_cache_alias_is_the_same_thing():
    top = parse_schedule({"drop_message": {"4": [2]}, "reposition": [4]})
    nested = parse_schedule({"cache": {"drop_message": {"4": [2]}, "reposition": [4]}})
    assert top == nested


def test_drop_rules():
    s = parse_schedule({"drop_rule": [
        {"type": "thinking_drop", "drop_messages": {"5": [2]}},
        {"type": "message_drop", "drop_messages": {"5": [3]}},
        {"type": "text_drop", "drop_messages": {"6": [{"message": 4, "start": 0, "end": 10}]}},
    ]})
    kinds = {(d.message, d.kind) for _, ds in s.drops for d in ds}
    assert kinds == {(2, DropKind.THINKING), (3, DropKind.MESSAGE), (4, DropKind.TEXT)}
    assert parse_schedule(s.to_wire()) == s


@pytest.mark.parametrize(
    ("body", "field", "needle"),
    [
        ({"drop_message": {"3": [5]}}, "drop_message.3", "after its trigger"),
        ({"drop_message": {"x": [1]}}, "drop_message", "'x'"),
        ({"drop_message": {"3": "1"}}, "drop_message.3", "list"),
        ({"drop_message": {"3": [True]}}, "drop_message.3", "True"),
        ({"drop_message": {"3": [1.5]}}, "drop_message.3", "1.5"),
        ({"drop_message": {"3": [-1]}}, "drop_message.3", "-1"),
        ({"drop_message": {"3": [1], "4": [1]}}, "drop_message", "twice"),
        ({"reposition": [5, 5]}, "reposition", "strictly increasing"),
        ({"reposition": [6, 2]}, "reposition", "strictly increasing"),
        ({"reposition": "7"}, "reposition", "list"),
        ({"drop_message": {"3": [1]}, "drop_rule": {"type": "message_drop", "drop_messages": {}}},
         "drop_rule", "cannot be combined"),
        ({"drop_rule": {"type": "magic", "drop_messages": {}}}, "drop_rule.type", "magic"),
        ({"drop_rule": {"type": "message_drop"}}, "drop_rule.drop_messages", "missing"),
        ({"drop_rule": {"type": "text_drop", "drop_messages": {"3": [{"message": 1, "start": 5, "end": 2}]}}},
         "drop_rule.drop_messages.3", "bad text range"),
        ({"cache": {"drop_message": {"2": [1]}, "evict": 1}}, "cache.evict", "unknown key"),
        ({"cache": {"reposition": [3]}, "reposition": [4]}, "cache.reposition", "both"),
        ({"cache": 5}, "cache", "object"),
    ],
)
def test_violations_name_the_key_and_value(body, field, needle):
    with pytest.raises(ScheduleError) as err:
        parse_schedule(body)
    assert err.value.field == field
    assert needle in str(err.value)
    assert isinstance(err.value, ValueError)


def test_ids_must_lie_within_the_message_list():
    with pytest.raises(ScheduleError, match="out of range for 5 messages") as err:
        parse_schedule({"drop_message": {"7": [3]}}, n_messages=5)
    assert err.value.value == 7
    with pytest.raises(ScheduleError, match="reposition: id 9"):
        parse_schedule({"reposition": [9]}, n_messages=5)


def test_empty_and_none():
    assert parse_schedule(None).is_empty
    assert parse_schedule({}).is_empty
    assert parse_schedule({"drop_message": None, "reposition": None}).is_empty


@st.composite
def valid_schedules(draw):
    n = draw(st.integers(1, 30))
    triggers = draw(st.lists(st.integers(0, n - 1), unique=True, max_size=8))
    free = list(range(n))
    drops = {}
    for t in sorted(triggers):
        choices = [m for m in free if m <= t]
        ids = draw(st.lists(st.sampled_from(choices), unique=True, max_size=4)) if choices else []
        if ids:
            drops[str(t)] = ids
            free = [m for m in free if m not in ids]
    repos = sorted(draw(st.lists(st.integers(0, n - 1), unique=True, max_size=5)))
    return n, {"drop_message": drops, "reposition": repos}


@settings(max_examples=200, deadline=None)
@given(valid_schedules())
def test_valid_schedules_round_trip(case):
    n, body = case
    s = parse_schedule(body, n_messages=n)
    again = parse_schedule(s.to_wire(), n_messages=n)
    assert again == s
    assert sum(len(ds) for _, ds in s.drops) == sum(len(v) for v in body["drop_message"].values())


@settings(max_examples=200, deadline=None)
@given(valid_schedules(), st.integers(0, 40))
def test_dropping_after_the_trigger_is_always_refused(case, extra):
    n, body = case
    trigger = n - 1
    body = {"drop_message": {str(trigger): [trigger + 1 + extra]}}
    with pytest.raises(ScheduleError, match="after its trigger"):
        parse_schedule(body)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                    max_leaves=8))
def test_garbage_never_escapes_as_another_error(junk):
    for key in ("drop_message", "reposition", "drop_rule", "cache"):
        with contextlib.suppress(ScheduleError):
            parse_schedule({key: junk})


def test_schedule_object_passes_through():
    s = Schedule(repositions=(1,))
    assert parse_schedule(s) is s
