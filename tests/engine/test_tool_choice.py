"""``tool_choice`` and ``min_tokens``: what an agent harness asks of a reply, in process and over HTTP.

References: ``min_tokens`` against the model's own ranking (the masked reply's first token is the
best-ranked token that does not end the turn, found by sorting the unmasked logits); ``tool_choice``
against the plain ``prefix`` option (a forced opening is the same prompt as that prefix, and only the
returned text differs).
"""

from __future__ import annotations

import json

import httpx
import pytest
import torch

from engine.errors import AKVError
from engine.remote import RemoteEngine
from engine.server import ServerThread, create_app
from engine.toolcalls import forced_opening, parse_tool_calls
from tests.engine.agent import trajectory
from tests.engine.test_engine import fresh

pytestmark = pytest.mark.usefixtures("one_thread")  # see tests/conftest.py

TOOLS = [{"type": "function", "function": {"name": "read_page", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "submit_answer", "parameters": {"type": "object"}}}]


def with_tools(messages: list[dict]) -> list[dict]:
    return [{**messages[0], "tools": TOOLS}, *messages[1:]]


def ranking(eng, msgs) -> list[int]:
    """Token ids by the model's logit after ``msgs``'s generation prompt, best first."""
    g = eng.start(msgs, max_tokens=1)
    try:
        logits = eng.model.logits(g.hidden[None])[0]
    finally:
        eng.finish(g)
    return torch.argsort(logits, descending=True).tolist()


def test_min_tokens_masks_the_end_of_turn_tokens_until_then(tiny, tmp_path):
    """Make the two best first tokens end the turn: without ``min_tokens`` the reply is empty;
    with 1 it opens with the third-ranked token, in process and through the server."""
    eng = fresh(tiny)
    msgs = trajectory(2)
    best = ranking(eng, msgs)
    eng.decoder.stop_ids = {best[0]}
    eng.decoder.end_of_turn_ids = sorted({best[0], best[1]})
    with ServerThread(create_app(eng, snapshot_dir=tmp_path / "snaps")) as srv:
        remote = RemoteEngine(srv.base_url, "tiny-random", check_usage="raise")
        for e in (eng, remote):
            stopped = e.chat(msgs, max_tokens=3, stop=[])
            assert stopped.finish_reason == "stop" and len(stopped.token_ids) <= 1
            held = e.chat(msgs, max_tokens=3, stop=[], min_tokens=1)
            assert held.token_ids[0] == best[2], "the first token must be the best one that does not end the turn"
        remote.close()
        for bad in (-1, 4, True):
            with pytest.raises(AKVError) as err:
                eng.chat(msgs, max_tokens=3, min_tokens=bad)
            assert err.value.field == "min_tokens"
        r = httpx.post(f"{srv.base_url}/v1/chat/completions",
                       json={"messages": msgs, "max_tokens": 2, "min_tokens": 5}, timeout=30)
        assert r.status_code == 400 and "min_tokens" in r.text


def test_the_turn_opening_marker_is_masked_with_the_stops(tiny_gemma):
    """Qwen ends a turn by opening the next (``<|im_start|>``, measured): min_tokens masks a
    template's turn-opening marker with its stops (gemma's ``<start_of_turn>`` here)."""
    opener = tiny_gemma.tokenizer.encode("<start_of_turn>", add_special_tokens=False)
    assert tiny_gemma.renderer.template.turn_open == "<start_of_turn>"
    assert len(opener) == 1 and opener[0] in tiny_gemma.decoder.end_of_turn_ids
    assert tiny_gemma.decoder.stop_ids < set(tiny_gemma.decoder.end_of_turn_ids)


def test_forced_opening_values_and_refusals():
    assert forced_opening(None, TOOLS) == forced_opening("auto", TOOLS) == forced_opening("none", None) == ""
    assert forced_opening("required", TOOLS) == "<tool_call>\n"
    named = forced_opening({"type": "function", "function": {"name": "submit_answer"}}, TOOLS)
    call = parse_tool_calls(named + '{"answer": "PELICAN"}}').tool_calls
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in call] == \
        [("submit_answer", {"answer": "PELICAN"})]
    for choice, tools, words in (("required", None, "needs declared tools"), ("always", TOOLS, "must be one of"),
                                 ({"type": "function", "function": {"name": "rm"}}, TOOLS, "not a declared tool"),
                                 ({"function": {"name": "read_page"}}, TOOLS, "must be one of")):
        with pytest.raises(AKVError, match=words) as err:
            forced_opening(choice, tools)
        assert err.value.field == "tool_choice"


def test_tool_choice_required_is_the_prefix_returned_in_process_and_over_http(tiny, tmp_path):
    """A required call is the prompt with ``<tool_call>\\n`` appended: the same prompt as that
    prefix (usage one prompt longer by its tokens), and the returned text opens with it; the reply
    goes on under the tools' grammar (``tests/engine/test_grammar.py``): a call's JSON."""
    eng = fresh(tiny)
    msgs = with_tools(trajectory(2))
    by_prefix = eng.chat(msgs, max_tokens=4, stop=[], prefix="<tool_call>\n")
    plain = eng.chat(msgs, max_tokens=4, stop=[])
    with ServerThread(create_app(eng, snapshot_dir=tmp_path / "snaps")) as srv:
        remote = RemoteEngine(srv.base_url, "tiny-random", check_usage="raise")
        for e in (eng, remote):
            forced = e.chat(msgs, max_tokens=4, stop=[], tool_choice="required")
            assert forced.text.startswith('<tool_call>\n{"name": "')
            assert forced.usage.prompt_tokens == by_prefix.usage.prompt_tokens > plain.usage.prompt_tokens
            with pytest.raises(AKVError) as err:
                e.chat(trajectory(2), max_tokens=2, tool_choice="required")  # no tools declared
            assert err.value.field == "tool_choice"
        remote.close()
        base = {"messages": trajectory(2), "max_tokens": 2, "tools": TOOLS}
        for choice in ({"type": "function", "function": {"name": "nope"}}, "sometimes", 3):
            r = httpx.post(f"{srv.base_url}/v1/chat/completions", json={**base, "tool_choice": choice}, timeout=30)
            assert r.status_code == 400 and "tool_choice" in r.text
        streamed = httpx.post(f"{srv.base_url}/v1/chat/completions",
                              json={**base, "tool_choice": "required", "stream": True}, timeout=30).text
        pieces = [json.loads(line[6:])["choices"][0]["delta"].get("content", "")
                  for line in streamed.splitlines() if line.startswith("data: {") and '"choices": [{' in line]
        assert "".join(pieces).startswith("<tool_call>\n")


def test_a_call_cut_by_the_end_of_the_turn_or_fenced_still_parses():
    cut = parse_tool_calls('<tool_call>\n{"name": "read_page", "arguments": {"cursor": 3}}\n')
    fenced = parse_tool_calls('<tool_call>\n```json\n{"name": "read_page", "arguments": {"cursor": 3}}\n```')
    for parsed in (cut, fenced):
        assert [json.loads(c["function"]["arguments"]) for c in parsed.tool_calls] == [{"cursor": 3}]
    prose = parse_tool_calls("I will wrap calls in <tool_call> tags next time")
    assert prose.tool_calls == [] and prose.invalid == []
