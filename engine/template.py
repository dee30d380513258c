"""Chat templates: how one message becomes text, split into parts.

A template turns each message into a few *parts* (header, reasoning, content, tool calls,
footer). The layout tokenizes each part on its own, so message i's tokens never depend on the
messages after it (rendering is stable under append) and a drop can target a part, such as the
reasoning of an assistant turn. Templates are data; pick one by name with :func:`get_template`.

This module validates message shapes (roles, content types); it does not tokenize.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import MessageError, show

ROLES = ("system", "user", "assistant", "tool")
_ROLE_ALIASES = {"developer": "system"}


@dataclass(frozen=True)
class Part:
    """A piece of a rendered message. ``kind`` is header, thinking, content, tool_calls or footer."""

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
    """

    name: str
    headers: Mapping[str, str]
    footer: str
    generation_prompt: str
    stop: tuple[str, ...]
    bos: bool = True
    thinking_open: str = "<think>\n"
    thinking_close: str = "\n</think>\n"

    def parts(self, message: Mapping[str, Any], index: int) -> list[Part]:
        """Render ``message`` (already checked by :func:`normalize_message`) into its parts."""
        role = message["role"]
        header = self.headers[role]
        if role == "tool" and message.get("name"):
            header = header.replace("{name}", str(message["name"]))
        else:
            header = header.replace("{name}", "tool")
        out = [Part("header", header)]
        reasoning = message.get("reasoning_content")
        if reasoning:
            out.append(Part("thinking", f"{self.thinking_open}{reasoning}{self.thinking_close}"))
        content = message.get("content") or ""
        if content:
            out.append(Part("content", content))
        calls = message.get("tool_calls")
        if calls:
            out.append(Part("tool_calls", render_tool_calls(calls, leading_newline=bool(content))))
        out.append(Part("footer", self.footer))
        return out


def render_tool_calls(calls: Sequence[Mapping[str, Any]], leading_newline: bool) -> str:
    """Tool calls as text: one ``<tool_call>{json}</tool_call>`` block per call."""
    blocks = []
    for call in calls:
        fn = call.get("function", call)
        args = fn.get("arguments", {})
        if isinstance(args, str):
            with contextlib.suppress(json.JSONDecodeError):
                args = json.loads(args)
        payload = json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False, sort_keys=True)
        blocks.append(f"<tool_call>\n{payload}\n</tool_call>")
    return ("\n" if leading_newline else "") + "\n".join(blocks)


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

TEMPLATES: dict[str, ChatTemplate] = {t.name: t for t in (_GEMMA, _PLAIN)}


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
    role = _ROLE_ALIASES.get(role, role)  # type: ignore[arg-type]
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
    if role == "user" and not out["content"]:
        raise MessageError(f"{where}.content is empty", field=f"{where}.content", value=content)
    return out
