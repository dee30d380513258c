"""``read_drop``, the hand rule: a hand-worked schedule, and any trajectory against a direct
reference that reads the raw messages (no request features)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from search_spaces import get_policy
from tests.search_spaces.trajectories import trajectories


def _call(cid: str, name: str, arg: str) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps({"path": arg})}}


# 0 system, 1 user, 2 read a, 3 its 300-token result, 4 read b, 5 its 50-token result,
# 6 read a again, 7 its 300-token result (supersedes 3), 8 the answer
MSGS = [{"role": "system", "content": "tools"}, {"role": "user", "content": "task"},
        {"role": "assistant", "content": "", "tool_calls": [_call("c0", "read_file", "a")]},
        {"role": "tool", "tool_call_id": "c0", "name": "read_file", "content": "A"},
        {"role": "assistant", "content": "", "tool_calls": [_call("c1", "read_file", "b")]},
        {"role": "tool", "tool_call_id": "c1", "name": "read_file", "content": "B"},
        {"role": "assistant", "content": "", "tool_calls": [_call("c2", "read_file", "a")]},
        {"role": "tool", "tool_call_id": "c2", "name": "read_file", "content": "A again"},
        {"role": "assistant", "content": "done"}]
COUNTS = [20, 10, 15, 300, 15, 50, 15, 300, 5]


def _schedule(**params) -> dict:
    return get_policy("read_drop", **params).decide(MSGS, token_counts=COUNTS)["drop_message"]


def test_hand_worked_schedules():
    # read once by turn 4: 3 goes at 4; 5 is short and never superseded; 7 is read by turn 8
    assert _schedule() == {"4": [3], "8": [7]}
    # too long a bar: only the stale copy goes, when its re-read arrives
    assert _schedule(min_tokens=1000) == {"7": [3]}
    assert _schedule(min_tokens=1000, supersede=False) == {}
    # two turns must read it: 3 is read by 4 and 6; 7 only by 8
    assert _schedule(read_after=2) == {"6": [3]}
    # at once: each long result goes as it arrives (the frame guard, not the rule, makes it wait)
    assert _schedule(read_after=0) == {"3": [3], "7": [7]}


def reference(msgs: list[dict], counts: list[int], read_after: int, min_tokens: int, supersede: bool) -> dict:
    """At every trigger t, each attended tool response i <= t: dropped when long and read by
    ``read_after`` assistant turns in (i, t], or when a tool response in (i, t] answers the same call."""
    calls = {c["id"]: (c["function"]["name"], c["function"]["arguments"])
             for m in msgs for c in m.get("tool_calls") or []}
    same = [calls.get(m.get("tool_call_id")) if m["role"] == "tool" else None for m in msgs]
    dropped: set[int] = set()
    out: dict[str, list[int]] = {}
    for t in range(len(msgs)):
        for i in range(t + 1):
            if msgs[i]["role"] != "tool" or i in dropped:
                continue
            turns = sum(msgs[j]["role"] == "assistant" for j in range(i + 1, t + 1))
            stale = supersede and any(same[j] == same[i] is not None for j in range(i + 1, t + 1))
            if (counts[i] >= min_tokens and turns >= read_after) or stale:
                dropped.add(i)
                out.setdefault(str(t), []).append(i)
    return out


@settings(max_examples=60, deadline=None)
@given(trajectories(max_steps=14), st.lists(st.booleans(), min_size=1, max_size=6),
       st.integers(0, 4), st.integers(1, 400), st.booleans())
def test_equals_the_direct_reference(traj, repeat, read_after, min_tokens, supersede):
    msgs, counts = traj
    msgs = json.loads(json.dumps(msgs))
    first = None
    for k, m in enumerate(msgs):  # some calls re-read the first call's record (stale copies to find)
        for c in m.get("tool_calls") or []:
            if first is None:
                first = c["function"]["arguments"]
            elif repeat[k % len(repeat)]:
                c["function"]["arguments"] = first
    got = get_policy("read_drop", read_after=read_after, min_tokens=min_tokens, supersede=supersede).decide(
        msgs, token_counts=counts)
    assert got["drop_message"] == reference(msgs, counts, read_after, min_tokens, supersede)
