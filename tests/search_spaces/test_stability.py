"""Property tests: every cache family is cumulative and stable; text baselines extend their past.

Stable means: the decision for ``messages[:m]`` restricted to triggers below ``n`` equals the
decision for ``messages[:n]`` (the serving engine keys its cache on event histories, so a schedule
that rewrites the past forces recomputation).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import parse_schedule
from search_spaces import get_policy
from tests.search_spaces.trajectories import trajectories

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PARAMS: dict[str, Any] = {
    "full": st.just({}),
    "rolling_drop": st.fixed_dictionaries({
        "keep_tool_responses": st.integers(0, 4),
        "target": st.sampled_from(["tool", "assistant_newest", "both_newest"]),
        "trigger": st.sampled_from(["responses", "calls", "tokens", "response_count"]),
        "drop_batch": st.integers(1, 3),
        "first_call": st.integers(1, 3),
        "every_calls": st.integers(0, 3),
        "trigger_tokens": st.integers(200, 1500),
        "trigger_responses": st.integers(5, 8),
        "reposition": st.sampled_from(["never", "calls", "tokens"]),
        "reposition_start": st.integers(1, 3),
        "reposition_every": st.integers(0, 3),
        "reposition_tokens": st.integers(100, 2000),
        "target_tokens": st.integers(0, 199),
    }).map(lambda p: {**p, "target_tokens": 0} if p["trigger"] == "responses" else p)
    | st.fixed_dictionaries({  # assistant turns leave with their batch: rolling on arrival only
        "keep_tool_responses": st.integers(0, 4),
        "target": st.sampled_from(["assistant", "both"]),
        "drop_batch": st.integers(1, 3),
        "reposition": st.sampled_from(["never", "calls", "tokens"]),
        "reposition_tokens": st.integers(100, 2000),
    }),
    "thinking_drop": st.fixed_dictionaries({"keep_turns": st.integers(0, 3), "drop_batch": st.integers(1, 3)}),
    "scored_drop": st.fixed_dictionaries({
        "budget_tokens": st.integers(100, 1500),
        "target_ratio": st.floats(0.1, 0.95),
        "protect_last": st.integers(0, 4),
        "targets": st.sampled_from(["tool", "tool_assistant", "any"]),
        "w_recency": st.floats(-2, 2),
        "w_cost": st.floats(-2, 2),
        "w_reference": st.floats(-2, 2),
        "w_intent": st.floats(-2, 2),
        "m_recency_pressure": st.floats(-1, 1),
        "m_reference_tool_rate": st.floats(-1, 1),
        "m_cost_session": st.floats(-1, 1),
        "reposition_tokens": st.integers(0, 2000),
    }),
}


def _restrict(wire: dict[str, Any], n: int) -> Any:
    s = parse_schedule(wire)
    return ([(t, ds) for t, ds in s.drops if t < n], [r for r in s.repositions if r < n])


def _check_stable(name: str, params: dict[str, Any], traj: Any, data: Any) -> None:
    msgs, counts = traj
    relevance = [((7 * i) % 10) / 10 for i in range(len(msgs))]
    policy = get_policy(name, **params)
    whole = policy.decide(msgs, token_counts=counts, relevance=relevance)
    n = data.draw(st.integers(1, len(msgs)), label="n")
    part = policy.decide(msgs[:n], token_counts=counts[:n], relevance=relevance[:n])
    assert _restrict(whole, n) == _restrict(part, n)
    # the same through the episode runner, which checks every turn against the previous one
    decisions = policy.run_episode(msgs, token_counts=counts, relevance=relevance)
    if decisions:
        assert decisions[-1].wire == policy.decide(msgs[:decisions[-1].n_messages],
                                                   token_counts=counts[:decisions[-1].n_messages],
                                                   relevance=relevance[:decisions[-1].n_messages])


@FAST
@given(traj=trajectories(), params=PARAMS["rolling_drop"], data=st.data())
def test_rolling_drop_is_stable(traj, params, data):
    _check_stable("rolling_drop", params, traj, data)


@FAST
@given(traj=trajectories(), params=PARAMS["thinking_drop"], data=st.data())
def test_thinking_drop_is_stable(traj, params, data):
    _check_stable("thinking_drop", params, traj, data)


@FAST
@given(traj=trajectories(), params=PARAMS["scored_drop"], data=st.data())
def test_scored_drop_is_stable(traj, params, data):
    _check_stable("scored_drop", params, traj, data)


@FAST
@given(traj=trajectories(), data=st.data())
def test_full_is_stable(traj, data):
    _check_stable("full", {}, traj, data)


@FAST
@given(traj=trajectories(), params=PARAMS["scored_drop"])
def test_scored_drop_keeps_live_kv_within_target_when_it_can(traj, params):
    msgs, counts = traj
    p = get_policy("scored_drop", **params)
    s = parse_schedule(p.decide(msgs, token_counts=counts, relevance=[0.5] * len(msgs)), n_messages=len(msgs))
    first_user = next(i for i, m in enumerate(msgs) if m["role"] == "user")
    dropped = {d.message for _, ds in s.drops for d in ds}
    assert 0 not in dropped and first_user not in dropped
    target = int(params["budget_tokens"] * params["target_ratio"])
    gone = set()
    for t, ds in s.drops:
        gone |= {d.message for d in ds}
        live = sum(c for i, c in enumerate(counts[: t + 1]) if i not in gone)
        if live > target:  # then nothing eligible was left at t
            newest = t - params["protect_last"]
            roles = {"tool": ("tool",), "tool_assistant": ("tool", "assistant"),
                     "any": ("tool", "assistant", "user")}[params["targets"]]
            left = [i for i in range(newest + 1) if i not in gone and i != first_user
                    and msgs[i]["role"] in roles]
            assert not left


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traj=trajectories(max_steps=16), name=st.sampled_from(["standard", "text_engineering", "trim"]),
       window=st.integers(200, 3000), keep=st.integers(1, 3), data=st.data())
def test_text_baselines_extend_their_past(traj, name, window, keep, data):
    msgs, counts = traj
    p = get_policy(name, window=window, keep_rounds=keep)
    m = len(msgs)
    n = data.draw(st.integers(1, m), label="n")
    later, earlier = p.decide(msgs, token_counts=counts), p.decide(msgs[:n], token_counts=counts[:n])
    old_events = [e for e in later["events"] if e["trigger"] < n]
    assert old_events == earlier["events"]
    if len(old_events) == len(later["events"]):  # nothing new since turn n: the text only grew
        assert later["messages"][: len(earlier["messages"])] == earlier["messages"]
    for e in later["events"]:
        ids = e.get("summarized_ids") or e.get("removed_ids")
        assert ids and ids == list(range(ids[0], ids[-1] + 1))
    head = later["first_edited"]
    if head is not None:
        kept = later["messages"][head + (1 if name != "trim" else 0):]
        assert not kept or kept[0]["role"] in ("assistant", "user")  # tool messages keep their calls
