"""What a program's sandbox processes keep between calls (each trajectory, sent once and named by
its key after) and what the search process remembers (checked decisions by the episode and the
exact text the sandbox sent): a failure is still reported as it was without them, a process that
is replaced is sent everything again, and nothing a program does reaches a later call."""

from __future__ import annotations

import pytest

import search_spaces.cache.program as program
from search_spaces import Episode, SandboxLimits, Status, run_program
from search_spaces.sandbox import SessionPool
from tests.search_spaces.test_sandbox import ROLL
from tests.search_spaces.trajectories import build

LIMITS = SandboxLimits(cpu_seconds=1, wall_seconds=10, memory_mb=256, max_output_bytes=400_000)
MSGS = build(["call"] * 8, [True])  # requests of 2, 4, ..., 18 messages
EPISODES = [Episode.of(MSGS, [20 + k] * len(MSGS)) for k in range(4)]

SEVENTH = '''SEEN = []


def decide(request, params):
    SEEN.append(request.n)
    if request.tokens[0] == 21 and len(SEEN) == 7:
        raise ValueError("the seventh request")
    plan = request.plan()
    if request.n > 2:
        plan.drop(2, [1])
    return plan


def space(trial):
    return {}
'''

KEEP = 'DEFAULTS = {"keep": 1}\n\n' + ROLL  # test_sandbox's rolling program, with its default


@pytest.fixture
def pool(monkeypatch):
    fresh = SessionPool(size=4, max_calls=8)
    monkeypatch.setattr(program, "SESSIONS", fresh)
    monkeypatch.setattr(program, "CHECKED", program.LRU(2048))
    yield fresh
    fresh.close()


def _wires(result) -> list[list[dict]]:
    return [[d.wire for d in episode] for episode in result.decisions]


def test_a_failure_on_the_seventh_request_of_a_batched_episode_is_reported_as_before(pool):
    """The second process's first episode fails on that process's seventh request, the first
    call (trajectories sent) and the next (named by key) alike, with the reason the sandbox gave
    before it kept anything; a loop there is a timeout, its process is replaced and the new one
    is sent every trajectory again."""
    reason = "decide: ValueError (line 7): the seventh request [episode 0, request of 14 messages]"
    for _ in range(2):
        r = run_program(SEVENTH, {}, EPISODES, LIMITS)
        assert (r.status, r.reason) == (Status.ERROR, reason)
    good = run_program(KEEP, {"keep": 2}, EPISODES, LIMITS)
    assert good.ok, good.reason
    looping = SEVENTH.replace('raise ValueError("the seventh request")', "while True:\n            pass")
    for _ in range(2):
        r = run_program(looping, {}, EPISODES, LIMITS)
        assert (r.status, r.reason) == (Status.TIMEOUT, "CPU time limit of 1 s exceeded")
    # the looping program's processes were replaced: the new ones hold nothing and are sent everything
    after = run_program(looping.replace("len(SEEN) == 7", "len(SEEN) == 70"), {}, EPISODES, LIMITS)
    assert after.ok, after.reason
    again = run_program(KEEP, {"keep": 2}, EPISODES, LIMITS)
    assert again.ok and _wires(again) == _wires(good)


def test_trajectories_are_sent_once_per_process_and_again_after_forgetting(pool, monkeypatch):
    sent: list[dict] = []
    make = program._decide_message

    def spy(part, params):
        build_message = make(part, params)

        def message(session):
            out = build_message(session)
            sent.append(out)
            return out

        return message

    monkeypatch.setattr(program, "_decide_message", spy)
    first = run_program(KEEP, {"keep": 1}, EPISODES, LIMITS)
    assert all("messages" in job for m in sent for job in m["episodes"])
    sent.clear()
    second = run_program(KEEP, {"keep": 3}, EPISODES, LIMITS)
    assert sent and all("messages" not in job and "trajectory" in job for m in sent for job in m["episodes"])
    assert first.ok and second.ok and _wires(first) != _wires(second)
    monkeypatch.setattr(program, "HELD", 1)  # two episodes per process: each call forgets and sends again
    sent.clear()
    third = run_program(KEEP, {"keep": 3}, EPISODES, LIMITS)
    assert all(m["forget"] and all("messages" in job for job in m["episodes"]) for m in sent)
    assert third.ok and _wires(third) == _wires(second)


def test_checked_decisions_are_remembered_for_their_own_episode_only(pool):
    """The same text of decisions is valid for one episode and rewrites the past in another (the
    second's previous request already covered the trigger): the second is checked, not taken from
    the first."""
    source = ("def decide(request, params):\n    plan = request.plan()\n    if request.n > 4:\n"
              "        plan.drop(3, [1])\n    return plan\n\n\ndef space(trial):\n    return {}\n")
    valid = Episode.of(MSGS, [20] * len(MSGS), cuts=[2, 6])
    rewrites = Episode.of(MSGS, [20] * len(MSGS), cuts=[4, 6])
    assert run_program(source, {}, [valid], LIMITS).ok
    r = run_program(source, {}, [rewrites], LIMITS)
    assert r.status is Status.INVALID and "rewrites the past" in r.reason


def test_a_kept_trajectory_is_the_same_for_every_call(pool):
    """A call that changes whatever the program can reach of its requests (here: under one
    parameter set of the same program, so the same processes serve both) leaves nothing behind:
    the next call decides as a process that never ran it."""
    source = KEEP.replace('DEFAULTS = {"keep": 1}', 'DEFAULTS = {"keep": 1, "meddle": 0}').replace(
        "    tools = request.tool_responses()\n",
        "    if params['meddle']:\n        for i in range(request.n):\n            request.mentioned_by(i).append(0)\n"
        "            request.tool_responses().clear()\n            request.call_ends().append(i)\n"
        "            request.user_messages().append(i)\n"
        "    tools = [t for t in request.tool_responses() if len(request.mentioned_by(t)) < 9]\n")
    fresh = run_program(source, {"keep": 1}, EPISODES, LIMITS)
    assert fresh.ok, fresh.reason
    pids = sorted(s.proc.pid for s in pool._sessions.values())
    assert run_program(source, {"keep": 1, "meddle": 1}, EPISODES, LIMITS).ok
    after = run_program(source, {"keep": 1}, EPISODES, LIMITS)
    assert after.ok and _wires(after) == _wires(fresh)
    assert sorted(s.proc.pid for s in pool._sessions.values()) == pids  # the same processes, trajectories kept
