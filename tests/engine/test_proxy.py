"""The AKV proxy (``engine.server.proxy``) in front of a real ``akv serve`` app on loopback: a chat
for ``MODEL@NAME`` through the proxy answers the plain openai client exactly as the upstream answers
the client-side schedule (text, token ids, usage; whole and streamed); plain requests and bad bodies
get the upstream's answers; a refused schedule is sent again without new drops; keys and limits are
the server's; floods and streams hung up leave both serving; an upstream that is down is a 502.
``akv proxy`` itself is started once, with a built-in policy, against the same upstream."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import httpx
import pytest
from openai import OpenAI

from engine.server import ServerThread, create_app
from engine.server.policies import Policies
from engine.server.proxy import create_proxy
from engine.server.ratelimit import TenantLimits
from engine.server.tenants import Tenants
from engine.server.upstream import Upstream
from tests.engine.agent import trajectory
from tests.engine.test_engine import fresh, rolling
from tests.engine.test_served_policy import Stub, _fails, hang_up_streams
from tests.engine.test_server import BAD, _free_port, wait_idle

_flip = itertools.count()


def _shifty(n: int) -> dict[str, Any]:
    """Drops message 3 the first time, message 1 the next: the second rewrites a session's past."""
    return {"drop_message": {"5": [3 if next(_flip) % 2 == 0 else 1]}}


def _stubs() -> list[Stub]:
    return [Stub("k1", lambda n: rolling(n, 1)), Stub("fails", _fails), Stub("shifty", _shifty)]


def _proxy_app(upstream_url: str, renderer: Any, **kw: Any) -> Any:
    return create_proxy(Upstream(upstream_url, timeout_s=60), renderer, "tiny-random",
                        policies=Policies(_stubs(), time_limit_s=5), **kw)


@pytest.fixture(scope="module")
def pair(tiny, tmp_path_factory):
    """The upstream (an ``akv serve`` app without policies) and the proxy in front of it."""
    eng = fresh(tiny)
    upstream = ServerThread(create_app(eng, snapshot_dir=tmp_path_factory.mktemp("up"), max_queue=8, max_batch=4))
    with upstream:
        upstream.engine = eng
        with ServerThread(_proxy_app(upstream.base_url, eng.renderer)) as proxy:
            yield upstream, proxy


def _client(srv: Any, key: str = "unused") -> OpenAI:
    return OpenAI(base_url=srv.base_url + "/v1", api_key=key, max_retries=0)


def _plain(usage: Any) -> dict[str, Any]:
    out = usage.model_dump() if hasattr(usage, "model_dump") else dict(usage)
    out.pop("akv_policy", None)
    return out


def _post(srv: Any, body: Any, raw: bytes | None = None, **kw: Any) -> httpx.Response:
    if raw is not None:
        return httpx.post(srv.base_url + "/v1/chat/completions", content=raw,
                          headers={"content-type": "application/json"}, timeout=60, **kw)
    return httpx.post(srv.base_url + "/v1/chat/completions", json=body, timeout=60, **kw)


def _stream(client: OpenAI, **kw: Any) -> tuple[str, Any]:
    pieces, usage = [], None
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        usage = chunk.usage or usage
    return "".join(pieces), usage


