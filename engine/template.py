"""Chat templates: how one message becomes text, split into parts.

A template turns each message into a few *parts* (header, reasoning, content, tool specs, tool
calls, footer). The layout tokenizes each part on its own, so message i's tokens never depend on
the messages after it (rendering is stable under append) and a drop can target a part, such as
the reasoning of an assistant turn. Templates are data; pick one by name with :func:`get_template`.

Templates: ``gemma`` (Gemma's turn markers), ``plain`` (role-labelled text, for base models) and
``chatml`` (Qwen2.5's ChatML: ``<|im_start|>role`` / ``<|im_end|>``, tool specs in the system turn
as Qwen's own template writes them, tool results as ``<tool_response>`` user turns, a default
system turn when the conversation has none). ``chatml`` writes every message as Qwen's template
does with one exception: Qwen's template puts consecutive tool results in one user turn, and
``chatml`` gives each its own (``<|im_end|>\n<|im_start|>user`` between them), so that a tool
result's tokens never depend on the next message and each one can be dropped alone.

Tool specs (OpenAI ``tools``) travel on message 0 as its ``tools`` field (:func:`attach_tools`);
templates that do not render them (``gemma``, ``plain``) ignore it.

This module validates message shapes (roles, content types); it does not tokenize.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.errors import MessageError, show

ROLES = ("system", "user", "assistant", "tool")
_ROLE_ALIASES = {"developer": "system"}


@dataclass(frozen=True)
class Part:
    """A piece of a rendered message. ``kind`` is header, thinking, content, tools, tool_calls or footer."""

    kind: str
    text: str


@dataclass(frozen=True)
class ChatTemplate:
    """A chat format given by its strings.

    Attributes:
        name: registry name.
        headers: role -> text that opens a message of that role.
        footer: text that closes every message.
        generation_prompt: text after the last message that asks the model to speak.
        stop: strings that end generation (besides the tokenizer's end-of-sequence tokens).
        bos: prepend the tokenizer's beginning-of-sequence token to message 0.
        footers: role -> footer, where a role's differs from ``footer``.
        default_system: a system turn written before message 0 when it is not a system message
            (``None``: none).
        renders_tools: write message 0's ``tools`` into the system turn (Qwen's words).
        tool_call_json: how a call's JSON is written: ``sorted`` (arguments first, keys sorted) or
            ``qwen`` (``{"name": ..., "arguments": ...}`` with the arguments' keys as given).
        turn_open: the marker that opens every turn (one special token), or ``""``: the
            ``min_tokens`` option masks it with the stops.
    """

    name: str
    headers: Mapping[str, str]
    footer: str
    generation_prompt: str
    stop: tuple[str, ...]
    bos: bool = True
    thinking_open: str = "<think>\n"
    thinking_close: str = "\n</think>\n"
    footers: Mapping[str, str] = field(default_factory=dict)
    default_system: str | None = None
    renders_tools: bool = False
    tool_call_json: str = "sorted"
    turn_open: str = ""

    def parts(self, message: Mapping[str, Any], index: int) -> list[Part]:
        """Render ``message`` (already checked by :func:`normalize_message`) into its parts."""
        role = message["role"]
        header = self.headers[role]
        if role == "tool" and message.get("name"):
            header = header.replace("{name}", str(message["name"]))
        else:
            header = header.replace("{name}", "tool")
        tools = message.get("tools") if self.renders_tools and index == 0 else None
        if index == 0 and role != "system" and (self.default_system is not None or tools):
            system = self.default_system or ""
            block = qwen_tools_block(tools) if tools else ""
            header = f"{self.headers['system']}{system}{block}{self.footers.get('system', self.footer)}{header}"
            tools = None
        out = [Part("header", header)]
        reasoning = message.get("reasoning_content")
        if reasoning:
            out.append(Part("thinking", f"{self.thinking_open}{reasoning}{self.thinking_close}"))
        content = message.get("content") or ""
        if content:
            out.append(Part("content", content))
        if tools:
            out.append(Part("tools", qwen_tools_block(tools)))
        calls = message.get("tool_calls")
        if calls:
            out.append(Part("tool_calls", render_tool_calls(calls, leading_newline=bool(content),
                                                            style=self.tool_call_json)))
        out.append(Part("footer", self.footers.get(role, self.footer)))
        return out


def render_tool_calls(calls: Sequence[Mapping[str, Any]], leading_newline: bool, style: str = "sorted") -> str:
    """Tool calls as text: one ``<tool_call>{json}</tool_call>`` block per call.

    ``style`` ``sorted``: ``{"arguments": ..., "name": ...}`` with every key sorted; ``qwen``:
    ``{"name": ..., "arguments": ...}`` with the arguments' keys in their given order, as Qwen's
    chat template writes them. Arguments given as a JSON string are parsed first.
    """
    blocks = []
    for call in calls:
        fn = call.get("function", call)
        args = fn.get("arguments", {})
        if isinstance(args, str):
            with contextlib.suppress(json.JSONDecodeError):
                args = json.loads(args)
        if style == "qwen":
            payload = f'{{"name": {json.dumps(fn.get("name"), ensure_ascii=False)}, "arguments": ' \
                      f'{json.dumps(args, ensure_ascii=False)}}}'
        else:
            payload = json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False, sort_keys=True)
        blocks.append(f"<tool_call>\n{payload}\n</tool_call>")
    return ("\n" if leading_newline else "") + "\n".join(blocks)


def qwen_tools_block(tools: Sequence[Any]) -> str:
    """The tool specs as Qwen2.5-Coder's chat template (the one its GGUF ships) writes them after
    the system prompt, doubled braces of its example call included."""
    specs = "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools)
    return ("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
            f"{specs}\n</tools>\n\nFor each function call, return a json object with function name and "
            "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>')


_GEMMA = ChatTemplate(
    name="gemma",
    headers={
        "system": "<start_of_turn>system\n",
        "user": "<start_of_turn>user\n",
        "assistant": "<start_of_turn>model\n",
        "tool": "<start_of_turn>tool\n",
    },
    footer="<end_of_turn>\n",
    generation_prompt="<start_of_turn>model\n",
    stop=("<end_of_turn>",),
    turn_open="<start_of_turn>",
)

# Role-labelled plain text: base models follow it better than turn markers (see MEASURED.md).
_PLAIN = ChatTemplate(
    name="plain",
    headers={
        "system": "",
        "user": "User: ",
        "assistant": "Assistant: ",
        "tool": "Tool result ({name}):\n",
    },
    footer="\n\n",
    generation_prompt="Assistant:",
    stop=("\n\n", "\nUser:", "\nTool result"),
)

# Qwen2.5's ChatML (its GGUF's chat template; see the module docstring for the one difference).
_CHATML = ChatTemplate(
    name="chatml",
    headers={
        "system": "<|im_start|>system\n",
        "user": "<|im_start|>user\n",
        "assistant": "<|im_start|>assistant\n",
        "tool": "<|im_start|>user\n<tool_response>\n",
    },
    footer="<|im_end|>\n",
    footers={"tool": "\n</tool_response><|im_end|>\n"},
    generation_prompt="<|im_start|>assistant\n",
    stop=("<|im_end|>", "<|endoftext|>"),
    bos=False,
    default_system="You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
    renders_tools=True,
    tool_call_json="qwen",
    turn_open="<|im_start|>",
)

TEMPLATES: dict[str, ChatTemplate] = {t.name: t for t in (_GEMMA, _PLAIN, _CHATML)}


def get_template(name: str | ChatTemplate) -> ChatTemplate:
    """Look a template up by name; the error lists the valid names."""
    if isinstance(name, ChatTemplate):
        return name
    try:
        return TEMPLATES[name]
    except KeyError:
        raise MessageError(f"unknown chat template {name!r}; valid: {', '.join(sorted(TEMPLATES))}",
                           field="template", value=name) from None


def normalize_message(message: Any, index: int) -> dict[str, Any]:
    """Check one OpenAI-style message and return a plain dict with normalized fields.

    Content given as a list of ``{"type": "text", "text": ...}`` parts is joined. Raises
    :class:`MessageError` naming ``messages[i].field`` for anything else.
    """
    where = f"messages[{index}]"
    if not isinstance(message, Mapping):
        raise MessageError(f"{where} must be an object, got {show(message)}", field=where, value=message)
    role = message.get("role")
    if isinstance(role, str):  # a dict or list here is refused below (it cannot even be looked up)
        role = _ROLE_ALIASES.get(role, role)
    if role not in ROLES:
        raise MessageError(f"{where}.role must be one of {', '.join(ROLES)}, got {show(message.get('role'))}",
                           field=f"{where}.role", value=message.get("role"))
    content = message.get("content")
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise MessageError(f"{where}.content[{j}] must be a text part, got {show(part)}",
                                   field=f"{where}.content", value=part)
            texts.append(part["text"])
        content = "".join(texts)
    if content is not None and not isinstance(content, str):
        raise MessageError(f"{where}.content must be a string, got {show(content)}",
                           field=f"{where}.content", value=content)
    out: dict[str, Any] = {"role": role, "content": content or ""}
    reasoning = message.get("reasoning_content")
    if reasoning is not None:
        if not isinstance(reasoning, str):
            raise MessageError(f"{where}.reasoning_content must be a string, got {show(reasoning)}",
                               field=f"{where}.reasoning_content", value=reasoning)
        out["reasoning_content"] = reasoning
    calls = message.get("tool_calls")
    if calls:
        if role != "assistant" or not isinstance(calls, list) or not all(isinstance(c, Mapping) for c in calls):
            raise MessageError(f"{where}.tool_calls must be a list of calls on an assistant message",
                               field=f"{where}.tool_calls", value=calls)
        out["tool_calls"] = [dict(c) for c in calls]
    for key in ("name", "tool_call_id"):
        if message.get(key) is not None:
            out[key] = str(message[key])
    tools = message.get("tools")
    if tools is not None:
        if index != 0 or not isinstance(tools, list) or not all(isinstance(t, Mapping) for t in tools):
            raise MessageError(f"{where}.tools must be a list of tool objects, on message 0 only (see attach_tools)",
                               field=f"{where}.tools", value=tools)
        if tools:
            out["tools"] = [dict(t) for t in tools]
    if role == "user" and not out["content"]:
        raise MessageError(f"{where}.content is empty", field=f"{where}.content", value=content)
    return out


def attach_tools(messages: Sequence[Any], tools: Sequence[Any] | None) -> list[Any]:
    """``messages`` with the request's tool specs (OpenAI ``tools``) on message 0, where templates
    that render them (``chatml``) write them; a copy, the caller's list is left as it was.

    Raises:
        MessageError: ``tools`` is not a list of objects, or message 0 already carries other tools.
    """
    out = list(messages)
    if not tools:
        return out
    if not isinstance(tools, Sequence) or isinstance(tools, str) or not all(isinstance(t, Mapping) for t in tools):
        raise MessageError(f"tools must be a list of tool objects, got {show(tools)}", field="tools", value=tools)
    if out and isinstance(out[0], Mapping):
        have = out[0].get("tools")
        if have is not None and list(have) != list(tools):
            raise MessageError("messages[0] carries other tools than the request's", field="messages[0].tools",
                               value=have)
        out[0] = {**out[0], "tools": [dict(t) for t in tools]}
    return out
