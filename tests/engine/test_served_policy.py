"""Policies served by model name (``MODEL@NAME``), on a real server driven by the openai client and raw
HTTP: the served schedule equals the same request with that schedule sent by the client; a failing
policy (exception, time-out, a schedule the engine refuses) never fails the request; the server's
bad-body, flood and disconnect behaviour holds for policy models. The policies here are stubs of
the interface (``engine.served_policy.ServedPolicy``); the real ones are tested in
``tests/rsi/test_serve_policies.py``."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import pytest
from openai import OpenAI

from engine.served_policy import PolicyFailure, PolicyOutcome, ServedPolicy
from engine.server import ServerThread, create_app
from engine.server.policies import Policies
from tests.engine.agent import trajectory
from tests.engine.test_engine import fresh, rolling
from tests.engine.test_server import BAD, wait_idle


class Stub:
    """A served policy of this test: ``decide(n)`` gives the schedule of a request of n messages."""

    def __init__(self, name: str, decide: Any) -> None:
        self.name = name
        self.decide = decide
        self.calls = 0

    def schedule(self, messages: Sequence[Mapping[str, Any]], token_counts: Sequence[int]) -> dict[str, Any]:
        assert len(token_counts) == len(messages) and all(c > 0 for c in token_counts)
        self.calls += 1
        return self.decide(len(messages))


def _fails(n: int) -> dict[str, Any]:
    raise PolicyFailure("decide: ValueError: boom", fallback=rolling(n - 2, 1))


def _bug(n: int) -> dict[str, Any]:
    return {"x": 1 // 0}


def _slow(n: int) -> dict[str, Any]:
    time.sleep(1.5)
    return rolling(n, 1)


POLICIES = {"k1": lambda n: rolling(n, 1), "fails": _fails, "bug": _bug, "slow": _slow,
            "bad": lambda n: {"drop_message": {"1": [n + 5]}}}


@pytest.fixture(scope="module")
def server(tiny, tmp_path_factory):
    eng = fresh(tiny)
    stubs = [Stub(name, fn) for name, fn in POLICIES.items()]
    assert all(isinstance(s, ServedPolicy) for s in stubs)
    app = create_app(eng, snapshot_dir=tmp_path_factory.mktemp("snaps"), max_queue=8, max_batch=4,
                     policies=Policies(stubs, time_limit_s=0.5))
    with ServerThread(app) as srv:
        srv.engine = eng
        yield srv


@pytest.fixture
def oai(server):
    return OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)


def _post(server, body, raw=None):
    if raw is not None:
        return httpx.post(server.base_url + "/v1/chat/completions", content=raw,
                          headers={"content-type": "application/json"}, timeout=60)
    return httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=60)


def _plain(usage: Any) -> dict[str, Any]:
    out = usage.model_dump() if hasattr(usage, "model_dump") else dict(usage)
    out.pop("akv_policy", None)
    return out


def test_models_lists_each_policy_and_metrics_count_them(server):
    ids = [m["id"] for m in httpx.get(server.base_url + "/v1/models").json()["data"]]
    assert ids == ["tiny-random", *(f"tiny-random@{n}" for n in POLICIES)]
    assert 'akv_policy_requests_total{outcome="ok",policy="k1"}' in httpx.get(server.base_url + "/metrics").text


def test_a_policy_model_serves_the_schedule_the_client_would_send(server, oai):
    msgs = trajectory(4)
    sched = rolling(len(msgs), 1)
    explicit = [oai.chat.completions.create(model="tiny-random", messages=msgs, max_tokens=6, extra_body=sched)
                for _ in range(2)]  # the second reads the cache as the served request will
    raw = oai.chat.completions.with_raw_response.create(model="tiny-random@k1", messages=msgs, max_tokens=6)
    served = raw.parse()
    assert raw.headers["x-akv-policy"] == "k1; ok" and served.model == "tiny-random@k1"
    assert served.choices[0].message.content == explicit[1].choices[0].message.content
    assert _plain(served.usage) == _plain(explicit[1].usage)
    assert served.usage.model_dump()["akv_policy"] == {"name": "k1", "ok": True}
    assert served.usage.prompt_tokens_details.drop_skipped_tokens > 0  # the drops were applied
    stream = oai.chat.completions.create(model="tiny-random@k1", messages=msgs, max_tokens=6, stream=True,
                                         stream_options={"include_usage": True})
    pieces, usage = [], None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        usage = chunk.usage or usage
    assert "".join(pieces) == explicit[1].choices[0].message.content
    assert usage is not None and _plain(usage) == _plain(explicit[1].usage)


def test_schedule_fields_with_a_policy_model_are_refused_and_unknown_policies_are_404(server):
    for field, value in (("drop_message", {"5": [3]}), ("reposition", [5]), ("cache", {"reposition": [5]})):
        r = _post(server, {"model": "tiny-random@k1", "messages": trajectory(3), field: value})
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
        assert "gets its schedule from policy 'k1'" in r.json()["error"]["message"]
    r = _post(server, {"model": "tiny-random@nope", "messages": trajectory(3)})
    assert r.status_code == 404 and "tiny-random@k1" in r.json()["error"]["message"]
    assert _post(server, {"model": "tiny-random", "messages": trajectory(2), "max_tokens": 2}).status_code == 200


@pytest.mark.parametrize(("name", "outcome", "fallback"), [
    ("fails", PolicyOutcome.ERROR, "previous"), ("bug", PolicyOutcome.ERROR, "full"),
    ("slow", PolicyOutcome.TIMEOUT, "full"), ("bad", PolicyOutcome.REFUSED, "full")])
def test_a_failing_policy_serves_without_new_drops_and_says_so(server, name, outcome, fallback):
    msgs = trajectory(4)
    before = _count(server, name, outcome)
    r = _post(server, {"model": f"tiny-random@{name}", "messages": msgs, "max_tokens": 3})
    assert r.status_code == 200, r.text
    report = r.json()["usage"]["akv_policy"]
    assert report["ok"] is False and report["outcome"] == outcome.value and report["fallback"] == fallback
    assert report["reason"] and "\n" not in report["reason"]
    assert r.headers["x-akv-policy"] == f"{name}; {outcome.value}; fallback={fallback}"
    sched = rolling(len(msgs) - 2, 1) if fallback == "previous" else {}
    same = _post(server, {"model": "tiny-random", "messages": msgs, "max_tokens": 3, **sched}).json()
    assert r.json()["choices"][0]["message"] == same["choices"][0]["message"]
    assert _count(server, name, outcome) == before + 1
    wait_idle(server.engine)
    server.engine.check_integrity()


def test_a_session_whose_policy_fails_keeps_its_last_schedule(server):
    msgs = trajectory(4)
    ok = _post(server, {"model": "tiny-random@k1", "messages": msgs[:6], "session_id": "s-fail", "max_tokens": 2})
    assert ok.status_code == 200, ok.text
    r = _post(server, {"model": "tiny-random@bug", "messages": msgs, "session_id": "s-fail", "max_tokens": 2})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["akv_policy"]["fallback"] == "previous"  # the session's, not the full cache (400)


def _count(server, name: str, outcome: PolicyOutcome) -> float:
    for line in httpx.get(server.base_url + "/metrics").text.splitlines():
        if line.startswith(f'akv_policy_requests_total{{outcome="{outcome.value}",policy="{name}"}}'):
            return float(line.split()[-1])
    raise AssertionError(f"no counter for {name} {outcome}")


@pytest.mark.parametrize(("case", "body", "raw", "status", "param"), BAD, ids=[b[0] for b in BAD])
def test_bad_bodies_for_a_policy_model_get_the_same_errors(server, case, body, raw, status, param):
    if body is not None and body.get("model") is None:
        body = {**body, "model": "tiny-random@k1"}
    sends_schedule = body is not None and any(k in body for k in ("drop_message", "reposition", "drop_rule"))
    r = _post(server, body, raw)
    if sends_schedule:  # refused before the schedule is looked at: the policy gives it
        assert r.status_code == 400 and r.json()["error"]["param"] == param.split(".")[0], r.text
    else:
        assert r.status_code == status, r.text
        assert r.json()["error"]["param"] == param
    wait_idle(server.engine)
    server.engine.check_integrity()
    assert _post(server, {"model": "tiny-random@k1", "messages": trajectory(2), "max_tokens": 2}).status_code == 200


def test_a_flood_of_policy_requests_gets_503s_and_the_server_recovers(tiny, tmp_path):
    eng = fresh(tiny)
    app = create_app(eng, snapshot_dir=tmp_path, max_queue=1, max_batch=1,
                     policies=[Stub("k1", lambda n: rolling(n, 1))])
    with ServerThread(app) as srv:
        codes: list[int] = []

        def call() -> None:
            r = httpx.post(srv.base_url + "/v1/chat/completions", timeout=120,
                           json={"model": "tiny-random@k1", "messages": trajectory(6), "max_tokens": 60, "stop": []})
            codes.append(r.status_code)

        threads = [threading.Thread(target=call) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert 503 in codes and 200 in codes and set(codes) <= {200, 503}
        wait_idle(eng)
        eng.check_integrity()


def hang_up_streams(base_url: str, models: Sequence[str]) -> None:
    """One streamed chat per model at once, each hung up as soon as a piece of content arrives."""
    def hang_up(model: str) -> None:
        body = {"model": model, "messages": trajectory(4), "max_tokens": 300, "stop": [], "stream": True}
        with httpx.Client(timeout=60) as http, http.stream("POST", base_url + "/v1/chat/completions",
                                                           json=body) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: ") and '"content": "' in line and json.loads(line[6:])["choices"]:
                    break  # one piece of content arrived; hang up

    threads = [threading.Thread(target=hang_up, args=(m,)) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_concurrent_policy_streams_with_disconnects_free_every_lock(server):
    hang_up_streams(server.base_url, ("tiny-random@k1", "tiny-random@fails", "tiny-random", "tiny-random@k1"))
    wait_idle(server.engine)
    server.engine.check_integrity()
    assert _post(server, {"model": "tiny-random@k1", "messages": trajectory(2), "max_tokens": 2}).status_code == 200
