"""Constrained replies (``engine.grammar``): ``tool_choice`` required / named and ``response_format``.

A random model writes whatever its logits say, so every well-formed reply here is the grammar's
doing. Arguments are validated with ``jsonschema`` (a dev dependency), never with the code under test.
Schemas are bounded (enums, integer ranges, short strings) so that a random model's reply ends.
"""

from __future__ import annotations

import json
import time

import httpx
import jsonschema
import pytest

from engine.errors import AKVError
from engine.grammar import MAX_CALLS, GrammarCompiler, reply_grammar
from engine.server import ServerThread, create_app
from engine.settings import settings
from engine.template import render_tool_calls
from engine.toolcalls import parse_tool_calls
from tests.engine.agent import trajectory
from tests.engine.test_engine import fresh

pytestmark = pytest.mark.usefixtures("one_thread")  # see tests/conftest.py

READ = {"type": "object", "properties": {"cursor": {"type": "integer", "minimum": 0, "maximum": 99},
                                         "mode": {"enum": ["head", "tail"]}, "flag": {"type": "boolean"},
                                         "q": {"type": "string", "maxLength": 4}},
        "required": ["cursor", "mode", "flag", "q"], "additionalProperties": False}
SUBMIT = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"],
          "additionalProperties": False}
SCHEMAS = {"read_page": READ, "submit_answer": SUBMIT}
TOOLS = [{"type": "function", "function": {"name": n, "parameters": p}} for n, p in SCHEMAS.items()]
NAMED = {"type": "function", "function": {"name": "submit_answer"}}


def with_tools(messages: list[dict]) -> list[dict]:
    return [{**messages[0], "tools": TOOLS}, *messages[1:]]


def assert_valid_calls(text: str, only: str | None = None) -> list[dict]:
    """``text`` is nothing but well-formed ``<tool_call>`` blocks of declared tools whose arguments
    validate against their schema (``only``: every call is of that tool)."""
    parsed = parse_tool_calls(text)
    assert parsed.invalid == [] and parsed.content == "" and parsed.tool_calls, text
    assert text.count("<tool_call>") == text.count("</tool_call>") == len(parsed.tool_calls), text
    for call in parsed.tool_calls:
        name, args = call["function"]["name"], json.loads(call["function"]["arguments"])
        assert name in SCHEMAS and (only is None or name == only), text
        jsonschema.validate(args, SCHEMAS[name])
    return parsed.tool_calls


@pytest.fixture(scope="module")
def eng(tiny):
    return fresh(tiny)


def test_required_replies_are_valid_calls_greedy_and_sampled(eng):
    msgs = with_tools(trajectory(2))
    runs = [{"temperature": 0.0}] + [{"temperature": 1.0, "seed": s} for s in range(3)]
    counts = []
    for run in runs:
        r = eng.chat(msgs, max_tokens=600, tool_choice="required", **run)
        assert r.finish_reason == "stop", (run, r.text)
        counts.append(len(assert_valid_calls(r.text)))
    assert all(1 <= n <= MAX_CALLS for n in counts)


def test_a_named_function_yields_one_call_of_it(eng):
    msgs = with_tools(trajectory(2))
    for run in ({"temperature": 0.0}, {"temperature": 1.0, "seed": 7}):
        r = eng.chat(msgs, max_tokens=200, tool_choice=NAMED, **run)
        assert r.finish_reason == "stop"
        assert len(assert_valid_calls(r.text, only="submit_answer")) == 1


def test_a_constrained_and_a_free_sequence_in_one_batch(tiny):
    """Two generations advanced together: the constrained one is a valid call, the free one is the
    reply it gets alone (the mask touches only its own row)."""
    free_msgs, tool_msgs = trajectory(1), with_tools(trajectory(2))
    alone = fresh(tiny).chat(free_msgs, max_tokens=12, stop=[])
    e = fresh(tiny)
    gens = [e.start(tool_msgs, max_tokens=200, tool_choice="required", temperature=1.0, seed=3),
            e.start(free_msgs, max_tokens=12, stop=[])]
    assert gens[0].grammar is not None and gens[1].grammar is None
    while not all(g.done for g in gens):
        e.step(gens)
    constrained, free = (e.finish(g) for g in gens)
    assert_valid_calls(constrained.text)
    assert free.token_ids == alone.token_ids


