"""RemoteEngine against hostile and partial servers: our server's errors mapped to the engine's
exceptions, a stock-SGLang-like server (no scoring, no schedule), malformed answers, a server that
is down or busy, and the replay evaluator unchanged over HTTP."""

from __future__ import annotations

import socket

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from engine import ContextLengthError, Engine, ScheduleError
from engine.errors import AKVError, CapacityError, RemoteError, RemoteUnavailableError, ScoringUnsupportedError
from engine.remote import RemoteEngine
from engine.server import ServerThread, create_app
from evals.cache.evaluator import EvalConfig, PolicySpec, Replay
from evals.tasks import load_suite
from tests.engine.agent import trajectory
from tests.engine.test_engine import fresh

pytestmark = pytest.mark.usefixtures("one_thread")  # see tests/conftest.py


@pytest.fixture(scope="module")
def ours(tiny, tmp_path_factory):
    eng = fresh(tiny)
    with ServerThread(create_app(eng, snapshot_dir=tmp_path_factory.mktemp("snaps"))) as srv:
        remote = RemoteEngine(srv.base_url, "tiny-random", check_usage="raise")
        yield remote
        remote.close()
    eng.check_integrity()


def sglang_like(answers: list | None = None) -> FastAPI:
    """A stand-in for stock SGLang: chat completions with plain OpenAI usage, no AKV routes.

    ``answers``: a queue of (status, body) to answer chat requests with, before the default.
    """
    app = FastAPI()
    app.state.requests = []
    queue = list(answers or [])

    @app.get("/health")
    async def health() -> PlainTextResponse:
        return PlainTextResponse("")

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": "tiny-random", "object": "model", "owned_by": "sglang"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        app.state.requests.append(body)
        if queue:
            status, answer = queue.pop(0)
            if isinstance(answer, str):
                return PlainTextResponse(answer, status_code=status)
            return JSONResponse(answer, status_code=status, headers={"Retry-After": "0"})
        return {"id": "x", "object": "chat.completion", "model": "tiny-random",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": " Warehouse A"},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9,
                          "prompt_tokens_details": {"cached_tokens": 3}}}

    return app


@pytest.fixture
def sglang():
    def start(answers=None):
        srv = ServerThread(sglang_like(answers))
        srv.start()
        started.append(srv)
        return srv

    started: list[ServerThread] = []
    yield start
    for s in started:
        s.stop()


def test_server_side_errors_become_the_engine_exceptions(ours, tiny, tmp_path):
    bad = {"model": "tiny-random", "messages": trajectory(2), "drop_message": {"2": [4]}}
    with pytest.raises(ScheduleError) as err:
        ours.wire.post("/v1/chat/completions", bad)  # past local validation: the server's answer
    assert err.value.field == "drop_message.2" and err.value.status == 400
    with pytest.raises(RemoteError) as unknown:
        ours.wire.post("/v1/chat/completions", {"model": "gpt-9", "messages": trajectory(2)})
    assert unknown.value.status == 404 and unknown.value.code == "model_not_found"
    assert ours.base_url in str(unknown.value)
    small = Engine(tiny.model, tiny.tokenizer, "gemma", max_context=64, name="tiny-random")
    with ServerThread(create_app(small, snapshot_dir=tmp_path)) as srv:
        with pytest.raises(ContextLengthError) as long:
            RemoteEngine(srv.base_url, "tiny-random").chat(trajectory(3), max_tokens=4)
        assert long.value.status == 413


def test_stock_sglang_like_server_refuses_scoring_schedules_and_prefixes(sglang):
    srv = sglang()
    remote = RemoteEngine(srv.base_url, "tiny-random", check_usage="off")
    assert remote.akv_extensions is False
    with pytest.raises(ScoringUnsupportedError) as err:
        remote.score(trajectory(2), [" A", " B"])
    assert srv.base_url in str(err.value) and "eval.scoring: generate" in str(err.value)
    plain = remote.chat(trajectory(2), max_tokens=4)
    assert plain.text == " Warehouse A" and plain.usage.cached_tokens == 3 and plain.usage.prefill_tokens == 4
    with pytest.raises(RemoteError) as ignored:
        remote.chat(trajectory(3), {"drop_message": {"5": [3]}}, max_tokens=4)
    assert ignored.value.code == "schedule_ignored" and "ignored the cache schedule" in str(ignored.value)
    with pytest.raises(RemoteError) as prefix:
        remote.chat(trajectory(2), prefix="The answer is")
    assert prefix.value.code == "no_prefix" and prefix.value.field == "prefix"
    cont = RemoteEngine(srv.base_url, "tiny-random", check_usage="off", prefix_mode="continue_final_message")
    cont.chat(trajectory(2), prefix="The answer is", max_tokens=4)
    sent = srv.server.config.app.state.requests[-1]
    assert sent["messages"][-1] == {"role": "assistant", "content": "The answer is"} and sent["continue_final_message"]
    assert "prefix" not in sent and "return_token_ids" not in sent


