"""Built-in cache families on hand-made trajectories: exact expected schedules, worked out by hand."""

from __future__ import annotations

import pytest

from search_spaces import get_policy
from tests.search_spaces.trajectories import build

# build(["call"] * 5): 0 system, 1 user, then assistant/tool pairs: A2 T3 A4 T5 A6 T7 A8 T9 A10 T11
FIVE = build(["call"] * 5, [False])
TENS = [10] * len(FIVE)


def drops(policy_name: str, msgs=FIVE, counts=TENS, **params):
    return get_policy(policy_name, **params).decide(msgs, token_counts=counts)


def test_expert_semantics_k2():
    # the (K+1)-th newer tool response drops the oldest kept one; the trigger is that newer response
    assert drops("rolling_drop", keep_tool_responses=2) == {
        "drop_message": {"7": [3], "9": [5], "11": [7]}, "reposition": []}


def test_expert_default_is_k12():
    msgs = build(["call"] * 14, [True])  # tool responses at 3, 5, ..., 29 (14 of them)
    counts = [7] * len(msgs)
    p = get_policy("rolling_drop")
    assert p.params["keep_tool_responses"] == 12 and p.kind == "cache" and p.name == "rolling_drop"
    assert p.decide(msgs[:26], token_counts=counts[:26]) == {"drop_message": {}, "reposition": []}  # 12 responses
    assert p.decide(msgs, token_counts=counts) == {"drop_message": {"27": [3], "29": [5]}, "reposition": []}


def test_parallel_tool_calls_roll_per_response():
    msgs = build(["call2", "call"], [False])  # A2 T3 T4 A5 T6
    assert drops("rolling_drop", msgs, [5] * len(msgs), keep_tool_responses=2)["drop_message"] == {"6": [3]}


@pytest.mark.parametrize(("params", "expected"), [
    # an assistant turn leaves with the last response of its batch (AKV's meaning of target)
    ({"target": "assistant", "keep_tool_responses": 1}, {"5": [2], "7": [4], "9": [6], "11": [8]}),
    ({"target": "both", "keep_tool_responses": 1}, {"5": [2, 3], "7": [4, 5], "9": [6, 7], "11": [8, 9]}),
    # ours: assistant turns in a window of their own newest K
    ({"target": "assistant_newest", "keep_tool_responses": 1}, {"4": [2], "6": [4], "8": [6], "10": [8]}),
    ({"target": "both_newest", "keep_tool_responses": 1},
     {"4": [2], "5": [3], "6": [4], "7": [5], "8": [6], "9": [7], "10": [8], "11": [9]}),
    ({"keep_tool_responses": 1, "drop_batch": 2}, {"7": [3, 5], "11": [7, 9]}),
    ({"keep_tool_responses": 1, "trigger": "calls", "every_calls": 2}, {"5": [3], "9": [5, 7]}),
    ({"keep_tool_responses": 1, "trigger": "calls", "first_call": 3, "every_calls": 0}, {"7": [3, 5]}),
    # visible prompt at call ends 3, 5, 7 = 40, 60, 80 > 75: drop the oldest until <= 50 (K ignored)
    # -> 3, 5, 7; at 11: 120 - 30 = 90 > 75: 9 and 11 go (70, still above 50: nothing left to drop)
    ({"keep_tool_responses": 1, "trigger": "tokens", "trigger_tokens": 75, "target_tokens": 50},
     {"7": [3, 5, 7], "11": [9, 11]}),
    # without a target: all but the newest K at 7 (80), 9 (100 - 20) and 11 (120 - 30)
    ({"keep_tool_responses": 1, "trigger": "tokens", "trigger_tokens": 75}, {"7": [3, 5], "9": [7], "11": [9]}),
    ({"keep_tool_responses": 1, "trigger": "response_count", "trigger_responses": 3}, {"7": [3, 5], "11": [7, 9]}),
    ({"keep_tool_responses": 0}, {"3": [3], "5": [5], "7": [7], "9": [9], "11": [11]}),
])
def test_rolling_generalisations(params, expected):
    assert drops("rolling_drop", **params)["drop_message"] == expected


@pytest.mark.parametrize(("params", "expected"), [
    ({"reposition": "calls", "reposition_start": 0, "reposition_every": 2}, [5, 9]),
    ({"reposition": "calls", "reposition_start": 3, "reposition_every": 1}, [7, 9, 11]),
    ({"reposition": "calls", "reposition_start": 1, "reposition_every": 0}, [3]),  # at call 1, nothing dropped yet
    # position at call ends 7, 9, 11: 80, 100 - 20, 120 - 30, each past 65 with new drops
    ({"reposition": "tokens", "reposition_tokens": 65}, [7, 9, 11]),
    ({"reposition": "never"}, []),
])
def test_rolling_reposition(params, expected):
    d = drops("rolling_drop", keep_tool_responses=1, **params)
    assert d["drop_message"] == {"5": [3], "7": [5], "9": [7], "11": [9]}
    assert d["reposition"] == expected


def test_assistant_target_waits_for_the_whole_batch():
    # A2 T3 T4 | A5 T6 | U7 | A8 (answer, no call) | U9 | A10 T11: with K = 2, T3 leaves at T6 and T4 at T11,
    # so A2 leaves at 11; A8 (no tool call) leaves with A10's batch, which never expires here
    msgs = build(["call2", "call", "user", "answer", "user", "call"], [True])
    d = drops("rolling_drop", msgs, [5] * len(msgs), keep_tool_responses=2, target="both")
    assert d["drop_message"] == {"6": [3], "11": [2, 4]}
    d = drops("rolling_drop", msgs, [5] * len(msgs), keep_tool_responses=1, target="assistant")
    assert d["drop_message"] == {"6": [2], "11": [5]}


