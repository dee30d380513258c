"""The HTTP server, driven by the official openai client and by raw HTTP, on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
from openai import OpenAI

from engine import Engine
from engine.remote.client import AKVClient, AKVServerError
from engine.server import ServerThread, create_app
from tests.engine.agent import trajectory
from tests.engine.test_engine import fresh, rolling


def wait_idle(eng: Engine, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while any(n.lock for n in eng.tree.nodes()):
        assert time.monotonic() < deadline, "locks were not released"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def server(tiny, tmp_path_factory):
    eng = fresh(tiny)
    app = create_app(eng, snapshot_dir=tmp_path_factory.mktemp("snaps"), max_queue=8, max_batch=4)
    with ServerThread(app) as srv:
        srv.engine = eng
        yield srv


@pytest.fixture
def oai(server):
    return OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)


def test_models_health_metrics(server):
    assert httpx.get(server.base_url + "/health").json()["status"] == "ok"
    models = httpx.get(server.base_url + "/v1/models").json()
    assert models["data"][0]["id"] == "tiny-random"
    text = httpx.get(server.base_url + "/metrics").text
    for name in ("akv_tokens_reused_total", "akv_tokens_prefilled_total", "akv_evicted_tokens_total",
                 "akv_swap_outs_total", "akv_pool_bytes_used", "akv_queue_depth", "akv_request_latency_seconds"):
        assert name in text


def test_openai_client_matches_the_engine_token_for_token(server, oai, tiny):
    msgs = trajectory(4)
    sched = rolling(len(msgs), 1)
    r = oai.chat.completions.create(model="tiny-random", messages=msgs, max_tokens=6, temperature=0,
                                    extra_body=sched)
    local = fresh(tiny).chat(msgs, sched, max_tokens=6)
    assert r.choices[0].message.content == local.text
    assert r.choices[0].finish_reason == local.finish_reason
    assert r.usage.prompt_tokens == local.usage.prompt_tokens
    details = r.usage.prompt_tokens_details.model_dump()
    assert {"cached_tokens", "drop_skipped_tokens", "repos_tokens"} <= set(details)
    # Streaming gives the same text, piece by piece.
    stream = oai.chat.completions.create(model="tiny-random", messages=msgs, max_tokens=6, temperature=0,
                                         stream=True, stream_options={"include_usage": True}, extra_body=sched)
    pieces, usage = [], None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage = chunk.usage
    assert "".join(pieces) == local.text
    assert usage is not None and usage.prompt_tokens_details.cached_tokens > 0  # the second time, all reused


def test_agent_session_reuses_every_turn(server, oai):
    msgs = trajectory(5)[:2]
    prev_prompt = 0
    for turn in range(5):
        r = oai.chat.completions.create(model="tiny-random", messages=msgs, max_tokens=4,
                                        extra_body={"session_id": "agent-1", **rolling(len(msgs), 2)})
        u = r.usage
        # Nothing of the previous turn is computed again: it is read from the cache, or dropped.
        assert u.prefill_tokens <= u.prompt_tokens - prev_prompt, (turn, u, prev_prompt)
        assert u.prompt_tokens_details.cached_tokens > 0
        prev_prompt = u.prompt_tokens
        msgs = [*msgs, {"role": "assistant", "content": r.choices[0].message.content or "ok",
                        "tool_calls": [{"id": f"t{turn}", "type": "function",
                                        "function": {"name": "search", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": f"t{turn}", "name": "search", "content": f"result {turn} " * 20}]


def test_same_text_different_drops_kept_apart(server, oai, tiny):
    msgs = trajectory(4)
    outs = []
    for sched in ({"drop_message": {"5": [3]}}, {"drop_message": {"7": [3]}}):
        r = oai.chat.completions.create(model="tiny-random", messages=msgs, max_tokens=5, extra_body=sched)
        assert r.choices[0].message.content == fresh(tiny).chat(msgs, sched, max_tokens=5).text
        outs.append(r)


def test_save_and_load_round_trip(server, tiny):
    c = AKVClient(server.base_url)
    msgs = trajectory(3)
    saved = c.save("sess-1", msgs, drop_message={"5": [3]})
    assert saved["kv_tokens"] > 0
    with pytest.raises(AKVServerError) as err:
        c.load("no-such-snapshot")
    assert err.value.status == 400 and "does not exist" in err.value.error["message"]
    loaded = c.load("sess-1")
    assert loaded["tokens"] == saved["tokens"]
    r = c.chat(msgs, drop_message={"5": [3]}, max_tokens=3)
    assert r["usage"]["prefill_tokens"] == 0  # warmed, including the last token's state


def _post(server, body, raw=None):
    if raw is not None:
        return httpx.post(server.base_url + "/v1/chat/completions", content=raw,
                          headers={"content-type": "application/json"})
    return httpx.post(server.base_url + "/v1/chat/completions", json=body)


BAD = [
    ("malformed json", None, b'{"messages": [', 400, "body"),
    ("unknown role", {"messages": [{"role": "wizard", "content": "x"}]}, None, 400, "messages[0].role"),
    # found by bench.fuzz: a role that is an object was looked up in the alias table and answered 500
    ("role an object", {"messages": [{"role": {"role": "user"}, "content": "x"}]}, None, 400, "messages[0].role"),
    ("role a list", {"messages": [{"role": ["user"], "content": "x"}]}, None, 400, "messages[0].role"),
    ("drop after trigger", {"messages": trajectory(2), "drop_message": {"2": [4]}}, None, 400, "drop_message.2"),
    ("id out of range", {"messages": trajectory(2), "reposition": [40]}, None, 400, "reposition"),
    ("not increasing", {"messages": trajectory(2), "reposition": [3, 3]}, None, 400, "reposition"),
    ("max_tokens zero", {"messages": trajectory(2), "max_tokens": 0}, None, 400, "max_tokens"),
    ("max_tokens negative", {"messages": trajectory(2), "max_tokens": -5}, None, 400, "max_tokens"),
    ("max_tokens string", {"messages": trajectory(2), "max_tokens": "many"}, None, 400, "max_tokens"),
    ("empty messages", {"messages": []}, None, 400, "messages"),
    ("unknown model", {"model": "gpt-9", "messages": trajectory(2)}, None, 404, "model"),
    ("bad drop_rule", {"messages": trajectory(2), "drop_rule": {"type": "magic", "drop_messages": {}}}, None,
     400, "drop_rule.type"),
    # OpenAI fields that would change the reply and are not implemented (they were ignored in silence)
    ("logprobs asked", {"messages": trajectory(2), "logprobs": True, "top_logprobs": 5}, None, 400, "logprobs"),
    ("presence penalty", {"messages": trajectory(2), "presence_penalty": 0.5}, None, 400, "presence_penalty"),
    # response_format is served (engine.grammar); a malformed one or an invalid schema is a 400
    ("json mode unknown", {"messages": trajectory(2), "response_format": {"type": "xml"}}, None, 400,
     "response_format"),
    ("json schema invalid", {"messages": trajectory(2), "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "integr"}}}}, None, 400, "response_format"),
    ("logit bias", {"messages": trajectory(2), "logit_bias": {"42": 100}}, None, 400, "logit_bias"),
]


def test_unsupported_openai_fields_at_their_defaults_are_accepted(server):
    defaults = {"logprobs": False, "top_logprobs": 0, "presence_penalty": 0, "frequency_penalty": 0.0,
                "logit_bias": {}, "response_format": {"type": "text"}, "user": "someone"}
    r = _post(server, {"messages": trajectory(2), "max_tokens": 2, **defaults})
    assert r.status_code == 200, r.text
    r = _post(server, {"messages": trajectory(2), "max_tokens": 2, "logprobs": True})
    assert r.status_code == 400 and "logprobs: not supported by this server, got True" in r.json()["error"]["message"]


@pytest.mark.parametrize(("case", "body", "raw", "status", "param"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_gets_a_clear_error_and_nothing_breaks(server, case, body, raw, status, param):
    r = _post(server, body, raw)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"]
    wait_idle(server.engine)
    server.engine.check_integrity()
    ok = _post(server, {"messages": trajectory(2), "max_tokens": 2})
    assert ok.status_code == 200


def test_editing_a_session_history_is_refused(server):
    msgs = trajectory(3)
    assert _post(server, {"messages": msgs[:4], "session_id": "edit", "max_tokens": 2}).status_code == 200
    edited = [dict(m) for m in msgs]
    edited[1] = {"role": "user", "content": "something else entirely"}
    r = _post(server, {"messages": edited, "session_id": "edit", "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[1]"
    shorter = _post(server, {"messages": msgs[:3], "session_id": "edit", "max_tokens": 2})
    assert shorter.status_code == 400 and "only be appended" in shorter.json()["error"]["message"]
    assert _post(server, {"messages": msgs, "session_id": "edit", "max_tokens": 2}).status_code == 200
    # Rewriting a past schedule entry is an edit too.
    assert _post(server, {"messages": msgs, "session_id": "edit2", "drop_message": {"5": [3]},
                          "max_tokens": 2}).status_code == 200
    r = _post(server, {"messages": msgs, "session_id": "edit2", "drop_message": {"5": [1]}, "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "drop_message.5"


def test_prompt_longer_than_the_window_is_413(tiny, tmp_path):
    eng = Engine(tiny.model, tiny.tokenizer, "gemma", max_context=128, name="tiny-random")
    with ServerThread(create_app(eng, snapshot_dir=tmp_path)) as srv:
        r = httpx.post(srv.base_url + "/v1/chat/completions", json={"messages": trajectory(3), "max_tokens": 4})
        assert r.status_code == 413 and r.json()["error"]["code"] == "context_length_exceeded"
        s = httpx.post(srv.base_url + "/v1/chat/completions",
                       json={"messages": trajectory(3), "max_tokens": 4, "stream": True})
        assert s.status_code == 413
        ok = httpx.post(srv.base_url + "/v1/chat/completions",
                        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert ok.status_code == 200
        eng.check_integrity()


def test_full_queue_answers_503_with_retry_after(tiny, tmp_path):
    eng = fresh(tiny)
    app = create_app(eng, snapshot_dir=tmp_path, max_queue=1, max_batch=1)
    with ServerThread(app) as srv:
        codes: list[int] = []
        headers: list[str | None] = []

        def call() -> None:
            r = httpx.post(srv.base_url + "/v1/chat/completions",
                           json={"messages": trajectory(6), "max_tokens": 60, "stop": []}, timeout=120)
            codes.append(r.status_code)
            headers.append(r.headers.get("retry-after"))

        threads = [threading.Thread(target=call) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert 503 in codes and 200 in codes
        assert headers[codes.index(503)] == "1"
        wait_idle(eng)
        eng.check_integrity()


def test_request_timeout_is_504_and_frees_locks(tiny, tmp_path):
    eng = fresh(tiny)
    with ServerThread(create_app(eng, snapshot_dir=tmp_path)) as srv:
        r = httpx.post(srv.base_url + "/v1/chat/completions",
                       json={"messages": trajectory(4), "max_tokens": 2000, "stop": [], "timeout": 0.3}, timeout=60)
        assert r.status_code == 504 and r.json()["error"]["type"] == "timeout_error"
        wait_idle(eng)
        eng.check_integrity()


def test_client_disconnect_mid_stream_frees_locks(server):
    body = {"messages": trajectory(4), "max_tokens": 400, "stop": [], "stream": True}
    with httpx.Client(timeout=60) as http, http.stream("POST", server.base_url + "/v1/chat/completions",
                                                       json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and '"content": "' in line and json.loads(line[6:])["choices"]:
                break  # one piece of content arrived; hang up
    wait_idle(server.engine)
    server.engine.check_integrity()
    assert _post(server, {"messages": trajectory(2), "max_tokens": 2}).status_code == 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_akv_serve_command_line(tmp_path):
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "rsi.cli", "serve", "--model", "tiny-random", "--port", str(port),
                             "--snapshot-dir", str(tmp_path), "--survival", "lru"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "akv serve did not come up"
            time.sleep(0.25)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        r = client.chat.completions.create(model="tiny-random", messages=trajectory(2), max_tokens=3)
        assert r.usage.prompt_tokens > 0
        assert "akv_survival_paused_sessions" in httpx.get(f"http://127.0.0.1:{port}/metrics").text  # --survival
        assert httpx.get(f"http://127.0.0.1:{port}/health").json()["intake"] in ("starting", "ready")  # not awaited
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def test_openai_tools_and_tool_call_history_are_accepted(server, oai):
    """A harness that declares tools and sends back assistant tool_calls and tool results works
    unchanged; the tiny model writes no <tool_call> block, so the reply is plain content."""
    params = {"type": "object", "properties": {"q": {"type": "string"}}}
    tools = [{"type": "function", "function": {"name": "search", "parameters": params}}]
    msgs = [{"role": "system", "content": "Tools: search(q)."}, {"role": "user", "content": "Where is order 7?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q": "order 7"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "order 7 ships from Tern."}]
    r = oai.chat.completions.create(model="tiny-random", messages=msgs, tools=tools, max_tokens=4, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert r.choices[0].message.content is not None or r.choices[0].message.tool_calls


def test_chatml_server_renders_declared_tools_and_the_remote_engine_sends_them(tiny_qwen, tmp_path):
    """On a ChatML server the request's ``tools`` are written into the system turn (as Qwen's
    template does): the prompt is what the engine renders for the messages with the tools on
    message 0, longer than without them, and RemoteEngine, given tools on message 0, sends them as
    the request's ``tools``."""
    from engine.remote import RemoteEngine
    from engine.template import attach_tools

    tools = [{"type": "function", "function": {"name": "read_page", "description": "Read a page.",
                                               "parameters": {"type": "object", "properties": {
                                                   "cursor": {"type": "integer"}}}}}]
    msgs = [{"role": "user", "content": "Read the first page."}]
    eng = Engine(tiny_qwen.model, tiny_qwen.tokenizer, "chatml", name="tiny-random-qwen2")
    with ServerThread(create_app(eng, snapshot_dir=tmp_path)) as srv:
        client = OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0)
        with_tools = client.chat.completions.create(model="tiny-random-qwen2", messages=msgs, tools=tools,
                                                    max_tokens=3, temperature=0)
        without = client.chat.completions.create(model="tiny-random-qwen2", messages=msgs, max_tokens=3,
                                                 temperature=0)
        rendered = eng.renderer.render(attach_tools(msgs, tools))
        assert with_tools.usage.prompt_tokens == len(rendered.token_ids)
        assert "read_page" in eng.tokenizer.decode(rendered.token_ids[:rendered.spans[0][1]])
        assert without.usage.prompt_tokens == len(eng.renderer.render(msgs).token_ids) < len(rendered.token_ids)
        with RemoteEngine(srv.base_url, "tiny-random-qwen2", template="chatml") as remote:
            r = remote.chat(attach_tools(msgs, tools), max_tokens=3)
        assert r.usage.prompt_tokens == with_tools.usage.prompt_tokens


