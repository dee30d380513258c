"""Per-key limits (engine.server.ratelimit): requests in flight and per minute, 429 with Retry-After in
the OpenAI error shape, per tenant, before the body is read; the bucket's arithmetic on a fake clock."""

from __future__ import annotations

import threading

import httpx
import pytest
from openai import OpenAI, RateLimitError

from engine.errors import AKVError
from engine.server import ServerThread, create_app
from engine.server.ratelimit import Gate, TenantLimits
from engine.server.tenants import Tenants
from tests.engine.agent import trajectory
from tests.engine.test_engine import fresh

ALICE, BOB = "alice-key-0123456789", "bob-key-0123456789"


def test_the_bucket_refills_at_its_rate_and_says_when_to_retry():
    now = [100.0]
    gate = Gate(TenantLimits(per_minute=30, burst=2), clock=lambda: now[0])
    assert gate.enter("a") is None and gate.enter("a") is None  # the burst
    assert gate.enter("a") == ("rate_limit_exceeded", 2)  # a token every 2 s
    assert gate.enter("b") is None  # another tenant's bucket is its own
    now[0] += 1.0
    assert gate.enter("a") == ("rate_limit_exceeded", 1)  # half a token: 1 s more
    now[0] += 1.01
    assert gate.enter("a") is None
    now[0] += 600  # a long pause refills to the burst, not beyond
    assert [gate.enter("a") for _ in range(3)] == [None, None, ("rate_limit_exceeded", 2)]


def test_in_flight_requests_are_counted_and_released():
    gate = Gate(TenantLimits(max_concurrent=2))
    assert gate.enter("a") is None and gate.enter("a") is None
    assert gate.enter("a") == ("too_many_concurrent_requests", 1)
    gate.leave("a")
    assert gate.enter("a") is None and gate.inflight("a") == 2


def test_the_slot_is_given_back_before_the_last_chunk_of_the_answer_goes_out():
    """A client that has its whole answer may send its next request at once (one request at a time is
    never refused for concurrency): the middleware frees the slot before the final body message."""
    import asyncio

    from engine.server.ratelimit import TenantLimitMiddleware

    gate = Gate(TenantLimits(max_concurrent=1))
    seen: list[tuple[str, bool, int]] = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        await send({"type": "http.response.body", "body": b"b"})

    async def send(message):
        seen.append((message["type"], message.get("more_body", False), gate.inflight("")))

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "state": {}}
    middleware = TenantLimitMiddleware(app, gate)
    for _ in range(2):  # the second request is admitted: the first one's slot came back
        asyncio.run(middleware(scope, None, send))
    assert [inflight for *_, inflight in seen] == [1, 1, 0] * 2  # held while streaming, freed before the end
    assert gate.inflight("") == 0  # and given back once, not twice


@pytest.mark.parametrize("kwargs", [{"max_concurrent": -1}, {"burst": 1.5}, {"per_minute": float("nan")},
                                    {"per_minute": -3}, {"max_concurrent": True}])
def test_bad_limits_are_refused_by_name(kwargs):
    with pytest.raises(AKVError, match=next(iter(kwargs))):
        TenantLimits(**kwargs)


@pytest.fixture(scope="module")
def limited(tiny, tmp_path_factory):
    eng = fresh(tiny)
    app = create_app(eng, snapshot_dir=tmp_path_factory.mktemp("snaps"), max_queue=8, max_batch=2,
                     tenants=Tenants([f"alice:{ALICE}", f"bob:{BOB}"]),
                     tenant_limits=TenantLimits(max_concurrent=1, per_minute=6, burst=2))
    with ServerThread(app) as srv:
        yield srv


def _client(srv, key):
    return OpenAI(base_url=srv.base_url + "/v1", api_key=key, max_retries=0)


def test_a_key_over_its_rate_gets_429_with_retry_after_and_other_keys_do_not(limited):
    for _ in range(2):
        _client(limited, ALICE).chat.completions.create(model="tiny-random", messages=trajectory(2), max_tokens=1)
    with pytest.raises(RateLimitError) as err:
        _client(limited, ALICE).chat.completions.create(model="tiny-random", messages=trajectory(2), max_tokens=1)
    r = err.value.response
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    body = r.json()["error"]
    assert body["code"] == "rate_limit_exceeded" and body["type"] == "requests" and "6 requests a minute" in \
        body["message"]
    _client(limited, BOB).chat.completions.create(model="tiny-random", messages=trajectory(2), max_tokens=1)
    assert httpx.get(limited.base_url + "/health").status_code == 200  # never counted
    models = httpx.get(limited.base_url + "/v1/models", headers={"authorization": f"Bearer {ALICE}"})
    assert models.status_code == 200


def test_a_refusal_does_not_read_the_body(limited):
    # alice's bucket is empty now: a body over the 4 MiB limit is refused by the key's limit first (429,
    # not the body limit's 413): the refusal comes before the body is read
    r = httpx.post(limited.base_url + "/v1/chat/completions", content=b"{" * (5 << 20),
                   headers={"authorization": f"Bearer {ALICE}", "content-type": "application/json"})
    assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limit_exceeded"


def test_a_second_request_in_flight_of_one_key_is_refused(tiny, tmp_path):
    eng = fresh(tiny)
    app = create_app(eng, snapshot_dir=tmp_path, max_queue=8, max_batch=2,
                     tenants=Tenants([f"alice:{ALICE}", f"bob:{BOB}"]), tenant_limits=TenantLimits(max_concurrent=1))
    gate = app.state.gate
    with ServerThread(app) as srv:
        assert gate.enter("alice") is None  # one of alice's requests is in flight
        try:
            with pytest.raises(RateLimitError) as err:
                _client(srv, ALICE).chat.completions.create(model="tiny-random", messages=trajectory(2), max_tokens=1)
            assert err.value.response.json()["error"]["code"] == "too_many_concurrent_requests"
            done = threading.Event()

            def bob() -> None:
                _client(srv, BOB).chat.completions.create(model="tiny-random", messages=trajectory(2), max_tokens=1)
                done.set()

            t = threading.Thread(target=bob)
            t.start()
            t.join(60)
            assert done.is_set()  # another key is not held up
        finally:
            gate.leave("alice")
        _client(srv, ALICE).chat.completions.create(model="tiny-random", messages=trajectory(2), max_tokens=1)
        assert gate.inflight("alice") == 0 and gate.inflight("bob") == 0  # every slot given back
