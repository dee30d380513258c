"""Durable agent sessions on tiny-random: crash recovery by event replay, side-effect rules, fork (shared
KV), restore, merge, and the store's atomic writes."""

from __future__ import annotations

import json

import pytest

from engine.durable import (
    CheckpointStore,
    DurableError,
    DurableSession,
    ReplayMismatchError,
    SideEffectError,
    StepKind,
    Tool,
    ToolBox,
)


class Crash(Exception):
    """Stands for the process dying in the middle of a step."""


class World:
    """Tools with observable effects: how often each really ran."""

    def __init__(self) -> None:
        self.searches = 0
        self.emails: list[str] = []
        self.crash_in_email = False

    def search(self, args):
        self.searches += 1
        return f"results for {args.get('q')}"

    def send(self, args):
        self.emails.append(args["to"])  # the effect happens ...
        if self.crash_in_email:
            raise Crash("power cut")  # ... and the process dies before the result is recorded
        return f"sent to {args['to']}"

    def tools(self) -> ToolBox:
        return ToolBox([Tool("search", self.search), Tool("send_email", self.send, side_effect=True)])


class Counting:
    """The engine, counting LLM calls (and able to crash in one)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.calls = 0
        self.crash_at: int | None = None

    def chat(self, messages, schedule=None, **kw):
        self.calls += 1
        if self.crash_at == self.calls:
            raise Crash("killed during generation")
        return self.engine.chat(messages, schedule, **kw)

    def save_session(self, *a):
        return self.engine.save_session(*a)

    def load_session(self, *a):
        return self.engine.load_session(*a)


MESSAGES = [{"role": "system", "content": "You are a careful agent."},
            {"role": "user", "content": "Find the cheapest supplier and email the buyer."}]


def agent(s: DurableSession) -> list[str]:
    """The agent's driver: deterministic code around LLM and tool calls."""
    out = [s.llm(max_tokens=4)]
    out.append(s.tool("search", {"q": "suppliers"}))
    out.append(s.llm(max_tokens=4))
    out.append(s.tool("send_email", {"to": "buyer@example.com"}))
    out.append(s.llm(max_tokens=4))
    return out


def test_resume_after_a_crash_replays_finished_steps(tiny, tmp_path):
    store, world, eng = CheckpointStore(tmp_path), World(), Counting(tiny)
    s = DurableSession.create(store, "run", eng, world.tools(), MESSAGES)
    eng.crash_at = 3  # the third LLM call (step 4) dies
    with pytest.raises(Crash):
        agent(s)
    assert (eng.calls, world.searches, world.emails) == (3, 1, ["buyer@example.com"])
    eng.crash_at = None
    s2 = DurableSession.open(store, "run", eng, world.tools())
    assert s2.replaying and s2.pending is not None and s2.pending.kind is StepKind.LLM
    final = agent(s2)
    # finished LLM calls and tools were replayed, not re-run; only the interrupted LLM call ran again
    assert (eng.calls, world.searches, world.emails) == (4, 1, ["buyer@example.com"])
    s3 = DurableSession.open(store, "run", eng, world.tools())
    assert agent(s3) == final and eng.calls == 4  # a finished run replays entirely
    assert [m["role"] for m in s3.messages] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]


def test_an_in_doubt_side_effect_is_never_replayed(tiny, tmp_path):
    store, world, eng = CheckpointStore(tmp_path), World(), Counting(tiny)
    s = DurableSession.create(store, "run", eng, world.tools(), MESSAGES)
    world.crash_in_email = True
    with pytest.raises(Crash):
        agent(s)
    world.crash_in_email = False
    s2 = DurableSession.open(store, "run", eng, world.tools())
    with pytest.raises(SideEffectError, match=r"tool 'send_email' at step 3 has side effects and no recorded result"):
        agent(s2)
    with pytest.raises(SideEffectError, match="'send_email' at step 3"):
        s2.restore(1)  # restoring past it is refused too
    with pytest.raises(DurableError, match="step 2 is not an in-doubt"):
        s2.resolve(2, "x")
    s2.resolve(3, "sent to buyer@example.com")  # the operator checked the outbox
    s3 = DurableSession.open(store, "run", eng, world.tools())
    agent(s3)
    assert world.emails == ["buyer@example.com"]  # still exactly one email
    assert s3.steps[3].reused_effect and s3.steps[3].result == "sent to buyer@example.com"


