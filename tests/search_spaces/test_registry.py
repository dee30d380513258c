"""The registry, parameter resolution, requests and decision validation."""

from __future__ import annotations

import pytest

from engine import AKVError, MessageError
from search_spaces import (
    DecisionError,
    Episode,
    ParameterError,
    PolicyError,
    Request,
    UnknownPolicyError,
    get_policy,
    policy_names,
    request_points,
)
from search_spaces.cache.decision import cache_decision
from tests.search_spaces.trajectories import build

NAMES = ("full", "rolling_drop", "thinking_drop", "scored_drop", "standard", "text_engineering", "trim")


def test_every_family_is_registered():
    assert set(NAMES) <= set(policy_names())
    for name in NAMES:
        p = get_policy(name)
        assert p.name == name
        assert p.kind == ("text" if name in ("standard", "text_engineering", "trim") else "cache")
        assert get_policy(name, **p.params).params == p.params  # resolved params round-trip


def test_unknown_policy_lists_valid_names():
    with pytest.raises(UnknownPolicyError) as err:
        get_policy("rolling")
    assert isinstance(err.value, AKVError) and isinstance(err.value, ValueError)
    for name in NAMES:
        assert name in str(err.value)


@pytest.mark.parametrize(("name", "params", "named"), [
    ("rolling_drop", {"keep": 3}, "keep"),
    ("rolling_drop", {"keep_tool_responses": -1}, "keep_tool_responses"),
    ("rolling_drop", {"keep_tool_responses": "12"}, "keep_tool_responses"),
    ("rolling_drop", {"keep_tool_responses": True}, "keep_tool_responses"),
    ("rolling_drop", {"target": "user"}, "target"),
    ("rolling_drop", {"trigger_tokens": 100, "target_tokens": 100}, "target_tokens"),
    ("thinking_drop", {"keep_turns": -2}, "keep_turns"),
    ("scored_drop", {"targets": "system"}, "targets"),
    ("scored_drop", {"w_magic": 1.0}, "w_magic"),
    ("standard", {"threshold": 100}, "threshold"),
    ("trim", {"target_ratio": 0.9}, "target_ratio"),
    ("full", {"k": 1}, "k"),
])
def test_bad_parameters_are_named(name, params, named):
    with pytest.raises(ParameterError) as err:
        get_policy(name, **params)
    assert repr(named) in str(err.value) and err.value.field == named


def test_program_needs_source():
    with pytest.raises(ParameterError, match="source"):
        get_policy("program")


def test_request_points():
    msgs = build(["call2", "user", "answer"], [False])  # 0 S, 1 U, A2 T3 T4, U5, A6
    assert request_points(msgs) == (2, 6)
    assert request_points(msgs[:5]) == (2, 5)


def test_request_checks_its_inputs():
    msgs = build(["call"], [False])
    with pytest.raises(MessageError, match="token_counts"):
        Request.of(msgs, [1, 2])
    with pytest.raises(MessageError, match=r"token_counts\[1\]"):
        Request.of(msgs, [1, -2, 3, 4])
    with pytest.raises(MessageError, match="role"):
        Request.of([{"role": "robot", "content": "x"}], [1])
    with pytest.raises(MessageError, match="cuts"):
        Episode.of(msgs, [1] * 4, cuts=[3, 2])
    r = Request.of(msgs, [1, 2, 3, 4])
    assert r.call_index == 1 and r.n == 4
    with pytest.raises(TypeError):
        r.messages[0]["role"] = "user"  # type: ignore[index]


def _req(n: int = 8, previous=None, previous_messages: int = 0) -> Request:
    msgs = build(["call"] * 3, [False])[:n]
    return Request.of(msgs, [5] * len(msgs), previous=previous, previous_messages=previous_messages)


@pytest.mark.parametrize(("raw", "match"), [
    ({"drop_message": {"3": [5]}}, "after its trigger"),
    ({"drop_message": {"3": [1], "5": [1]}}, "dropped twice"),
    ({"drop_message": {"9": [1]}}, "out of range"),
    ({"reposition": [5, 3]}, "strictly increasing"),
    ({"drop_message": {"3": [1]}, "junk": 1}, "unknown key 'junk'"),
    ([["3", [1]]], "must be a dict"),
    ({"drop_message": {"x": [1]}}, "not a message id"),
    ({"drop_rule": {"type": "text_drop", "drop_messages": {"3": [{"message": 1, "start": 0, "end": 999}]}}},
     "beyond the 57 characters of message 1"),
])
def test_invalid_decisions_are_refused(raw, match):
    with pytest.raises(DecisionError, match=match) as err:
        cache_decision(raw, _req())
    assert isinstance(err.value, PolicyError) and "\n" not in str(err.value)


@pytest.mark.parametrize(("previous", "prev_n", "raw", "match"), [
    ({"drop_message": {"3": [1]}}, 6, {"drop_message": {"3": [2]}}, "trigger 3 dropped"),
    ({"drop_message": {"3": [1]}}, 6, {"drop_message": {}}, "trigger 3 dropped"),
    ({"drop_message": {"3": [1]}}, 6, {"drop_message": {"3": [1], "5": [2]}}, "already covered"),
    ({"drop_message": {"3": [1]}}, 0, {"drop_message": {"2": [0], "3": [1]}}, "already covered"),
    ({"drop_message": {}, "reposition": [3]}, 6, {"drop_message": {}, "reposition": [4]}, "repositions"),
])
def test_rewriting_the_past_is_refused(previous, prev_n, raw, match):
    with pytest.raises(DecisionError, match=match):
        cache_decision(raw, _req(previous=previous, previous_messages=prev_n))


def test_text_and_thinking_drops_are_accepted():
    rule = [{"type": "thinking_drop", "drop_messages": {"4": [2]}},
            {"type": "text_drop", "drop_messages": {"5": [{"message": 1, "start": 0, "end": 10}]}}]
    d = cache_decision({"drop_rule": rule}, _req())
    assert d.wire == {"drop_rule": rule, "reposition": []}


def test_extending_the_past_is_accepted():
    d = cache_decision({"drop_message": {"3": [1], "6": [2]}, "reposition": [3, 7]},
                       _req(previous={"drop_message": {"3": [1]}, "reposition": [3]}, previous_messages=6))
    assert d.wire == {"drop_message": {"3": [1], "6": [2]}, "reposition": [3, 7]}
