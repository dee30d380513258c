"""Policy fragments: each spliced program passes the checker, runs in the sandbox, and decides exactly
what a direct reference implementation of its documented rule decides on a hand-made trajectory."""

from __future__ import annotations

import json
from typing import Any

import pytest

from search_spaces import Episode, check_program, run_program, seed_source
from search_spaces.cache.fragments import FRAGMENTS, FragmentError, compose, present
from search_spaces.cache.program import suggest_params
from search_spaces.cache.program_api import entities

# A base that drops every message three or more positions behind the trigger (users and system too).
BASE = '''DEFAULTS = {"lag": 3}


def decide(request, params):
    plan = request.plan()
    for t in range(request.n):
        if t - params["lag"] >= 0:
            plan.drop(t, [t - params["lag"]])
    return plan


def space(trial):
    return {"lag": trial.suggest_int("lag", 1, 8)}
'''


def _call(name: str, args: dict[str, Any], cid: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def trajectory() -> list[dict[str, Any]]:
    """Reads of records, a re-read of the same record, a parallel call, and an assistant message
    that mentions an old response's entity."""
    return [
        {"role": "system", "content": "You are a support agent. Tools: get(id)."},
        {"role": "user", "content": "Why was ticket T-77 escalated?"},
        {"role": "assistant", "content": "Reading.", "tool_calls": [_call("get", {"id": "T-77"}, "a")]},
        {"role": "tool", "tool_call_id": "a", "name": "get", "content": "Ticket t-77 owner Morgan status open."},
        {"role": "assistant", "content": "Morgan has it; two reads.",
         "tool_calls": [_call("get", {"id": "C-12"}, "b"), _call("crm", {"id": "C-12"}, "c")]},
        {"role": "tool", "tool_call_id": "b", "name": "get", "content": "Customer c-12 plan Gold since 2019."},
        {"role": "tool", "tool_call_id": "c", "name": "crm", "content": "CRM c-12 region Osaka."},
        {"role": "assistant", "content": "Morgan owns it; reread.", "tool_calls": [_call("get", {"id": "T-77"}, "d")]},
        {"role": "tool", "tool_call_id": "d", "name": "get", "content": "Ticket t-77 owner Morgan status escalated."},
        {"role": "assistant", "content": "Check again.", "tool_calls": [_call("get", {"id": "T-77"}, "e")]},
        {"role": "tool", "tool_call_id": "e", "name": "get", "content": "Ticket t-77 status closed."},
        {"role": "assistant", "content": "Done: it was escalated."},
    ]


TOKENS = [7, 11, 5, 40, 6, 30, 25, 6, 45, 5, 20, 8]


def final_schedule(source: str, params: dict[str, Any] | None = None) -> tuple[dict[int, list[int]], list[int]]:
    """(drops per trigger, repositions) of the last request, after the sandbox validated every request."""
    msgs = trajectory()
    res = run_program(source, params or {}, [Episode.of(msgs, TOKENS, cuts=range(1, len(msgs) + 1))])
    assert res.ok, res.reason
    wire = res.decisions[0][-1].wire
    drops = {int(t): sorted(ids) for t, ids in wire.get("drop_message", {}).items() if ids}
    return drops, list(wire.get("reposition", []))


def base_reference(lag: int = 3) -> dict[int, list[int]]:
    return {t: [t - lag] for t in range(lag, len(TOKENS))}


def test_base_reference_matches_the_sandbox() -> None:
    assert final_schedule(BASE) == (base_reference(), [])


@pytest.mark.parametrize("seed", ["full", "rolling_drop", "thinking_drop", "scored_drop"])
def test_every_fragment_splices_into_every_seed(seed: str) -> None:
    msgs = trajectory()
    ep = Episode.of(msgs, TOKENS)
    source = seed_source(seed)
    for name in FRAGMENTS:
        one = compose(source, name)
        assert check_program(one).ok, (name, check_program(one).reason)
        assert run_program(one, {}, [ep]).ok
        source = compose(source, name)  # and all of them stacked
    assert present(source) == list(FRAGMENTS)
    assert check_program(source).ok and run_program(source, {}, [ep]).ok


def test_keep_mentioned_matches_its_rule() -> None:
    msgs = trajectory()
    expect: dict[int, list[int]] = {}
    for t, ids in base_reference().items():
        kept = []
        for i in ids:
            mentioned = msgs[i]["role"] == "tool" and any(
                msgs[j]["role"] in ("user", "assistant")
                and entities(_text(msgs[i])) & entities(_text(msgs[j])) for j in range(i + 1, t + 1))
            if not mentioned:
                kept.append(i)
        if kept:
            expect[t] = kept
    got, _ = final_schedule(compose(BASE, "keep_mentioned"))
    assert got == expect
    assert got != base_reference()  # message 3 (Morgan) is mentioned by message 4 and kept
    assert 3 not in {i for ids in got.values() for i in ids}


def _text(m: dict[str, Any]) -> str:
    calls = [f"{c['function']['name']} {c['function']['arguments']}" for c in m.get("tool_calls") or []]
    return "\n".join(p for p in [m.get("content") or "", *calls] if p)


def test_supersede_matches_its_rule() -> None:
    # On the full cache: 8 re-reads get(T-77) after 3, 10 after 8; the crm read of C-12 is another record.
    got, repos = final_schedule(compose(seed_source("full"), "supersede"))
    assert got == {8: [3], 10: [8]} and repos == []
    # Over the lag base, an id the base dropped already is not dropped again.
    got, _ = final_schedule(compose(BASE, "supersede"))
    expect = base_reference()
    expect[10] = [7, 8]  # 8 is superseded by 10 (3, superseded by 8, was dropped by the base at 6)
    expect[11] = []  # the base's drop of 8 at 11 comes after it was superseded
    assert got == {t: ids for t, ids in expect.items() if ids}


def test_protect_first_user_matches_its_rule() -> None:
    got, _ = final_schedule(compose(BASE, "protect_first_user"))
    expect = {t: [i for i in ids if i != 1] for t, ids in base_reference().items()}
    assert got == {t: ids for t, ids in expect.items() if ids}
    assert 4 not in got  # the base dropped message 1 (the task) at trigger 4


@pytest.mark.parametrize("limit", [1, 20, 60, 10_000])
def test_reposition_after_matches_its_rule(limit: int) -> None:
    pending, expect = 0, []
    for t, ids in sorted(base_reference().items()):
        pending += sum(TOKENS[i] for i in ids)
        if pending >= limit:
            expect.append(t)
            pending = 0
    drops, repos = final_schedule(compose(BASE, "reposition_after"), {"reposition_after_tokens": limit})
    assert drops == base_reference() and repos == expect
    if limit == 1:
        assert repos == sorted(base_reference())


def test_composed_space_adds_fragment_parameters() -> None:
    import optuna

    source = compose(compose(BASE, "keep_mentioned"), "reposition_after")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    res = suggest_params(source, study.ask())
    assert res.ok, res.reason
    assert set(res.params or {}) == {"lag", "keep_mentions_min", "reposition_after_tokens"}


def test_compose_refuses_bad_requests() -> None:
    with pytest.raises(FragmentError, match="unknown fragment 'nope'"):
        compose(BASE, "nope")
    with pytest.raises(FragmentError, match="already in the program"):
        compose(compose(BASE, "supersede"), "supersede")
    with pytest.raises(FragmentError, match="does not parse"):
        compose("def decide(:\n", "supersede")
    with pytest.raises(FragmentError, match="needs decide"):
        compose("def f(x):\n    return x\n", "supersede")