def test_a_policy_model_through_the_proxy_answers_as_the_client_side_schedule(pair):
    upstream, proxy = pair
    msgs = trajectory(4)
    sched = rolling(len(msgs), 1)
    direct, through = _client(upstream), _client(proxy)
    extra = {"return_token_ids": True}
    explicit = [direct.chat.completions.create(model="tiny-random", messages=msgs, max_tokens=6,
                                               extra_body={**sched, **extra}) for _ in range(2)]
    raw = through.chat.completions.with_raw_response.create(model="tiny-random@k1", messages=msgs, max_tokens=6,
                                                            extra_body=extra)
    served = raw.parse()
    assert raw.headers["x-akv-policy"] == "k1; ok" and served.model == "tiny-random@k1"
    assert served.choices[0].message.content == explicit[1].choices[0].message.content
    assert served.model_dump()["choices"][0]["token_ids"] == explicit[1].model_dump()["choices"][0]["token_ids"]
    assert _plain(served.usage) == _plain(explicit[1].usage)
    assert served.usage.model_dump()["akv_policy"] == {"name": "k1", "ok": True}
    assert served.usage.prompt_tokens_details.drop_skipped_tokens > 0  # the drops were applied upstream
    text, usage = _stream(through, model="tiny-random@k1", messages=msgs, max_tokens=6)
    assert text == explicit[1].choices[0].message.content
    assert usage is not None and _plain(usage) == _plain(explicit[1].usage)
    assert usage.model_dump()["akv_policy"] == {"name": "k1", "ok": True}
    # plain tiny-random, with the client's own schedule: passed through unchanged
    again = through.chat.completions.create(model="tiny-random", messages=msgs, max_tokens=6,
                                            extra_body={**sched, **extra})
    assert again.model == "tiny-random" and again.model_dump()["choices"] == explicit[1].model_dump()["choices"]
    assert _plain(again.usage) == _plain(explicit[1].usage) and "akv_policy" not in again.usage.model_dump()
    assert _stream(through, model="tiny-random", messages=msgs, max_tokens=6, extra_body=sched)[0] == text


def test_models_metrics_health_and_failures_reported_as_the_server_does(pair):
    upstream, proxy = pair
    ids = [m["id"] for m in httpx.get(proxy.base_url + "/v1/models").json()["data"]]
    assert ids == ["tiny-random", "tiny-random@k1", "tiny-random@fails", "tiny-random@shifty"]
    assert httpx.get(proxy.base_url + "/health").json()["status"] == "ok"
    msgs = trajectory(4)
    r = _post(proxy, {"model": "tiny-random@fails", "messages": msgs, "max_tokens": 3})
    assert r.status_code == 200 and r.headers["x-akv-policy"] == "fails; error; fallback=previous", r.text
    same = _post(upstream, {"model": "tiny-random", "messages": msgs, "max_tokens": 3, **rolling(len(msgs) - 2, 1)})
    assert r.json()["choices"][0]["message"] == same.json()["choices"][0]["message"]
    assert r.json()["usage"]["akv_policy"]["fallback"] == "previous"
    text = httpx.get(proxy.base_url + "/metrics").text
    assert 'akv_policy_requests_total{outcome="error",policy="fails"} 1.0' in text
    for field, value in (("drop_message", {"5": [3]}), ("cache", {"reposition": [5]})):
        r = _post(proxy, {"model": "tiny-random@k1", "messages": msgs, field: value})
        assert r.status_code == 400 and "gets its schedule from policy 'k1'" in r.json()["error"]["message"]


def test_a_schedule_the_upstream_refuses_is_sent_again_without_new_drops(pair):
    _, proxy = pair
    msgs = trajectory(4)
    first = _post(proxy, {"model": "tiny-random@shifty", "messages": msgs, "session_id": "shift", "max_tokens": 2})
    assert first.status_code == 200 and first.headers["x-akv-policy"] == "shifty; ok", first.text
    second = _post(proxy, {"model": "tiny-random@shifty", "messages": msgs, "session_id": "shift", "max_tokens": 2})
    assert second.status_code == 200, second.text
    report = second.json()["usage"]["akv_policy"]
    assert report["outcome"] == "refused" and report["fallback"] == "previous"
    assert "the upstream refused the schedule" in report["reason"]


@pytest.mark.parametrize(("case", "body", "raw", "status", "param"), BAD, ids=[b[0] for b in BAD])
def test_bad_bodies_get_the_server_s_errors_through_the_proxy(pair, case, body, raw, status, param):
    upstream, proxy = pair
    mine, theirs = _post(proxy, body, raw), _post(upstream, body, raw)
    assert (mine.status_code, mine.json()) == (theirs.status_code, theirs.json())
    if body is not None and body.get("model") is None:  # the same body for the policy model
        r = _post(proxy, {**body, "model": "tiny-random@k1"})
        sends_schedule = any(k in body for k in ("drop_message", "reposition", "drop_rule"))
        assert r.status_code == (400 if sends_schedule else status), r.text
        assert r.json()["error"]["param"] == (param.split(".")[0] if sends_schedule else param)
    wait_idle(upstream.engine)
    upstream.engine.check_integrity()


