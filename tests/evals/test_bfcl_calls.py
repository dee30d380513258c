"""evals.bfcl.calls: model replies parsed into calls of declared functions; hostile text never runs."""

from __future__ import annotations

import builtins
import json

import pytest

from evals.bfcl.calls import MAX_CALL_CHARS, MAX_DEPTH, Call, parse_python_calls, parse_reply

DECLARED = ("ls", "cd", "mkdir", "echo")


@pytest.fixture(autouse=True)
def nothing_runs(monkeypatch, tmp_path):
    """eval, exec and compile of code objects fail loudly for the whole test; a canary file must never appear."""

    def refuse(*args, **kwargs):
        raise AssertionError("model text reached eval/exec")

    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    canary = tmp_path / "canary"
    yield canary
    assert not canary.exists()


def test_tool_call_blocks_one_and_several():
    one = parse_reply('<tool_call>\n{"name": "ls", "arguments": {"a": true}}\n</tool_call>', DECLARED)
    assert one.form == "tool_call" and one.calls == (Call("ls", (), {"a": True}),) and not one.refused
    several = parse_reply('<tool_call>{"name": "cd", "arguments": {"folder": "document"}}</tool_call>\n'
                          '<tool_call>{"name": "mkdir", "arguments": {"dir_name": "temp"}}</tool_call>', DECLARED)
    assert [c.source for c in several.calls] == ["cd(folder='document')", "mkdir(dir_name='temp')"]


def test_bfcl_python_form_single_list_and_positional():
    assert parse_reply("ls(a=1)", DECLARED).calls == (Call("ls", (), {"a": 1}),)
    both = parse_reply("[cd(folder='document'), echo('hi', file_name=\"x.txt\")]", DECLARED)
    assert both.form == "python" and [c.source for c in both.calls] == ["cd(folder='document')",
                                                                        "echo('hi', file_name='x.txt')"]
    assert parse_reply("```python\nls(a=True)\n```", DECLARED).calls == (Call("ls", (), {"a": True}),)


def test_prose_is_no_call():
    for text in ("I have listed the files.", "", "42", "['a', 'b']", "Done."):
        parsed = parse_reply(text, DECLARED)
        assert parsed.empty and parsed.form == "none", text


HOSTILE = [
    ("__import__('os').system('touch CANARY')", "not a declared function's name"),
    ("ls.__class__.__bases__[0].__subclasses__()", "not a declared function's name"),
    ("os.system('touch CANARY')", "not a declared function's name"),
    ("ls(a=__import__('os').system('touch CANARY'))", "not a literal"),
    ("ls(a=cd(folder='x'))", "not a literal (Call)"),
    ("ls(a=lambda: 1)", "not a literal (Lambda)"),
    ("ls(*['a'])", "*args or **kwargs"),
    ("ls(**{'a': 1})", "*args or **kwargs"),
    ("rm(path='/')", "'rm' is not a declared function"),
    ("exec('print(1)')", "'exec' is not a declared function"),
    ("ls(a=x)", "not a literal (Name)"),
    ("ls(a=[i for i in range(9)])", "not a literal"),
    ("ls(a=f'{open(1)}')", "not a literal"),
    ("ls(a=(1).__class__)", "not a literal (Attribute)"),
    ("ls(a=1 + 2)", "malformed"),
    ("ｌｓ(a=1)", "not written as the declared 'ls'"),  # fullwidth letters: Python folds them to ls
]


@pytest.mark.parametrize(("text", "reason"), HOSTILE)
def test_hostile_python_calls_are_refused_with_a_reason(text, reason, nothing_runs):
    text = text.replace("CANARY", str(nothing_runs))
    parsed = parse_reply(text, DECLARED)
    assert not parsed.calls and len(parsed.refused) == 1, parsed
    assert reason in parsed.refused[0].reason and "\n" not in parsed.refused[0].reason


@pytest.mark.parametrize(("text", "reason"), HOSTILE)
def test_hostile_python_calls_inside_a_tool_call_block_are_refused_too(text, reason, nothing_runs):
    parsed = parse_reply(f"<tool_call>\n{text.replace('CANARY', str(nothing_runs))}\n</tool_call>", DECLARED)
    assert parsed.form == "tool_call" and not parsed.calls and len(parsed.refused) == 1, parsed
    assert reason in parsed.refused[0].reason


