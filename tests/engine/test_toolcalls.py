"""Tool-call blocks in generated text, round-tripped through the template's rendering."""

from __future__ import annotations

import json

from engine.server.toolcalls import parse_tool_calls
from engine.template import render_tool_calls


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