def test_streams_hung_up_through_the_proxy_free_every_lock(pair):
    upstream, proxy = pair

    hang_up_streams(proxy.base_url, ("tiny-random@k1", "tiny-random@fails", "tiny-random", "tiny-random@k1"))
    wait_idle(upstream.engine)
    upstream.engine.check_integrity()
    assert _post(proxy, {"model": "tiny-random@k1", "messages": trajectory(2), "max_tokens": 2}).status_code == 200


def test_a_flood_gets_the_upstream_s_503s_and_both_recover(tiny, tmp_path):
    eng = fresh(tiny)
    with ServerThread(create_app(eng, snapshot_dir=tmp_path, max_queue=1, max_batch=1)) as up, \
            ServerThread(_proxy_app(up.base_url, eng.renderer)) as proxy:
        answers: list[httpx.Response] = []

        def call() -> None:
            answers.append(_post(proxy, {"model": "tiny-random@k1", "messages": trajectory(6), "max_tokens": 60,
                                         "stop": []}))

        threads = [threading.Thread(target=call) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = [a.status_code for a in answers]
        assert 503 in codes and 200 in codes and set(codes) <= {200, 503}
        busy = next(a for a in answers if a.status_code == 503)
        assert busy.headers["retry-after"] == "1" and busy.json()["error"]["code"] == "queue_full"
        wait_idle(eng)
        eng.check_integrity()
        assert _post(proxy, {"model": "tiny-random@k1", "messages": trajectory(2), "max_tokens": 2}).status_code == 200


def test_keys_and_limits_are_the_proxy_s_and_an_upstream_down_is_a_502(pair):
    upstream, _ = pair
    renderer = upstream.engine.renderer
    keyed = _proxy_app(upstream.base_url, renderer, tenants=Tenants(["alice:ka"]),
                       tenant_limits=TenantLimits(per_minute=6, burst=1))
    body = {"model": "tiny-random@k1", "messages": trajectory(2), "max_tokens": 2}
    with ServerThread(keyed) as proxy:
        r = _post(proxy, body)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert _post(proxy, body, headers={"authorization": "Bearer ka"}).status_code == 200
        r = _post(proxy, body, headers={"authorization": "Bearer ka"})
        assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limit_exceeded"
    with ServerThread(_proxy_app(f"http://127.0.0.1:{_free_port()}", renderer)) as down:
        for model in ("tiny-random@k1", "tiny-random"):
            r = _post(down, {**body, "model": model})
            assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_unreachable", r.text
        assert httpx.get(down.base_url + "/health").status_code == 503
        assert 'akv_proxy_upstream_failures_total{code="upstream_unreachable"} 2.0' in \
            httpx.get(down.base_url + "/metrics").text


def test_akv_proxy_command_line_in_front_of_a_server(pair, tmp_path):
    """``akv proxy`` with a built-in policy: the openai client naming ``tiny-random@k1`` gets the
    drops and the reply of the client-side schedule (rolling_drop, K=1, the served model's counts)."""
    from search_spaces import get_policy

    upstream, _ = pair
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("AKV_API_KEY", None)
    proc = subprocess.Popen([sys.executable, "-m", "rsi.cli", "proxy", "--upstream", upstream.base_url, "--model",
                             "tiny-random", "--port", str(port), "--policy", "k1=rolling_drop:keep_tool_responses=1"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "akv proxy did not come up"
            time.sleep(0.25)
        msgs = trajectory(5)
        counts = upstream.engine.render(msgs).message_tokens
        schedule = get_policy("rolling_drop", keep_tool_responses=1).run_episode(msgs, token_counts=counts)[-1].wire
        assert schedule.get("drop_message")
        direct = [_client(upstream).chat.completions.create(model="tiny-random", messages=msgs, max_tokens=5,
                                                            extra_body=schedule) for _ in range(2)][1]
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        served = client.chat.completions.create(model="tiny-random@k1", messages=msgs, max_tokens=5)
        assert served.choices[0].message.content == direct.choices[0].message.content
        assert _plain(served.usage) == _plain(direct.usage) and served.usage.prompt_tokens_details.drop_skipped_tokens
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
