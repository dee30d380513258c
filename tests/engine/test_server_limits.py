"""Hostile requests against the HTTP server: bounded work per request, and strict 4xx errors.

Every bad request must get a 4xx in the OpenAI error shape (``{"error": {"message", "type",
"param", "code"}}``), never a 500, a reset connection or FastAPI's ``{"detail"}``; limits must
refuse before any model work; and tokenizing must never happen on the engine thread. Requests go
over real TCP (httpx, and a raw socket for bodies no client library would send).
"""

from __future__ import annotations

import json
import socket
import threading

import httpx
import pytest

from engine import Engine
from engine.server import ServerThread, create_app
from engine.server.limits import ServerLimits
from rsi.cli import build_parser
from tests.engine.agent import trajectory
from tests.engine.test_engine import fresh
from tests.engine.test_server import wait_idle

LIMITS = ServerLimits(max_body_bytes=64 << 10, max_candidates=8, max_score_tokens=40, max_json_depth=32)
CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server(tiny, tmp_path_factory):
    eng = fresh(tiny)
    app = create_app(eng, snapshot_dir=tmp_path_factory.mktemp("snaps"), limits=LIMITS)
    with ServerThread(app) as srv:
        srv.engine = eng  # type: ignore[attr-defined]
        yield srv


def raw_post(srv, path: str, body: bytes, *, chunked: bool = False, declared: int | None = None) -> tuple[int, dict]:
    """POST ``body`` over a plain socket (``chunked``: Transfer-Encoding: chunked, 4 KiB chunks;
    ``declared``: this Content-Length whatever the body); returns (status, JSON body)."""
    head = f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nConnection: close\r\n"
    if chunked:
        pieces = [body[i:i + 4096] for i in range(0, len(body), 4096)]
        payload = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"
        head += "Transfer-Encoding: chunked\r\n\r\n"
    else:
        payload = body
        head += f"Content-Length: {len(body) if declared is None else declared}\r\n\r\n"
    with socket.create_connection((srv.host, srv.port), timeout=60) as sock:
        sock.sendall(head.encode() + payload)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    _, _, content = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(content)


def assert_openai_error(status: int, body: dict, want_status: int, param: str | None = "") -> dict:
    assert status == want_status, body
    assert set(body) == {"error"}, body  # never {"detail": ...}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"] and err["type"], err
    if param != "":
        assert err["param"] == param, err
    return err


def still_serving(srv) -> None:
    wait_idle(srv.engine)
    srv.engine.check_integrity()
    r = httpx.post(srv.base_url + CHAT, json={"messages": HI, "max_tokens": 2}, timeout=60)
    assert r.status_code == 200, r.text


# ------------------------------------------------------------------ bodies


def test_declared_body_over_the_limit_is_413_without_reading_it(server):
    # Content-Length says 1 GB and no byte follows: the answer cannot have waited for the body.
    status, body = raw_post(server, CHAT, b"", declared=1 << 30)
    err = assert_openai_error(status, body, 413, "body")
    assert err["code"] == "body_too_large" and str(LIMITS.max_body_bytes) in err["message"]
    r = httpx.post(server.base_url + CHAT, content=b"x" * (LIMITS.max_body_bytes + 1),
                   headers={"content-type": "application/json"})
    assert_openai_error(r.status_code, r.json(), 413, "body")
    still_serving(server)


def test_chunked_body_is_counted_as_it_streams(server):
    big = json.dumps({"messages": [{"role": "user", "content": "y" * (LIMITS.max_body_bytes + 10)}]}).encode()
    status, body = raw_post(server, CHAT, big, chunked=True)
    assert assert_openai_error(status, body, 413, "body")["code"] == "body_too_large"
    # A chunked body under the limit is read whole and served.
    ok = json.dumps({"messages": HI, "max_tokens": 2}).encode()
    status, body = raw_post(server, CHAT, ok, chunked=True)
    assert status == 200 and body["choices"][0]["finish_reason"] in ("length", "stop")
    still_serving(server)


