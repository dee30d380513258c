"""Tool-call blocks in generated text, round-tripped through the template's rendering."""

from __future__ import annotations

import json

from engine.template import render_tool_calls
from engine.toolcalls import parse_tool_calls, reply_message


def test_rendered_calls_parse_back():
    calls = [{"function": {"name": "search", "arguments": '{"q": "order 4821"}'}},
             {"function": {"name": "calc", "arguments": {"expr": "2+2"}}}]
    text = "Let me look.\n" + render_tool_calls(calls, leading_newline=False)
    parsed = parse_tool_calls(text)
    assert parsed.content == "Let me look."
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["search", "calc"]
    assert json.loads(parsed.tool_calls[0]["function"]["arguments"]) == {"q": "order 4821"}
    assert parsed.invalid == []


def test_broken_blocks_are_reported_not_raised():
    parsed = parse_tool_calls('Hi <tool_call>{"name": </tool_call> and <tool_call>{"arguments": {}}</tool_call>')
    assert parsed.tool_calls == [] and len(parsed.invalid) == 2 and parsed.content == "Hi"
    assert parse_tool_calls("plain answer").tool_calls == []


def test_reply_message_returns_calls_only_when_tools_are_declared():
    text = 'Checking.\n<tool_call>{"name": "search", "arguments": {"query": "INC-1"}}</tool_call>'
    message, finish = reply_message(text, "stop", tools_declared=True)
    assert finish == "tool_calls" and message["content"] == "Checking."
    assert message["tool_calls"][0]["function"] == {"name": "search", "arguments": '{"query": "INC-1"}'}
    assert message["tool_calls"][0]["id"].startswith("call_")
    assert reply_message(text, "stop", tools_declared=False) == ({"role": "assistant", "content": text}, "stop")
    # Only broken blocks: the reply stays text (the caller sees what the model wrote).
    broken = '<tool_call>{"name": </tool_call>'
    assert reply_message(broken, "length", tools_declared=True) == ({"role": "assistant", "content": broken}, "length")
    only_call, _ = reply_message(text.split("\n", 1)[1], "stop", tools_declared=True)
    assert only_call["content"] is None
