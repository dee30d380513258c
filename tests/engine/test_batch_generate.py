"""Batched generation (``Engine.generate_many``) against ``Engine.chat`` called on each request in order.

Two engines share the model: one generates the requests together, the other one at a time; both
start from an empty tree. Text, token ids, finish reasons and usage must be equal (float32: the
greedy argmax is compared exactly, as ``test_batched_decode_equals_one_at_a_time`` does), and no
lock may be left behind.
"""

from __future__ import annotations

import pytest

from engine import Engine
from engine.request import RequestState
from tests.conftest import tolerances
from tests.engine.agent import trajectory
from tests.engine.test_batch_score import fresh, rolling

MSGS = trajectory(5)
QUESTION = {"role": "user", "content": "Which warehouse ships order 4801?"}
# (messages, schedule, options): shared prefixes (the same history under several schedules, and
# prefixes of one another), drop and reposition schedules, replies of different lengths and stops.
REQUESTS = [
    ([*MSGS[:8], QUESTION], None, {"max_tokens": 9, "stop": []}),
    ([*MSGS[:8], QUESTION], {"drop_message": {"5": [3]}}, {"max_tokens": 6, "stop": []}),
    ([*MSGS[:8], QUESTION], rolling(8, 1), {"max_tokens": 9, "stop": [], "prefix": "Warehouse"}),
    (MSGS[:4], None, {"max_tokens": 3, "stop": []}),
    ([*MSGS[:10], QUESTION], rolling(10, 2, reposition=False), {"max_tokens": 8, "stop": ["\n"]}),
    (MSGS[:2], None, {"max_tokens": 5, "stop": []}),
    ([*MSGS[:8], QUESTION], {"drop_message": {"5": [3], "7": [5]}}, {"max_tokens": 7, "stop": []}),
]
EXACT = pytest.mark.skipif(not tolerances().exact_argmax, reason="greedy tokens compared across batch shapes in "
                           "float32 only (bf16 near-ties of a random model flip)")


def one_at_a_time(base: Engine) -> list:
    eng = fresh(base)
    return [eng.chat(m, s, **o) for m, s, o in REQUESTS]


@EXACT
@pytest.mark.parametrize("batch_size", [3, 8])
def test_generate_many_equals_chat_one_at_a_time(tiny_gemma, batch_size):
    """tiny-random-gemma3 (its greedy replies change token by token): 7 requests, 3 in flight
    (requests start as others end) or all at once."""
    want = one_at_a_time(tiny_gemma)
    eng = fresh(tiny_gemma)
    requests = [eng.request(m, s, **o) for m, s, o in REQUESTS]
    got = eng.generate_many(requests, batch_size=batch_size)
    assert [r.token_ids for r in got] == [r.token_ids for r in want]
    assert [r.text for r in got] == [r.text for r in want]
    assert [r.finish_reason for r in got] == [r.finish_reason for r in want]
    assert [r.usage for r in got] == [r.usage for r in want]
    assert len({tuple(r.token_ids) for r in want}) > 2  # the replies differ: the test sees each one's own
    assert all(r.state is RequestState.FINISHED for r in requests)
    assert eng.stats.completion_tokens == sum(len(r.token_ids) for r in want)
    eng.check_integrity()
    assert all(n.lock == 0 for n in eng.tree.nodes())


def test_generate_many_takes_prepared_requests_and_refuses_bad_arguments(tiny):
    eng = fresh(tiny)
    prepared = eng.prepare_request(eng.request(MSGS[:4], max_tokens=2))
    fresh_one = eng.request(MSGS[:2], max_tokens=2)
    out = eng.generate_many([prepared, fresh_one], batch_size=1)
    assert [len(r.token_ids) for r in out] == [2, 2] and eng.generate_many([]) == []
    with pytest.raises(ValueError, match="request 0 is finished"):
        eng.generate_many([prepared])
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        eng.generate_many([eng.request(MSGS[:2])], batch_size=0)


def test_a_bad_request_is_refused_before_any_starts(tiny):
    eng = fresh(tiny, max_context=64)
    good, long = eng.request(MSGS[:2], max_tokens=2), eng.request(MSGS, max_tokens=2)
    with pytest.raises(Exception, match="context") as err:
        eng.generate_many([good, long])
    assert type(err.value).__name__ == "ContextLengthError"
    assert eng.stats.completion_tokens == 0 and all(n.lock == 0 for n in eng.tree.nodes())


def test_an_error_mid_decode_releases_every_generation(tiny, monkeypatch):
    eng = fresh(tiny)
    steps = []
    real = eng.decoder.step

    def failing(gens):
        steps.append(len(gens))
        if len(steps) == 2:
            raise RuntimeError("device lost")
        real(gens)

    monkeypatch.setattr(eng.decoder, "step", failing)
    with pytest.raises(RuntimeError, match="device lost"):
        eng.generate_many([eng.request(m, s, **o) for m, s, o in REQUESTS[:3]])
    assert steps == [3, 3]
    eng.check_integrity()
    assert all(n.lock == 0 for n in eng.tree.nodes())