def _deep(n: int) -> bytes:
    return b'{"messages": [{"role": "user", "content": "x"}], "tools": ' + b"[" * n + b"]" * n + b"}"


def _chat_raw(extra: str) -> bytes:
    return ('{"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, ' + extra + "}").encode()


RAW = [
    ("non-utf8", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', "body", "invalid_json"),
    ("5000-digit int", _chat_raw('"max_tokens": ' + "9" * 5000), "body", "invalid_json"),
    ("30k-deep", _deep(30_000), "body", "invalid_json"),
    ("33-deep", _deep(LIMITS.max_json_depth + 1), "body", "invalid_json"),
    ("NaN", _chat_raw('"temperature": NaN'), "body", "invalid_json"),
    ("Infinity", _chat_raw('"timeout": Infinity'), "body", "invalid_json"),
    ("1e999", _chat_raw('"temperature": 1e999'), "body", "invalid_json"),
    ("duplicate key", _chat_raw('"max_tokens": 3'), "body", "invalid_json"),
    ("lone surrogate", b'{"messages": [{"role": "user", "content": "a\\ud800b"}]}', "messages[0].content",
     "invalid_string"),
    ("surrogate key", b'{"messages": [{"role": "user", "content": "a"}], "\\udfff": 1}', "body", "invalid_string"),
    ("truncated", b'{"messages": [', "body", "json_invalid"),
    ("empty", b"", "body", "json_invalid"),
    ("not an object", b"[1, 2]", "body", "invalid_type"),
]


@pytest.mark.parametrize(("case", "raw", "param", "code"), RAW, ids=[r[0] for r in RAW])
def test_unparseable_bodies_are_400_in_the_openai_shape(server, case, raw, param, code):
    status, body = raw_post(server, CHAT, raw)
    assert assert_openai_error(status, body, 400, param)["code"] == code


def test_lone_surrogate_in_cache_save_is_400(server):
    status, body = raw_post(server, "/v1/cache/save",
                            b'{"name": "s", "messages": [{"role": "user", "content": "\\udc80"}]}')
    assert assert_openai_error(status, body, 400, "messages[0].content")["code"] == "invalid_string"


# ------------------------------------------------------------------ fields

MSGS4 = trajectory(2)  # 5 messages: ids 0..4

BAD = [
    ("seed 2**63", {"seed": 2**63}, 400, "seed"),
    ("seed 2**64", {"seed": 2**64}, 400, "seed"),
    ("seed -2**63-1", {"seed": -(2**63) - 1}, 400, "seed"),
    ("seed float", {"seed": 1.5}, 400, "seed"),
    ("max_tokens true", {"max_tokens": True}, 400, "max_tokens"),
    ("max_tokens 2.0", {"max_tokens": 2.0}, 400, "max_tokens"),
    ("max_tokens negative", {"max_tokens": -1}, 400, "max_tokens"),
    ("max_tokens huge", {"max_tokens": 10**12}, 413, "messages"),
    ("max_completion_tokens zero", {"max_completion_tokens": 0}, 400, "max_tokens"),
    ("stream yes", {"stream": "yes"}, 400, "stream"),
    ("stream 1", {"stream": 1}, 400, "stream"),
    ("include_usage yes", {"stream": True, "stream_options": {"include_usage": "yes"}}, 400,
     "stream_options.include_usage"),
    ("return_token_ids 1", {"return_token_ids": 1}, 400, "return_token_ids"),
    ("stop ['']", {"stop": [""]}, 400, "stop"),
    ("stop ''", {"stop": ""}, 400, "stop"),
    ("stop [1]", {"stop": [1]}, 400, "stop"),
    ("stop {}", {"stop": {"a": 1}}, 400, "stop"),
    ("17 stops", {"stop": [f"s{i}" for i in range(17)]}, 400, "stop"),
    ("100k stops", {"stop": ["ab"] * 100_000}, 413, "body"),
    ("long stop", {"stop": ["z" * 1001]}, 400, "stop"),
    ("temperature string", {"temperature": "0.5"}, 400, "temperature"),
    ("temperature true", {"temperature": True}, 400, "temperature"),
    ("temperature -1", {"temperature": -1}, 400, "temperature"),
    ("temperature 1e6", {"temperature": 1e6}, 400, "temperature"),
    ("top_p 0", {"top_p": 0}, 400, "top_p"),
    ("top_p 1.5", {"top_p": 1.5}, 400, "top_p"),
    ("n 2", {"n": 2}, 400, "n"),
    ("n true", {"n": True}, 400, "n"),
    ("n 10**9", {"n": 10**9}, 400, "n"),
    ("empty session_id", {"session_id": ""}, 400, "session_id"),
    ("giant session_id", {"session_id": "s" * 5000}, 400, "session_id"),
    ("session_id int", {"session_id": 7}, 400, "session_id"),
    ("timeout 0", {"timeout": 0}, 400, "timeout"),
    ("timeout 1e308", {"timeout": 1e308}, 400, "timeout"),
    ("giant model", {"model": "m" * 300}, 400, "model"),
    ("prefix int", {"prefix": 3}, 400, "prefix"),
    ("key ' 3'", {"drop_message": {" 3": [1]}}, 400, "drop_message"),
    ("key '03'", {"drop_message": {"03": [1]}}, 400, "drop_message"),
    ("key '+3'", {"drop_message": {"+3": [1]}}, 400, "drop_message"),
    ("key '3 '", {"drop_message": {"3 ": [1]}}, 400, "drop_message"),
    ("key arabic 3", {"drop_message": {"\u0663": [1]}}, 400, "drop_message"),
    ("key fullwidth 3", {"drop_message": {"\uff13": [1]}}, 400, "drop_message"),
    ("key -1", {"drop_message": {"-1": [0]}}, 400, "drop_message"),
    ("key 5000 digits", {"drop_message": {"1" * 5000: [0]}}, 400, "drop_message"),
    ("key 19 digits", {"drop_message": {"1" * 19: [0]}}, 400, "drop_message"),
    ("cache key '03'", {"cache": {"drop_message": {"03": [1]}}}, 400, "drop_message"),
    ("drop_rule key ' 3'", {"drop_rule": {"type": "message_drop", "drop_messages": {" 3": [1]}}}, 400,
     "drop_rule.drop_messages"),
    ("id 40 digits", {"reposition": [int("9" * 40)]}, 400, "reposition"),
]


@pytest.mark.parametrize(("case", "extra", "status", "param"), BAD, ids=[b[0] for b in BAD])
def test_bad_fields_are_4xx_in_the_openai_shape(server, case, extra, status, param):
    body = {"messages": MSGS4, "max_tokens": 2, **extra}
    r = httpx.post(server.base_url + CHAT, json=body, timeout=60)
    assert_openai_error(r.status_code, r.json(), status, param)


def test_canonical_keys_still_work(server):
    r = httpx.post(server.base_url + CHAT, json={"messages": MSGS4, "max_tokens": 2, "drop_message": {"3": [1]},
                                                 "seed": 2**63 - 1, "temperature": 1, "stop": ["\n\n"]}, timeout=60)
    assert r.status_code == 200, r.text


def test_unknown_routes_and_methods_are_openai_errors(server):
    u = server.base_url
    for r, status, code in [(httpx.get(u + "/nope"), 404, "not_found"),
                            (httpx.post(u + "/v1/nope", json={}), 404, "not_found"),
                            (httpx.get(u + CHAT), 405, "method_not_allowed"),
                            (httpx.delete(u + "/health"), 405, "method_not_allowed"),
                            (httpx.post(u + "/v1/models", json={}), 405, "method_not_allowed")]:
        assert assert_openai_error(r.status_code, r.json(), status, None)["code"] == code
    assert httpx.get(u + CHAT).headers["allow"] == "POST"


# ------------------------------------------------------------------ score limits


def test_score_over_the_candidate_or_token_cap_is_413_before_model_work(server):
    eng = server.engine
    before = (eng.stats.requests, eng.stats.prefill_tokens, eng.tree.pool_used)
    url = server.base_url + "/v1/akv/score"
    many = httpx.post(url, json={"messages": MSGS4, "candidates": [f" {i}" for i in range(9)]}, timeout=60)
    err = assert_openai_error(many.status_code, many.json(), 413, "candidates")
    assert err["code"] == "too_many_candidates" and "9" in err["message"] and "8" in err["message"]
    long = httpx.post(url, json={"messages": MSGS4, "candidates": [" zq7xj" * 30]}, timeout=60)
    err = assert_openai_error(long.status_code, long.json(), 413, "candidates")
    assert err["code"] == "too_many_tokens" and "40" in err["message"]
    assert (eng.stats.requests, eng.stats.prefill_tokens, eng.tree.pool_used) == before
    ok = httpx.post(url, json={"messages": MSGS4, "candidates": [" A", " B"] * 4}, timeout=60)
    assert ok.status_code == 200, ok.text
    want = fresh(eng).score(MSGS4, [" A", " B"] * 4)
    assert ok.json()["logprobs"] == pytest.approx(want.logprobs, abs=1e-4)


# ------------------------------------------------------------------ off the engine thread


class SpyTokenizer:
    """Delegates to a tokenizer and records which threads encoded text."""

    def __init__(self, inner):
        self._inner = inner
        self.encode_threads: list[str] = []
        self.encoded_chars: list[int] = []

    def encode(self, text, *args, **kwargs):
        self.encode_threads.append(threading.current_thread().name)
        self.encoded_chars.append(len(text))
        return self._inner.encode(text, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_prompts_are_tokenized_off_the_engine_thread(tiny, tmp_path):
    spy = SpyTokenizer(tiny.tokenizer)
    eng = Engine(tiny.model, spy, "gemma", max_context=512, name="tiny-random")
    with ServerThread(create_app(eng, snapshot_dir=tmp_path)) as srv:
        spy.encode_threads.clear()
        # 3,000 messages (~300 KB): far beyond 512 positions, refused with 413 after tokenizing on a pool thread
        huge = [{"role": "user", "content": f"message {i} " * 10} for i in range(3000)]
        r = httpx.post(srv.base_url + CHAT, json={"messages": huge, "max_tokens": 2}, timeout=120)
        assert assert_openai_error(r.status_code, r.json(), 413, "messages")["code"] == "context_length_exceeded"
        long_prefix = httpx.post(srv.base_url + CHAT, json={"messages": HI, "prefix": "word " * 5000}, timeout=120)
        assert long_prefix.status_code == 413
        ok = httpx.post(srv.base_url + CHAT, json={"messages": HI, "max_tokens": 2, "prefix": "Sure"}, timeout=60)
        assert ok.status_code == 200
        score = httpx.post(srv.base_url + "/v1/akv/score", json={"messages": HI, "candidates": [" a", " b"]})
        assert score.status_code == 200
        assert spy.encode_threads and "akv-engine" not in spy.encode_threads, set(spy.encode_threads)


def test_a_prompt_too_long_by_its_bytes_is_refused_without_tokenizing_it(tiny, tmp_path):
    # 'lorem ipsum ' * 5000 (60 KB) needs at least ~1,400 tokens by its length: beyond 512 positions,
    # refused before the tokenizer sees it; 'a' * 5000 has a bound under 512 (one 48-byte token could
    # cover 48 a's) but encodes to more: refused after tokenizing. Both refusals have the same shape.
    spy = SpyTokenizer(tiny.tokenizer)
    eng = Engine(tiny.model, spy, "gemma", max_context=512, name="tiny-random")
    with ServerThread(create_app(eng, snapshot_dir=tmp_path)) as srv:
        spy.encoded_chars.clear()
        lorem = [{"role": "user", "content": "lorem ipsum " * 5000}]
        by_bytes = httpx.post(srv.base_url + CHAT, json={"messages": lorem, "max_tokens": 2}, timeout=120)
        fast = assert_openai_error(by_bytes.status_code, by_bytes.json(), 413, "messages")
        assert max(spy.encoded_chars, default=0) < 1000, spy.encoded_chars  # the 60 KB content was never encoded
        by_tokens = httpx.post(srv.base_url + CHAT, json={"messages": [{"role": "user", "content": "a" * 5000}],
                                                          "max_tokens": 2}, timeout=120)
        slow = assert_openai_error(by_tokens.status_code, by_tokens.json(), 413, "messages")
        assert 5000 in spy.encoded_chars
        assert {k: v for k, v in fast.items() if k != "message"} == {k: v for k, v in slow.items() if k != "message"}
        assert fast["code"] == "context_length_exceeded"
        assert fast["message"].startswith("the prompt reaches at least position ")
        assert slow["message"].startswith("the prompt reaches position ")
        prefix = httpx.post(srv.base_url + CHAT, json={"messages": HI, "prefix": "lorem ipsum " * 5000}, timeout=120)
        assert assert_openai_error(prefix.status_code, prefix.json(), 413, "messages") == {
            **fast, "message": prefix.json()["error"]["message"]}
        fits = httpx.post(srv.base_url + CHAT, json={"messages": [{"role": "user", "content": "lorem ipsum " * 30}],
                                                     "max_tokens": 2}, timeout=120)
        assert fits.status_code == 200, fits.text


def test_serve_flags_set_the_limits():
    args = build_parser().parse_args(["serve", "--max-body-bytes", "1000", "--max-candidates", "3",
                                      "--max-score-tokens", "50"])
    assert (args.max_body_bytes, args.max_candidates, args.max_score_tokens) == (1000, 3, 50)
    defaults = build_parser().parse_args(["serve"])
    assert defaults.max_body_bytes == ServerLimits().max_body_bytes
    assert defaults.max_candidates == ServerLimits().max_candidates
    with pytest.raises(ValueError, match="max_candidates"):
        ServerLimits(max_candidates=0)


def test_early_length_checks_never_refuse_a_repositioned_history_that_fits(tiny, tmp_path):
    # A history longer than the window, compacted by drops + repositions so that it fits: the
    # cheap refusals (one token per message, token count before the replay) must not apply.
    from tests.engine.test_engine import rolling

    msgs = trajectory(8)
    sched = rolling(len(msgs), 1)
    history = tiny.prepare(msgs, sched).history
    reach = int(max(history.compute_pos.max() + 1, history.next_pos))
    window = reach + 4
    assert history.n_tokens > window + 50 and len(msgs) < window
    eng = Engine(tiny.model, tiny.tokenizer, "gemma", max_context=window, name="tiny-random")
    with ServerThread(create_app(eng, snapshot_dir=tmp_path)) as srv:
        ok = httpx.post(srv.base_url + CHAT, json={"messages": msgs, **sched, "max_tokens": 4}, timeout=120)
        assert ok.status_code == 200, ok.text
        too_long = httpx.post(srv.base_url + CHAT, json={"messages": msgs, **sched, "max_tokens": 5}, timeout=120)
        assert_openai_error(too_long.status_code, too_long.json(), 413, "messages")
        no_schedule = httpx.post(srv.base_url + CHAT, json={"messages": msgs, "max_tokens": 4}, timeout=120)
        assert_openai_error(no_schedule.status_code, no_schedule.json(), 413, "messages")


def test_a_null_is_shown_as_null_and_a_missing_field_as_missing(server):
    """The 400 message shows what was sent: ``null`` for an explicit null (not "missing"), and
    "missing" for a field that is absent (not the whole body)."""
    status, body = raw_post(server, CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "ignore_eos": null}')
    assert assert_openai_error(status, body, 400, "ignore_eos")["message"].endswith("(got null)")
    status, body = raw_post(server, CHAT, b'{"max_tokens": 2}')
    assert assert_openai_error(status, body, 400, "messages")["message"].endswith("(got missing)")