@pytest.mark.parametrize(("thinking", "params", "expected"), [
    ([True], {}, {"4": [2], "6": [4], "8": [6]}),
    ([True], {"keep_turns": 0}, {"2": [2], "4": [4], "6": [6], "8": [8]}),
    ([True], {"drop_batch": 2}, {"6": [2, 4]}),
    ([True, False], {}, {"4": [2], "8": [6]}),
    ([True], {"keep_turns": 3}, {"8": [2]}),
])
def test_thinking_drop(thinking, params, expected):
    msgs = build(["call"] * 4, thinking)  # A2 T3 A4 T5 A6 T7 A8 T9
    d = drops("thinking_drop", msgs, [9] * len(msgs), **params)
    assert d == {"drop_rule": {"type": "thinking_drop", "drop_messages": expected}, "reposition": []}


def test_thinking_drop_without_reasoning_is_empty():
    msgs = build(["call"] * 4, [False])
    assert drops("thinking_drop", msgs, [9] * len(msgs)) == {"drop_message": {}, "reposition": []}


def test_full_keeps_everything():
    assert drops("full") == {"drop_message": {}, "reposition": []}
    assert get_policy("full").params == {}


# ---- scored_drop -------------------------------------------------------------------------------
HUNDREDS = [10, 10] + [100] * (len(FIVE) - 2)


def scored(counts=HUNDREDS, msgs=FIVE, relevance=None, **params):
    p = get_policy("scored_drop", **params)
    return p.decide(msgs, token_counts=counts, relevance=relevance)["drop_message"]


def test_scored_recency_only_drops_oldest_tools_and_respects_protection():
    # live passes 500 at message 6 (520); the newest two messages are protected, so only tool 3 is
    # eligible; at 7 (520 again) only 5; at 8 nothing (7 is protected); at 9 tool 7; at 11 tool 9
    out = scored(budget_tokens=500, target_ratio=0.6, protect_last=2, w_cost=0.0, w_reference=0.0)
    assert out == {"6": [3], "7": [5], "9": [7], "11": [9]}
    dropped = [i for ids in out.values() for i in ids]
    assert all(FIVE[i]["role"] == "tool" for i in dropped)


def test_scored_targets_any_never_touches_system_or_task():
    out = scored(budget_tokens=150, target_ratio=0.1, protect_last=0, targets="any", w_cost=0.0, w_reference=0.0)
    dropped = {i for ids in out.values() for i in ids}
    assert 0 not in dropped and 1 not in dropped
    assert dropped == set(range(2, len(FIVE)))  # everything else goes, each message once


def test_scored_reference_keeps_messages_that_later_messages_mention():
    msgs = build(["call"] * 3, [False])  # A2 T3 A4 T5 A6 T7
    msgs.append({"role": "user", "content": "What was status code H07 about?"})  # mentions T3's code "H07"
    counts = [10, 10] + [100] * (len(msgs) - 2)
    # first over budget at message 8 (720 > 650); one drop brings it to 620 <= 624
    base = {"budget_tokens": 650, "target_ratio": 0.96, "protect_last": 1, "w_cost": 0.0}
    plain = scored(counts, msgs, w_reference=0.0, **base)
    ref = scored(counts, msgs, w_reference=50.0, **base)
    assert plain == {"8": [3]}  # recency alone: the oldest tool response goes
    assert ref == {"8": [7]}  # T3 (mentioned by message 8) and T5 (shares names with T7) stay; T7 goes


def test_scored_intent_uses_relevance():
    relevance = [1.0, 1.0] + [0.0] * (len(FIVE) - 2)
    relevance[3] = 0.9  # T3 is about the task
    # first over budget at message 8 (720 > 650) with tools 3 and 5 eligible; one drop suffices
    base = {"budget_tokens": 650, "target_ratio": 0.96, "protect_last": 2, "w_cost": 0.0, "w_reference": 0.0}
    assert scored(HUNDREDS, FIVE, relevance, **base)["8"] == [3]
    assert scored(HUNDREDS, FIVE, relevance, w_intent=10.0, **base)["8"] == [5]
    assert get_policy("scored_drop", w_intent=1.0).needs_relevance
    assert get_policy("scored_drop", m_intent_pressure=0.5).needs_relevance
    assert not get_policy("scored_drop").needs_relevance


def test_scored_workload_modifier_can_flip_the_order():
    # first over budget at message 7 (620 > 600), tools 3 and 5 eligible, one drop suffices (520 <= 522)
    base = {"budget_tokens": 600, "target_ratio": 0.87, "protect_last": 1, "w_cost": 0.0, "w_reference": 0.0}
    assert scored(**base)["7"] == [3]  # oldest first
    # pressure = live / budget > 1 when dropping: weight 1 - 3 * pressure < 0, so the newest goes first
    assert scored(m_recency_pressure=-3.0, **base)["7"] == [5]


def test_scored_reposition_when_positions_pass_threshold():
    d = get_policy("scored_drop", budget_tokens=500, target_ratio=0.6, protect_last=2, reposition_tokens=650,
                   ).decide(FIVE, token_counts=HUNDREDS)
    # drops at 6, 7, 9, 11; positions pass 650 at 8 (720), at 10 (720 again after compacting to 520)
    # and at 11 (720, after compacting to 620)
    assert d["drop_message"] == {"6": [3], "7": [5], "9": [7], "11": [9]}
    assert d["reposition"] == [8, 10, 11]