def test_restore_keeps_effects_and_refuses_mismatched_replays(tiny, tmp_path):
    store, world, eng = CheckpointStore(tmp_path), World(), Counting(tiny)
    s = DurableSession.create(store, "run", eng, world.tools(), MESSAGES)
    agent(s)
    s.restore(2)  # back to after the search
    assert len(s.messages) == 4 and len(s.steps) == 2 and s.abandoned[0]["from_step"] == 2
    s.llm(max_tokens=4)
    s.tool("send_email", {"to": "buyer@example.com"})  # the same call: its recorded effect, not a new email
    assert world.emails == ["buyer@example.com"] and s.steps[-1].reused_effect
    s.tool("send_email", {"to": "boss@example.com"})  # a different call runs
    assert world.emails == ["buyer@example.com", "boss@example.com"]
    with pytest.raises(DurableError, match=r"restore: step must be in \[0, 5\]"):
        s.restore(9)
    again = DurableSession.open(store, "run", eng, world.tools())
    again.llm(max_tokens=4)
    with pytest.raises(ReplayMismatchError, match="step 1 was recorded as tool 'search'"):
        again.tool("send_email", {"to": "x"})
    with pytest.raises(DurableError, match="unknown tool 'fax'; valid tools: search, send_email"):
        again.tool("fax")


def test_fork_shares_the_prefix_kv_and_merge_appends_the_outcome(tiny, tmp_path):
    store, world = CheckpointStore(tmp_path), World()
    s = DurableSession.create(store, "main", tiny, world.tools(), MESSAGES)
    s.llm(max_tokens=4)
    s.tool("search", {"q": "suppliers"})
    prefix = len(tiny.render(s.messages).token_ids)
    b = s.fork("main.b")
    assert b.messages == s.messages and b.parent == {"session": "main", "step": 2}
    text = b.llm(max_tokens=4)
    usage = b.steps[-1].usage
    assert usage is not None and usage["cached_tokens"] >= prefix - 1  # the branch reads main's KV
    s.llm(max_tokens=4)  # main goes on; its own KV diverges on another branch of the tree
    outcome = s.merge(b)
    assert outcome == text and s.messages[-1] == {"role": "tool", "name": "branch:main.b", "content": text}
    with pytest.raises(DurableError, match="not a branch of"):
        b.merge(s)
    with pytest.raises(DurableError, match="already exists"):
        s.fork("main.b")
    reopened = DurableSession.open(store, "main", tiny, world.tools())
    assert reopened.steps[-1].kind is StepKind.MERGE and len(reopened.steps) == 4


def test_checkpoints_are_atomic_and_corruption_is_detected(tiny, tmp_path):
    store, world = CheckpointStore(tmp_path), World()
    s = DurableSession.create(store, "run", tiny, world.tools(), MESSAGES, kv_snapshots=True)
    s.tool("search", {"q": "a"})
    d = tmp_path / "run"
    assert not list(d.glob("*.tmp")) and (d / "HEAD").read_text() == f"ckpt-{s.seq:08d}.json"
    assert len(list(d.glob("kv-*.safetensors"))) == 1  # only the latest snapshot is kept
    assert DurableSession.open(store, "run", tiny, world.tools()).kv_loaded  # the snapshot warms the tree
    latest = d / f"ckpt-{s.seq:08d}.json"
    body = json.loads(latest.read_text())
    body["state"]["steps"][0]["result"] = "forged"
    latest.write_text(json.dumps(body))  # the checksum no longer matches: the previous one is used
    loaded = store.latest("run")
    assert loaded.seq == s.seq - 1 and loaded.skipped == (latest.name,)
    reopened = DurableSession.open(store, "run", tiny, world.tools())
    # the step's intent, before its result; its KV snapshot is gone, so the KV will be recomputed
    assert not reopened.kv_loaded and reopened.pending is not None
    for f in d.glob("ckpt-*.json"):
        f.write_text("{torn")
    with pytest.raises(DurableError, match="has no valid checkpoint"):
        store.latest("run")
    with pytest.raises(DurableError, match="session id must match"):
        store.latest("../etc")
    with pytest.raises(DurableError, match="already exists"):
        DurableSession.create(store, "run", tiny, world.tools(), MESSAGES)


def test_a_message_from_outside_the_agent_is_a_step_replayed_and_checked(tiny, tmp_path):
    """``say`` appends the user's next turn as a step: on resume it is replayed (nothing re-sent), and
    a driver that now says something else is refused."""
    store, world, eng = CheckpointStore(tmp_path), World(), Counting(tiny)

    def two_turns(s: DurableSession, second: str) -> list[str]:
        out = [s.llm(max_tokens=4)]
        s.say({"role": "user", "content": second})
        return [*out, s.llm(max_tokens=4)]

    s = DurableSession.create(store, "run", eng, world.tools(), MESSAGES)
    first = two_turns(s, "And the second cheapest?")
    assert [m["role"] for m in s.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert s.messages[3]["content"] == "And the second cheapest?" and s.steps[1].kind is StepKind.MESSAGE
    again = DurableSession.open(store, "run", eng, world.tools())
    assert two_turns(again, "And the second cheapest?") == first and eng.calls == 2
    with pytest.raises(ReplayMismatchError, match="another user message"):
        two_turns(DurableSession.open(store, "run", eng, world.tools()), "Something else.")
