"""The ``chatml`` template writes conversations as Qwen2.5-Coder's own chat template does.

The reference is the Jinja template shipped in the model's GGUF (``data/qwen2.5-coder-chat-
template.jinja``, Apache-2.0, copied unchanged) rendered by transformers' chat-template renderer.
The texts must be equal character for character, with one documented exception: consecutive tool
results, which Qwen's template joins into one user turn and ``chatml`` writes as one turn each.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from engine.template import attach_tools, get_template, normalize_message

QWEN_JINJA = (Path(__file__).parent / "data" / "qwen2.5-coder-chat-template.jinja").read_text()
CHATML = get_template("chatml")
TOOLS = [
    {"type": "function", "function": {"name": "read_page", "description": "Read one page of a document.",
                                      "parameters": {"type": "object", "properties": {
                                          "doc": {"type": "string"}, "cursor": {"type": "integer"}},
                                          "required": ["doc"]}}},
    {"type": "function", "function": {"name": "grep", "description": "Search — ünïcode stays as is.",
                                      "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
]


def ours(messages: list[dict], tools: list[dict] | None = None) -> str:
    msgs = [normalize_message(m, i) for i, m in enumerate(attach_tools(messages, tools))]
    return "".join(p.text for i, m in enumerate(msgs) for p in CHATML.parts(m, i)) + CHATML.generation_prompt


def qwens(messages: list[dict], tools: list[dict] | None = None) -> str:
    out = render_jinja_template([messages], tools=tools, chat_template=QWEN_JINJA, add_generation_prompt=True)
    return out[0][0] if isinstance(out, tuple) else out[0]


def call(name: str, arguments: dict, i: int = 0) -> dict:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments}}


AGENT = [
    {"role": "user", "content": "Find the deploy date in the runbook."},
    {"role": "assistant", "content": "", "tool_calls": [call("read_page", {"doc": "runbook", "cursor": 0})]},
    {"role": "tool", "tool_call_id": "call_0", "content": "page 0: ... deploy on 2024-05-02 ..."},
    {"role": "assistant", "content": "Checking the next page.",
     "tool_calls": [call("read_page", {"doc": "runbook", "cursor": 1}, 1), call("grep", {"q": "deploy"}, 2)]},
    {"role": "tool", "tool_call_id": "call_1", "content": "page 1: nothing"},
]

CASES = {
    "user only (default system turn)": ([{"role": "user", "content": "hi"}], None),
    "own system turn": ([{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}], None),
    "multi-turn": ([{"role": "system", "content": "S"}, {"role": "user", "content": "a"},
                    {"role": "assistant", "content": "b"}, {"role": "user", "content": "c\n\nd"}], None),
    "tools, default system": (AGENT, TOOLS),
    "tools, own system": ([{"role": "system", "content": "You are an agent."}, *AGENT], TOOLS),
    "calls without tools declared": (AGENT, None),
    "a later system message": ([{"role": "user", "content": "a"}, {"role": "system", "content": "note"},
                                {"role": "user", "content": "b"}], None),
}


@pytest.mark.parametrize("case", CASES)
def test_chatml_writes_what_qwens_template_writes(case):
    messages, tools = CASES[case]
    assert ours(messages, tools) == qwens(messages, tools)


def test_consecutive_tool_results_are_one_turn_each():
    """The one difference, character for character: each result closes its own user turn."""
    two = [*AGENT[:3], {"role": "tool", "tool_call_id": "call_9", "content": "second result"}]
    joined = "\n</tool_response>\n<tool_response>\n"
    assert joined in qwens(two, TOOLS)
    split = "\n</tool_response><|im_end|>\n<|im_start|>user\n<tool_response>\n"
    assert ours(two, TOOLS) == qwens(two, TOOLS).replace(joined, split)


def test_tool_specs_travel_on_message_zero_only():
    from engine.errors import MessageError

    msgs = attach_tools([{"role": "user", "content": "hi"}], TOOLS)
    assert msgs[0]["tools"] == TOOLS
    with pytest.raises(MessageError, match=r"messages\[1\].tools"):
        normalize_message({"role": "user", "content": "x", "tools": TOOLS}, 1)
    with pytest.raises(MessageError, match="tools must be a list"):
        attach_tools(msgs, "read_page")
    with pytest.raises(MessageError, match="other tools"):
        attach_tools(msgs, TOOLS[:1])
    # templates that do not render tools ignore them: gemma's text is unchanged by them
    gemma = get_template("gemma")
    with_tools = [p.text for p in gemma.parts(normalize_message(msgs[0], 0), 0)]
    assert with_tools == [p.text for p in gemma.parts(normalize_message({"role": "user", "content": "hi"}, 0), 0)]
