"""One conformance suite for "an engine" (``engine.interface.ChatEngine``), run against every
implementation: the in-process ``Engine`` (tiny-random) and ``RemoteEngine`` talking to our real
server (``ServerThread(create_app(...))`` on 127.0.0.1).

Each test gets a factory of fresh engines (empty radix tree, so usage is predictable).
"""

from __future__ import annotations

import numpy as np
import pytest

from engine import AKVError, MessageError, ScheduleError
from engine.interface import ChatEngine
from tests.engine.agent import trajectory
from tests.engine.test_engine import CANDIDATES, fresh, reference_logprobs, rolling

pytestmark = pytest.mark.usefixtures("one_thread")  # see tests/conftest.py

IMPLEMENTATIONS = ("engine", "remote")


@pytest.fixture(params=IMPLEMENTATIONS)
def make(request, tiny, tmp_path):
    """``make(**engine_kwargs)`` -> a fresh ChatEngine of the parametrized implementation."""
    from engine.remote import RemoteEngine
    from engine.server import ServerThread, create_app

    made: list = []
    inner: list = []

    def factory(**kw) -> ChatEngine:
        eng = fresh(tiny, **kw)
        inner.append(eng)
        if request.param == "engine":
            return eng
        srv = ServerThread(create_app(eng, snapshot_dir=tmp_path / f"snap{len(made)}"))
        srv.start()
        remote = RemoteEngine(srv.base_url, "tiny-random", template=eng.renderer.template.name,
                              pool_bytes=eng.tree.pool_bytes, host_bytes=eng.tree.host_bytes, check_usage="raise")
        made.append((srv, remote))
        return remote

    yield factory
    for srv, remote in made:
        remote.close()
        srv.stop()
    for eng in inner:
        eng.check_integrity()
        assert all(n.lock == 0 for n in eng.tree.nodes()), "a request left a lock behind"


def test_implements_the_protocol(make):
    eng = make()
    assert isinstance(eng, ChatEngine)
    assert eng.render(trajectory(1)).token_ids


def test_greedy_chat_is_deterministic_and_matches_the_in_process_engine(make, tiny):
    eng = make()
    msgs, sched = trajectory(4), rolling(10, 1)
    a = eng.chat(msgs, sched, max_tokens=6, stop=[])
    b = eng.chat(msgs, sched, max_tokens=6, stop=[])
    assert (a.text, a.token_ids, a.finish_reason) == (b.text, b.token_ids, b.finish_reason)
    ref = fresh(tiny).chat(msgs, sched, max_tokens=6, stop=[])
    assert (a.text, a.token_ids) == (ref.text, ref.token_ids)
    assert b.usage.cached_tokens > 0 and b.usage.prefill_tokens < a.usage.prefill_tokens  # the second time, reused


def test_usage_partitions_the_prompt_shows_the_schedule_and_equals_the_dry_run(make):
    eng = make()
    acc = eng.accountant()
    msgs = trajectory(5)
    seen_skip = seen_repos = False
    for turn in range(4, len(msgs) + 1, 2):
        for sched in (None, rolling(turn, 1)):
            c = eng.chat(msgs[:turn], sched, max_tokens=3)
            u = c.usage
            assert u.prompt_tokens == u.prefill_tokens + u.cached_tokens + u.drop_skipped_tokens
            assert u.prompt_tokens == len(eng.render(msgs[:turn]).token_ids)
            assert u.completion_tokens == len(c.token_ids)
            assert acc.request(msgs[:turn], sched, c.token_ids) == u, (turn, sched)
            if sched is None or not sched["drop_message"]:
                assert u.drop_skipped_tokens == 0 and u.repos_tokens == 0
            seen_skip |= u.drop_skipped_tokens > 0
            seen_repos |= u.repos_tokens > 0
    assert seen_skip and seen_repos


def test_same_text_different_drops_are_kept_apart(make):
    eng = make()
    msgs = trajectory(5)
    a = eng.score(msgs, CANDIDATES, {"drop_message": {"5": [3]}})
    b = eng.score(msgs, CANDIDATES, {"drop_message": {"7": [3]}})
    assert not np.allclose(a.logprobs, b.logprobs, atol=1e-6)


def test_score_ranks_candidates_as_the_reference_does(make, tiny):
    eng = make()
    msgs = trajectory(4)
    for sched in (None, rolling(len(msgs), 1)):
        r = eng.score(msgs, CANDIDATES, sched)
        ref = reference_logprobs(tiny, msgs, sched, CANDIDATES)
        assert np.allclose(r.logprobs, ref, atol=1e-4)
        assert r.best == int(np.argmax(ref)) and r.n_tokens == [1] * len(CANDIDATES)
        assert r.usage.prompt_tokens == r.usage.prefill_tokens + r.usage.cached_tokens + r.usage.drop_skipped_tokens
    with_prefix = eng.score(msgs, [" Warehouse A", " Warehouse B"], prefix="It ships from")
    local = fresh(tiny).score(msgs, [" Warehouse A", " Warehouse B"], prefix="It ships from")
    assert np.allclose(with_prefix.logprobs, local.logprobs, atol=1e-4) and with_prefix.n_tokens == local.n_tokens


@pytest.mark.parametrize(
    ("kwargs", "exc", "field"),
    [
        ({"schedule": {"drop_message": {"2": [3]}}}, ScheduleError, "drop_message.2"),
        ({"schedule": {"reposition": [99]}}, ScheduleError, "reposition"),
        ({"schedule": {"reposition": [3, 3]}}, ScheduleError, "reposition"),
        ({"schedule": {"drop_rule": {"type": "magic", "drop_messages": {}}}}, ScheduleError, "drop_rule.type"),
        ({"max_tokens": 0}, AKVError, "max_tokens"),
        ({"temperature": -1.0}, AKVError, "temperature"),
        ({"top_p": 0.0}, AKVError, "top_p"),
    ],
)
def test_bad_requests_raise_the_engine_errors(make, kwargs, exc, field):
    eng = make()
    msgs = trajectory(2)
    with pytest.raises(exc) as err:
        eng.chat(msgs, **kwargs)
    assert err.value.field == field
    with pytest.raises(MessageError, match="role"):
        eng.chat([{"role": "robot", "content": "x"}])
    with pytest.raises(AKVError, match="candidates"):
        eng.score(msgs, [])
    assert eng.chat(msgs, max_tokens=2).token_ids  # still serving


def test_streaming_pieces_add_up_and_cancellation_stops(make):
    eng = make()
    msgs = trajectory(2)
    pieces: list[str] = []
    c = eng.chat(msgs, max_tokens=8, stop=[], on_text=pieces.append)
    assert "".join(pieces) == c.text and c.finish_reason == "length"
    calls = iter(range(1000))
    cut = eng.chat(msgs, max_tokens=200, stop=[], cancelled=lambda: next(calls) >= 2)
    assert cut.finish_reason == "cancelled"


def test_stats_accumulate_usage(make):
    eng = make()
    msgs = trajectory(2)
    eng.chat(msgs, max_tokens=2)
    eng.score(msgs, CANDIDATES)
    assert eng.stats.requests == 2 and eng.stats.cached_tokens > 0 and eng.stats.prefill_tokens > 0


def test_one_options_contract_refuses_a_misspelt_option_on_every_engine(make):
    """``ChatOptions`` is the one list of chat options: a key outside it is refused by name (it
    would otherwise pass silently through ``**options``), on every implementation alike."""
    eng = make()
    with pytest.raises(TypeError, match=r"\['max_token'\]"):
        eng.chat(trajectory(2), max_token=2)  # type: ignore[call-arg]
    assert eng.stats.requests == 0