def test_remote_engine_gives_a_reply_s_parsed_tool_calls_back_as_text(tiny_qwen, tmp_path, monkeypatch):
    """A server that parsed the model's calls into ``tool_calls`` (content null) still gives the
    caller the model's reply as text: the calls written back as ``<tool_call>`` blocks, which
    parse back to the same calls."""
    from engine.remote import RemoteEngine
    from engine.toolcalls import parse_tool_calls

    eng = Engine(tiny_qwen.model, tiny_qwen.tokenizer, "chatml", name="tiny-random-qwen2")
    calls = [{"id": "call_1", "type": "function", "function": {"name": "read_page", "arguments": '{"cursor": 3}'}}]
    with ServerThread(create_app(eng, snapshot_dir=tmp_path)) as srv, \
            RemoteEngine(srv.base_url, "tiny-random-qwen2", template="chatml") as remote:
        real_post = remote.wire.post

        def post(path, body):
            answer = real_post(path, body)
            answer["choices"][0]["message"] = {"role": "assistant", "content": None, "tool_calls": calls}
            answer["choices"][0]["finish_reason"] = "tool_calls"
            return answer

        monkeypatch.setattr(remote.wire, "post", post)
        r = remote.chat([{"role": "user", "content": "Read page 3."}], max_tokens=2)
    assert r.text == '<tool_call>\n{"name": "read_page", "arguments": {"cursor": 3}}\n</tool_call>'
    parsed = parse_tool_calls(r.text)
    assert [c["function"] for c in parsed.tool_calls] == [c["function"] for c in calls]
    assert r.finish_reason == "tool_calls"