def test_response_format_json_schema_in_process_over_http_and_streamed(eng, tmp_path):
    fmt = {"type": "json_schema", "json_schema": {"name": "page", "schema": READ}}
    for seed in (0, 1):
        r = eng.chat(trajectory(2), max_tokens=120, temperature=1.0, seed=seed, response_format=fmt)
        assert r.finish_reason == "stop"
        jsonschema.validate(json.loads(r.text), READ)
    with ServerThread(create_app(eng, snapshot_dir=tmp_path / "snaps")) as srv:
        base = {"messages": trajectory(2), "max_tokens": 120, "temperature": 1.0, "seed": 5}
        body = httpx.post(f"{srv.base_url}/v1/chat/completions", json={**base, "response_format": fmt}, timeout=120)
        assert body.status_code == 200, body.text
        jsonschema.validate(json.loads(body.json()["choices"][0]["message"]["content"]), READ)
        obj = httpx.post(f"{srv.base_url}/v1/chat/completions",
                         json={**base, "response_format": {"type": "json_object"}, "max_tokens": 200}, timeout=120)
        if obj.json()["choices"][0]["finish_reason"] == "stop":  # an open object may run to max_tokens
            assert isinstance(json.loads(obj.json()["choices"][0]["message"]["content"]), dict)
        streamed = httpx.post(f"{srv.base_url}/v1/chat/completions",
                              json={**base, "response_format": fmt, "stream": True}, timeout=120).text
        pieces = [json.loads(line[6:])["choices"][0]["delta"].get("content", "")
                  for line in streamed.splitlines() if line.startswith("data: {") and '"choices": [{' in line]
        jsonschema.validate(json.loads("".join(pieces)), READ)
        bad = httpx.post(f"{srv.base_url}/v1/chat/completions", timeout=30, json={
            **base, "response_format": {"type": "json_schema", "json_schema": {"schema": {"$ref": "#"}}}})
        assert bad.status_code == 400 and "recursive" in bad.json()["error"]["message"]
        both = httpx.post(f"{srv.base_url}/v1/chat/completions", timeout=30, json={
            **base, "tools": TOOLS, "tool_choice": "required", "response_format": fmt})
        assert both.status_code == 400 and both.json()["error"]["param"] == "response_format"


def _deep(n: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(n):
        schema = {"type": "array", "items": schema}
    return schema


HOSTILE = [
    ("huge", {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(10_000)}}, "characters"),
    ("recursive", {"type": "object", "properties": {"kid": {"$ref": "#"}}, "required": ["kid"]}, "recursive"),
    ("ref cycle", {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
     "recursive"),
    ("remote ref", {"$ref": "https://example.invalid/schema.json"}, "outside the schema"),
    ("dangling ref", {"$ref": "#/$defs/nowhere"}, "points to nothing"),
    ("deep", _deep(200), "deeper than"),
    ("bad type", {"type": "integr"}, "invalid JSON schema"),
    ("bad minimum", {"type": "integer", "minimum": "zero"}, "invalid JSON schema"),
    ("not an object", ["type", "string"], "must be an object"),
]


@pytest.mark.parametrize(("case", "schema", "words"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_schemas_are_refused_quickly_with_a_reason(case, schema, words):
    t0 = time.perf_counter()
    with pytest.raises(AKVError, match=words) as err:
        reply_grammar("required", [{"type": "function", "function": {"name": "f", "parameters": schema}}])
    assert err.value.field == "tools[f].function.parameters" and err.value.status == 400
    with pytest.raises(AKVError, match=words):
        reply_grammar(None, None, {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert time.perf_counter() - t0 < 5.0, f"{case} took too long to refuse"


def test_response_format_shapes():
    assert reply_grammar(None, None, {"type": "text"}) is None and reply_grammar("auto", TOOLS) is None
    for bad in ({"type": "xml"}, {"type": "json_schema"}, "json", {"type": "json_schema", "json_schema": {}}):
        with pytest.raises(AKVError) as err:
            reply_grammar(None, None, bad)
        assert err.value.field == "response_format"


def test_compiled_grammars_are_cached_per_grammar(eng):
    before = eng.grammars.compiles
    for _ in range(3):
        eng.grammars.matcher(reply_grammar("required", TOOLS))
        eng.grammars.matcher(reply_grammar(NAMED, TOOLS))
    assert eng.grammars.compiles - before <= 2
    assert reply_grammar("required", TOOLS) == reply_grammar("required", [dict(t) for t in TOOLS])


QWEN_TOKENIZER = settings().cache_dir / "models" / "qwen2.5-coder-1.5b" / "tokenizer.json"  # AKV_CACHE_DIR


@pytest.mark.skipif(not QWEN_TOKENIZER.exists(), reason="the converted Qwen tokenizer is not in the cache")
def test_qwen_tags_are_its_special_tokens_and_its_rendering_is_accepted():
    """Qwen's ``<tool_call>`` and ``</tool_call>`` are single special tokens: the grammar names them
    by id, and the chat template's own rendering of two calls (after the opening) is accepted."""
    from engine.models.loading import load_tokenizer

    tok = load_tokenizer("qwen2.5-coder-1.5b")
    stops = {tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id}
    compiler = GrammarCompiler(tok, 151936, stops)
    matcher = compiler.matcher(reply_grammar("required", TOOLS))
    calls = [{"function": {"name": "read_page", "arguments": {"cursor": 3, "mode": "head", "flag": True, "q": "ab"}}},
             {"function": {"name": "submit_answer", "arguments": {"answer": "no"}}}]
    text = render_tool_calls(calls, leading_newline=False, style="qwen").removeprefix("<tool_call>\n")
    for token in tok.encode(text, add_special_tokens=False):
        assert matcher.allowed()[token], tok.decode([token])
        assert matcher.consume(token)
    end = set(matcher.allowed().nonzero().flatten().tolist())
    assert stops <= end and end - stops == set(tok.encode("\n", add_special_tokens=False))
