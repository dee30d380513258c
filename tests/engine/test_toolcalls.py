"""Tool-call blocks in generated text, round-tripped through the template's rendering."""

from __future__ import annotations

import json

from engine.template import render_tool_calls
from engine.toolcalls import parse_tool_calls, reply_message, tool_names


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


TOOLS = [{"type": "function", "function": {"name": "read_page", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]


def test_untagged_json_is_a_call_only_when_every_name_is_a_declared_tool():
    """What Qwen2.5-Coder-1.5B sometimes writes: the call's JSON without tags, bare or fenced."""
    names = tool_names(TOOLS)
    assert names == ["read_page", "search"]
    bare = '{"name": "read_page", "arguments": {"cursor": 2}}'
    for text in (bare, f"```json\n{bare}\n```", f"  {bare}\n", f"[{bare}, {bare.replace('read_page', 'search')}]"):
        parsed = parse_tool_calls(text, names)
        assert parsed.untagged and parsed.content == "" and parsed.invalid == [], text
        assert parsed.tool_calls[0]["function"] == {"name": "read_page", "arguments": '{"cursor": 2}'}
    assert len(parse_tool_calls(f"[{bare}, {bare}]", names).tool_calls) == 2
    message, finish = reply_message(bare, "stop", tools_declared=names)
    assert finish == "tool_calls" and message["content"] is None and len(message["tool_calls"]) == 1


def test_text_that_merely_contains_json_stays_text():
    names = tool_names(TOOLS)
    for text in ('The answer is {"name": "read_page"} as shown',  # prose around it
                 '{"name": "delete_everything", "arguments": {}}',  # not a declared tool
                 '[{"name": "read_page"}, {"name": "rm"}]',  # one undeclared name spoils the list
                 '{"arguments": {}}', '{"name": 7}', "[]", "{}", '{"name": "read_page"',  # not calls / broken
                 "[" * 5000 + "]" * 5000):  # deep nesting: no crash
        parsed = parse_tool_calls(text, names)
        assert parsed.tool_calls == [] and not parsed.untagged, text[:40]
    assert parse_tool_calls('{"name": "read_page", "arguments": {}}').tool_calls == []  # no names given: text
    # A tagged reply is parsed as before, untagged JSON beside it is left as text
    tagged = parse_tool_calls('<tool_call>{"name": "search", "arguments": {}}</tool_call>', names)
    assert not tagged.untagged and len(tagged.tool_calls) == 1


def test_tool_names_skips_malformed_entries():
    assert tool_names([{"function": {"name": "a"}}, {"name": "b"}, {"function": {}}, "x", None, {"function": 3}]) == [
        "a", "b"]
    assert tool_names(None) == []


def test_an_integer_past_python_s_digit_limit_is_an_invalid_block_not_a_crash():
    huge = "1" * 5000  # json.loads raises ValueError (not JSONDecodeError) past 4,300 digits
    reply = parse_tool_calls(f'<tool_call>{{"name": "ls", "arguments": {{"a": {huge}}}}}</tool_call>', ["ls"])
    assert reply.tool_calls == [] and len(reply.invalid) == 1
    assert parse_tool_calls(f'{{"name": "ls", "arguments": {{"a": {huge}}}}}', ["ls"]).tool_calls == []


def test_one_block_may_hold_several_calls_as_a_list_or_one_per_line():
    one = '{"name": "read_page", "arguments": {"cursor": 1}}'
    two = '{"name": "search", "arguments": {"q": "x"}}'
    for body in (f"[{one}, {two}]", f"{one}\n{two}", f"```json\n{one}\n{two}\n```", f"\n{one}\n\n{two}\n"):
        parsed = parse_tool_calls(f"<tool_call>\n{body}\n</tool_call>")
        assert [c["function"]["name"] for c in parsed.tool_calls] == ["read_page", "search"], body
        assert parsed.invalid == [] and len({c["id"] for c in parsed.tool_calls}) == 2
    cut = parse_tool_calls(f"<tool_call>\n{one}\n{two}")  # the turn ended inside the block
    assert len(cut.tool_calls) == 2
    for bad in (f"{one}\nthen search", f"[{one}, 3]", "[]", f"{one}\n[{two}]"):
        parsed = parse_tool_calls(f"<tool_call>\n{bad}\n</tool_call>")
        assert parsed.tool_calls == [] and parsed.invalid == [bad], bad