def test_several_calls_in_one_block_and_the_python_form_in_a_block():
    rows = '{"name": "cd", "arguments": {"folder": "d"}}\n{"name": "ls", "arguments": {"a": true}}'
    listed = '[{"name": "cd", "arguments": {"folder": "d"}}, {"name": "ls", "arguments": {"a": true}}]'
    python = "[cd(folder='d'), ls(a=True)]"
    for body in (rows, listed, python):
        parsed = parse_reply(f"<tool_call>\n{body}\n</tool_call>", DECLARED)
        assert [c.source for c in parsed.calls] == ["cd(folder='d')", "ls(a=True)"] and not parsed.refused, body
    mixed = parse_reply("<tool_call>\n[cd(folder='d'), rm(path='/')]\n</tool_call>", DECLARED)
    assert [c.name for c in mixed.calls] == ["cd"] and "'rm' is not a declared function" in mixed.refused[0].reason
    prose = parse_reply("<tool_call>\nI will call cd next.\n</tool_call>", DECLARED)
    assert not prose.calls and "not a JSON tool call" in prose.refused[0].reason


def test_one_bad_call_does_not_take_the_good_ones_with_it():
    parsed = parse_reply("[ls(a=1), __import__('os').getcwd(), cd(folder='d')]", DECLARED)
    assert [c.name for c in parsed.calls] == ["ls", "cd"] and len(parsed.refused) == 1


def test_hostile_tool_call_json_is_refused():
    cases = {
        '{"name": "rm", "arguments": {}}': "not a declared function",
        '{"name": "ls", "arguments": "__import__(\'os\')"}': "not a JSON object",
        '{"name": "ls", "arguments": {"a) or __import__(\'os\').system(\'x\'); (b": 1}}': "not an identifier",
        '{"name": "ls", "arguments": {"class": 1}}': "not an identifier",
        '{"name": "ls", "arguments": {"ａ": 1}}': "not an identifier",
        '{"name": "ls", "arguments": {"a": ' + "[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2) + "}}":
            "nested deeper",
        '{"name": "ls", "arguments": {"a": "' + "x" * (MAX_CALL_CHARS + 1) + '"}}': "over",
        '{"name": "ls", "arguments": {"a": ' + "1" * 5000 + "}}": "not a JSON tool call",
        "not json at all": "not a JSON tool call",
    }
    for body, reason in cases.items():
        parsed = parse_reply(f"<tool_call>{body}</tool_call>", DECLARED)
        assert not parsed.calls and parsed.refused and reason in parsed.refused[0].reason, (body[:60], parsed)


def test_strings_that_look_like_code_stay_data():
    parsed = parse_reply('<tool_call>{"name": "echo", "arguments": {"content": "__import__(\'os\').system(\'x\')"}}'
                         "</tool_call>", DECLARED)
    call = parsed.calls[0]
    assert call.kwargs["content"] == "__import__('os').system('x')"
    assert call.source == "echo(content=\"__import__('os').system('x')\")"  # repr: a string literal, not code


def test_enormous_and_deep_inputs_do_not_crash():
    deep = "ls(a=" + "[" * 5000 + "]" * 5000 + ")"
    assert not parse_reply(deep, DECLARED).calls
    assert parse_python_calls("ls(a='" + "x" * 300_000 + "')", DECLARED) is None  # past MAX_REPLY_CHARS: not parsed
    big = parse_reply("ls(a='" + "x" * (MAX_CALL_CHARS + 10) + "')", DECLARED)
    assert not big.calls and "over" in big.refused[0].reason
    assert not parse_reply("ls(a=" + "1" * 5000 + ")", DECLARED).calls  # past the digit limit: not Python
    nested = "ls(a=" + "[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2) + ")"
    assert "nested deeper" in parse_reply(nested, DECLARED).refused[0].reason


def test_rebuilt_source_round_trips_through_the_parser():
    call = Call("echo", ("it's \"quoted\"\n",), {"file_name": "a\u202eb.txt", "n": [1, {"k": (2, None)}]})
    again = parse_python_calls(call.source, DECLARED)
    assert again is not None and again.calls == (call,)
    assert json.loads(json.dumps(call.kwargs["n"], default=list)) == [1, {"k": [2, None]}]
