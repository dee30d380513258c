"""The program API's message features (call_of, batch_of, superseded_by, mentioned_by,
tools_between) against slow, obvious re-implementations, on every prefix of random trajectories.

Causality is part of the contract: a request of ``n`` messages never shows a later message, so each
feature of a prefix is computed from the prefix alone by the reference."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from search_spaces.cache.program_api import RequestView, Trajectory, entities
from tests.search_spaces.trajectories import build, trajectories


def _text(m: dict) -> str:
    return message_text(m)


def ref_calls(msgs: list[dict]) -> list[tuple[tuple[str, str] | None, tuple[int, int]]]:
    """Per message: the call a tool message answers, found by tool_call_id among the calls of the
    assistant message opening its batch, else the j-th call for the j-th response of the batch; and
    (j, number of calls) as its place in the batch ((0, 0) without a call)."""
    out: list[tuple[tuple[str, str] | None, tuple[int, int]]] = []
    for i, m in enumerate(msgs):
        if m["role"] != "tool":
            out.append((None, (0, 0)))
            continue
        a = i - 1
        while a >= 0 and msgs[a]["role"] == "tool":
            a -= 1
        if a < 0 or msgs[a]["role"] != "assistant" or not msgs[a].get("tool_calls"):
            out.append((None, (0, 0)))
            continue
        calls = msgs[a]["tool_calls"]
        ids = [c.get("id") for c in calls]
        j = ids.index(m["tool_call_id"]) if m.get("tool_call_id") in ids else i - a - 1
        if j >= len(calls):
            out.append((None, (0, 0)))
            continue
        fn = calls[j]["function"]
        args = fn["arguments"] if isinstance(fn["arguments"], str) else json.dumps(fn["arguments"], sort_keys=True)
        out.append(((fn["name"], args), (j, len(calls))))
    return out


def message_text(m: dict) -> str:  # the API's Message.text, written out again
    parts = [m.get("content") or "", m.get("reasoning_content") or ""]
    for c in m.get("tool_calls") or ():
        fn = c["function"]
        parts.append(f"{fn['name']} {fn['arguments']}")
    return "\n".join(p for p in parts if p)


def check_prefix(msgs: list[dict], counts: list[int], n: int, whole: Trajectory) -> None:
    view = RequestView(msgs[:n], counts[:n], built=whole)
    found = ref_calls(msgs[:n])
    calls = [c for c, _ in found]
    ents = [entities(message_text(m)) for m in msgs[:n]]
    for i in range(n):
        assert view.call_of(i) == calls[i], (n, i)
        later = [j for j in range(i + 1, n) if calls[i] is not None and calls[j] == calls[i]]
        assert view.superseded_by(i) == (later[0] if later else -1), (n, i)
        for least in (1, 2):
            want = [j for j in range(i + 1, n) if msgs[j]["role"] in ("user", "assistant")
                    and len(ents[i] & ents[j]) >= least]
            assert view.mentioned_by(i, least) == want, (n, i, least)
        for b in range(n + 2):
            assert view.tools_between(i, b) == sum(1 for m in msgs[i:min(b, n)] if m["role"] == "tool")
        assert view.batch_of(i) == found[i][1], (n, i)


@settings(max_examples=40, deadline=None)
@given(trajectories())
def test_features_equal_the_reference_on_every_prefix(traj):
    msgs, counts = traj
    whole = Trajectory(msgs, counts)  # one trajectory for all prefixes, as the sandbox builds it
    for n in range(1, len(msgs) + 1):
        check_prefix(msgs, counts, n, whole)


def test_rereads_parallel_batches_and_mentions_on_a_written_trajectory():
    msgs = build(["call2", "call", "call", "answer"], [True])
    # make the third call re-read the first record: same tool, same arguments
    msgs[5]["tool_calls"][0]["function"]["arguments"] = msgs[2]["tool_calls"][0]["function"]["arguments"]
    counts = [10] * len(msgs)
    view = RequestView(msgs, counts)
    assert [m["role"] for m in msgs[:8]] == ["system", "user", "assistant", "tool", "tool", "assistant", "tool",
                                             "assistant"]
    assert view.batch_of(3) == (0, 2) and view.batch_of(4) == (1, 2) and view.batch_of(6) == (0, 1)
    assert view.superseded_by(3) == 6 and view.superseded_by(4) == -1
    assert RequestView(msgs[:6], counts[:6]).superseded_by(3) == -1  # the re-read is not yet in that request
    assert view.tools_between(3, 7) == 3
    assert view.call_of(0) is None and view.call_of(3)[0] == "search"


def test_a_response_without_its_call_is_matched_by_position_and_ids_may_be_missing():
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "Find order 4821"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "a", "arguments": "{}"}},
                {"type": "function", "function": {"name": "b", "arguments": "{}"}}]},
            {"role": "tool", "content": "Order 4821 ok"}, {"role": "tool", "content": "x"},
            {"role": "tool", "content": "stray"}, {"role": "assistant", "content": "order 4821 is fine"}]
    view = RequestView(msgs, [5] * len(msgs))
    assert view.call_of(3) == ("a", "{}") and view.call_of(4) == ("b", "{}") and view.call_of(5) is None
    assert view.mentioned_by(3) == [6] and view.mentioned_by(1) == [6]
    assert view.mentioned_by(-1) == []


@given(st.integers(-12, 12))
def test_indexes_outside_the_request_raise_index_error(i):
    msgs = build(["call", "answer"], [False])
    view = RequestView(msgs, [3] * len(msgs))
    if -len(msgs) <= i < len(msgs):
        view.mentioned_by(i)
        view.superseded_by(i)
    else:
        for method in (view.mentioned_by, view.superseded_by, view.call_of, view.batch_of, view.entities):
            try:
                method(i)
            except IndexError:
                continue
            raise AssertionError(f"{method.__name__}({i}) did not raise")


def test_entities_match_the_module_function():
    msgs = build(["call", "call2", "answer"], [True, False])
    view = RequestView(msgs, [4] * len(msgs))
    assert all(view.entities(i) == entities(_text(m)) for i, m in enumerate(msgs))