def test_scoring_route_missing_on_a_server_that_claims_extensions(sglang):
    srv = sglang()
    remote = RemoteEngine(srv.base_url, "tiny-random", akv_extensions=True, check_usage="off")
    with pytest.raises(ScoringUnsupportedError, match="answered HTTP 404"):
        remote.score(trajectory(2), [" A"])


@pytest.mark.parametrize(("status", "answer", "match", "exc"), [
    (200, "<html>not json</html>", "without a JSON object", RemoteError),
    (200, {"choices": [{"message": {"content": "x"}}]}, "no usage.prompt_tokens", RemoteError),
    (200, {"choices": [], "usage": {"prompt_tokens": 5, "prefill_tokens": 9}}, "does not partition", RemoteError),
    (200, {"choices": [], "usage": {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": -1}}},
     "non-negative", RemoteError),
    (500, {"error": {"message": "CUDA out of memory", "code": "oom"}}, "HTTP 500: CUDA out of memory", RemoteError),
    (502, "bad gateway", "HTTP 502: bad gateway", RemoteError),
    (503, {"error": {"message": "busy", "code": "queue_full"}}, "busy", CapacityError),
])
def test_malformed_or_failing_answers_raise_errors_naming_the_server(sglang, status, answer, match, exc):
    srv = sglang([(status, answer)] * 7)
    remote = RemoteEngine(srv.base_url, "tiny-random", check_usage="off", akv_extensions=False)
    remote.wire.busy_retries = 1
    with pytest.raises(exc, match=match) as err:
        remote.chat(trajectory(2), max_tokens=2)
    assert not err.value.transient
    if exc is RemoteError:
        assert srv.base_url in str(err.value)


def test_busy_server_is_retried(sglang):
    srv = sglang([(503, {"error": {"message": "busy", "code": "queue_full"}})] * 2)
    remote = RemoteEngine(srv.base_url, "tiny-random", check_usage="off", akv_extensions=False)
    assert remote.chat(trajectory(2), max_tokens=2).text == " Warehouse A"
    assert len(srv.server.config.app.state.requests) == 3


def test_unreachable_server_is_transient_and_not_a_policy_failure():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    remote = RemoteEngine(f"http://127.0.0.1:{port}", "tiny-random", akv_extensions=True, timeout=5)
    with pytest.raises(RemoteUnavailableError) as err:
        remote.chat(trajectory(2), max_tokens=2)
    assert err.value.transient and f"127.0.0.1:{port}" in str(err.value)
    task = load_suite("smoke", "train")[0]
    with pytest.raises(RemoteUnavailableError):
        Replay(remote, EvalConfig(generate=False)).evaluate(PolicySpec("full"), task)


def test_usage_mismatch_is_detected(sglang):
    srv = sglang()
    strict = RemoteEngine(srv.base_url, "tiny-random", check_usage="raise", akv_extensions=False)
    with pytest.raises(RemoteError, match="counted 7 prompt tokens where the local renderer counts"):
        strict.chat(trajectory(2), max_tokens=2)
    warn = RemoteEngine(srv.base_url, "tiny-random", check_usage="warn", akv_extensions=False)
    warn.chat(trajectory(2), max_tokens=2)
    assert warn.usage_mismatches == 1


def test_constructor_checks_its_options():
    with pytest.raises(ValueError, match="prefix_mode"):
        RemoteEngine("http://127.0.0.1:1", "tiny-random", prefix_mode="guess")
    with pytest.raises(AKVError, match="unknown model"):
        RemoteEngine("http://127.0.0.1:1", "no-such-model-here")


def test_replay_over_http_equals_replay_in_process(ours, tiny):
    """``Replay(RemoteEngine(...))`` works unchanged and gives the in-process results."""
    tasks = load_suite("smoke", "train")[:1]
    config = EvalConfig(generate=True)
    specs = [PolicySpec("rolling_drop", {"keep_tool_responses": 1}), PolicySpec("standard", {"window": 256})]
    local = Replay(fresh(tiny), config)
    remote = Replay(ours, config)
    for spec in specs:
        a, b = local.evaluate(spec, tasks[0]), remote.evaluate(spec, tasks[0])
        assert a.ok and b.ok, (a.error, b.error)
        ra, rb = a.to_row(), b.to_row()
        ra.pop("seconds")
        rb.pop("seconds")
        assert ra == rb


def test_replay_on_a_server_without_scoring(sglang):
    srv = sglang()
    remote = RemoteEngine(srv.base_url, "tiny-random", check_usage="off", prefix_mode="continue_final_message")
    task = load_suite("smoke", "train")[0]
    failed = Replay(remote, EvalConfig(scoring="loglik")).evaluate(PolicySpec("full"), task)
    assert not failed.ok and "eval.scoring: generate" in (failed.error or "")
    by_generation = Replay(remote, EvalConfig(scoring="generate")).evaluate(PolicySpec("full"), task)
    assert by_generation.ok, by_generation.error
    assert all(p.choice == "" and not p.mc_correct for p in by_generation.probes)
    assert all(p.generated == " Warehouse A" for p in by_generation.probes)


def test_score_route_answers_and_errors_in_the_server_shape(ours, tiny):
    import httpx

    url = ours.base_url + "/v1/akv/score"
    msgs = trajectory(3)
    ok = httpx.post(url, json={"messages": msgs, "candidates": [" A", " B"], "drop_message": {"5": [3]},
                               "prefix": "It is"}).json()
    assert ok["object"] == "akv.score" and len(ok["logprobs"]) == 2 and ok["best"] in (0, 1)
    assert set(ok["usage"]["prompt_tokens_details"]) == {"cached_tokens", "drop_skipped_tokens", "repos_tokens"}
    local = fresh(tiny).score(msgs, [" A", " B"], {"drop_message": {"5": [3]}}, prefix="It is")
    assert ok["logprobs"] == pytest.approx(local.logprobs, abs=1e-4) and ok["n_tokens"] == local.n_tokens
    for body, status, param in [
        ({"messages": msgs, "candidates": []}, 400, "candidates"),
        ({"messages": msgs, "candidates": [" A"], "reposition": [3, 3]}, 400, "reposition"),
        ({"messages": [], "candidates": [" A"]}, 400, "messages"),
        ({"messages": msgs}, 400, "candidates"),
        ({"model": "gpt-9", "messages": msgs, "candidates": [" A"]}, 404, "model"),
    ]:
        r = httpx.post(url, json=body)
        assert r.status_code == status and r.json()["error"]["param"] == param, r.text


def test_a_remote_engine_refuses_a_per_request_salt(ours):
    """The server derives the cache namespace from the API key's tenant; a salt asked of the client
    must be refused, not dropped on the way (the request would share the default namespace)."""
    before = ours.stats.requests
    with pytest.raises(AKVError) as err:
        ours.chat(trajectory(2), max_tokens=2, salt="tenant-b")
    assert err.value.field == "salt" and ours.stats.requests == before


def test_ignore_eos_generates_the_full_length_in_process_and_over_http(tiny, tmp_path):
    """The greedy first token is made a stop token: without ``ignore_eos`` the reply ends on it; with
    it the engine (and the server, sent the vLLM/SGLang field) generates all ``max_tokens``."""
    eng = fresh(tiny)
    msgs = trajectory(2)
    first = eng.chat(msgs, max_tokens=1, stop=[]).token_ids[0]
    eng.decoder.stop_ids = {first}
    with ServerThread(create_app(eng, snapshot_dir=tmp_path / "snaps")) as srv:
        remote = RemoteEngine(srv.base_url, "tiny-random", check_usage="raise")
        for e in (eng, remote):
            stopped = e.chat(msgs, max_tokens=4, stop=[])
            assert (stopped.finish_reason, len(stopped.token_ids)) == ("stop", 1)
            full = e.chat(msgs, max_tokens=4, stop=[], ignore_eos=True)
            assert (full.finish_reason, len(full.token_ids)) == ("length", 4) and full.token_ids[0] == first
        remote.close()
    with pytest.raises(AKVError) as err:
        eng.chat(msgs, ignore_eos="yes")  # type: ignore[typeddict-item]
    assert err.value.field == "ignore_eos"
