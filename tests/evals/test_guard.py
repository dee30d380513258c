"""The frame guard (:mod:`evals.cache.guard`): against a hand-made case, against its definition on
a real policy's decisions (every drop read by an assistant turn before it leaves, the frame never
dropped, each request's guarded schedule extending the previous one), and through the evaluators
(the screen's fast path equals its reference under the guard; the guard costs what it should)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.schedule import parse_schedule
from evals.cache.evaluator import EvalConfig, PolicySpec
from evals.cache.fidelity import DryEngine, EvidenceTable, ProxyReplay
from evals.cache.guard import FrameGuard, guard_schedule
from evals.tasks import load_suite
from rsi.cache.config import config_from_dict
from rsi.config import ConfigError
from search_spaces.cache import rules

ROLES = ["system", "user", "assistant", "tool", "tool", "assistant", "tool", "user", "assistant", "tool"]
# drops every tool output and the system prompt as soon as it arrives: the harms the guard prevents
EAGER = rules.render({"rules": [{"action": "drop", "when": {"any": [{"f": "role", "is": "tool"},
                                                                     {"f": "role", "is": "system"}]}}],
                      "reposition": None, "defaults": {}})


def test_the_guard_keeps_the_frame_and_waits_for_the_reader():
    wire = {"drop_message": {"2": [0, 1, 2], "3": [3], "4": [4], "6": [6], "7": [5, 7], "9": [9]},
            "reposition": [4, 9]}
    out = guard_schedule(parse_schedule(wire), FrameGuard(ROLES), len(ROLES))
    # 0 and 1 are the frame; 3 and 4 wait for assistant 5; 6 and 7 for assistant 8; 9 has no reader
    # after it; assistant messages (2, 5) leave when decided; repositions stay
    assert out.to_wire() == {"drop_message": {"2": [2], "5": [3, 4], "7": [5], "8": [6, 7]}, "reposition": [4, 9]}
    assert guard_schedule(out, FrameGuard(ROLES), len(ROLES)) == out  # a guarded schedule is its own guard


def test_a_drop_waits_until_its_reader_is_in_the_request():
    wire = {"drop_message": {"3": [3], "4": [4]}}
    assert guard_schedule(parse_schedule(wire), FrameGuard(ROLES), 5).is_empty  # messages 0-4: no assistant after 3
    assert guard_schedule(parse_schedule(wire), FrameGuard(ROLES), 6).to_wire() == {"drop_message": {"5": [3, 4]}}


@pytest.fixture(scope="module")
def mixed_tasks():
    return sorted(load_suite("mixed", "train"), key=lambda t: (len(t.messages), t.id))[:2]


@pytest.fixture(scope="module")
def dry(eng):
    return DryEngine.of(eng)


def test_guarded_decisions_meet_the_definition_on_a_real_policy(dry, mixed_tasks):
    replay = ProxyReplay(dry, EvidenceTable.assumed(mixed_tasks), EvalConfig(generate=False, frame_guard=True))
    spec = PolicySpec("program", {}, source=EAGER, label="eager")
    moved = 0
    for task in mixed_tasks:
        roles = [m["role"] for m in task.messages]
        first_user = roles.index("user")
        plain = replay._decisions(spec.build(), task, sorted(replay.episode(task).cuts))
        guarded = replay.decide(spec, task)
        previous, covered = parse_schedule(None), 0
        for n in sorted(guarded):
            d = guarded[n]
            schedule = d.schedule if d is not None and d.schedule is not None else parse_schedule(None)
            for t, targets in schedule.drops:
                assert t < n
                for target in targets:
                    m = target.message
                    assert roles[m] not in ("system", "developer") and m != first_user, (task.id, n, m)
                    if roles[m] != "assistant":  # an assistant message after m, at or before the trigger
                        assert any(roles[j] == "assistant" for j in range(m + 1, t + 1)), (task.id, n, t, m)
            assert not schedule.changes_before(previous, covered), (task.id, n)
            previous, covered = schedule, n
            p = plain[n]
            moved += p is not None and p.schedule is not None and p.schedule != schedule
        assert guarded.keys() == plain.keys()
    assert moved  # the eager policy does drop unread messages: the guard had work to do


def test_the_screen_equals_its_reference_under_the_guard_and_the_guard_costs(dry, mixed_tasks):
    table = EvidenceTable.assumed(mixed_tasks)
    guarded = [ProxyReplay(dry, table, EvalConfig(generate=False, frame_guard=True)) for _ in range(2)]
    plain = ProxyReplay(dry, table, EvalConfig(generate=False))
    spec = PolicySpec("program", {}, source=EAGER, label="eager")
    fast = [replace(r, seconds=0.0) for r in guarded[0].evaluate_many(spec, mixed_tasks)]
    slow = [replace(r, seconds=0.0) for r in (guarded[1].evaluate_reference(spec, t) for t in mixed_tasks)]
    assert all(r.ok for r in slow) and fast == slow
    unguarded = plain.evaluate_many(spec, mixed_tasks)
    # the same drops, later and fewer: never cheaper, dearer somewhere
    assert all(g.cost_cents >= u.cost_cents - 1e-12 for g, u in zip(fast, unguarded))
    assert sum(g.cost_cents for g in fast) > sum(u.cost_cents for u in unguarded)


def test_the_guard_is_named_in_the_config_digest_only_when_on():
    assert "frame_guard" not in EvalConfig().as_dict()  # stores written before the guard keep their keys
    assert EvalConfig(frame_guard=True).digest != EvalConfig().digest


def test_a_search_config_refuses_a_guard_that_is_not_a_bool():
    assert config_from_dict({"eval": {"frame_guard": True}}).eval.frame_guard is True
    with pytest.raises(ConfigError, match=r"eval\.frame_guard"):
        config_from_dict({"eval": {"frame_guard": "yes"}})


def test_a_guarded_live_policy_never_drops_the_frame_or_an_unread_message():
    """``GuardedPolicy`` (``akv live --run`` of a guarded run) on the eager program, request by request
    over a growing conversation: each decision meets the definition checked above, and the
    unguarded program does drop what the guard keeps."""
    from evals.cache.guard import GuardedPolicy

    eager = PolicySpec("program", {}, source=EAGER, label="eager").build()
    guarded = GuardedPolicy(eager)
    messages = [{"role": r, "content": f"{r} message {i} " * 8} for i, r in enumerate(ROLES)]
    unguarded_harm = False
    for n in range(3, len(messages) + 1):
        seen = messages[:n]
        for t, targets in parse_schedule(guarded.decide(seen), n).drops:
            for target in targets:
                m = target.message
                assert m not in (0, 1) and (ROLES[m] == "assistant" or "assistant" in ROLES[m + 1:t + 1]), (n, t, m)
        raw = parse_schedule(eager.decide(seen), n)
        unguarded_harm |= any(target.message in (0, 1) or "assistant" not in ROLES[target.message + 1:t + 1]
                              for t, targets in raw.drops for target in targets if ROLES[target.message] != "assistant")
    assert unguarded_harm
