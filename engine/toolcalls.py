"""Tool calls in generated text: ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks.

The chat templates render an assistant's tool calls this way (``engine.template``), so a model
that imitates its history writes them the same way; the server turns them back into OpenAI
``tool_calls`` when the request declares ``tools``, and ``evals.cache.live`` runs the calls an agent makes.

Small instruct models (Qwen2.5-Coder-1.5B measured) sometimes answer a tool request with the
call's bare JSON, ``{"name": ..., "arguments": {...}}``, without the tags, or inside a Markdown
code fence. When the caller names the declared tools, a reply that is nothing but such an object
(or a list of them) whose names are all declared tools is read as those calls too
(``ParsedReply.untagged``); anything else stays text. A last block that the end of the turn cut
before its closing tag counts when its JSON is a whole call. One block may hold several calls: a
JSON list of them, or one JSON object per line (as some models write parallel calls).

OpenAI's ``tool_choice`` (:func:`forced_opening`): ``"required"`` or a named function makes the reply
open with ``<tool_call>`` (and the function's name), so the model's next tokens are a call's JSON:
how an agent harness keeps a small model that would otherwise end its turn in the tool loop. The
rest of such a reply is decoded under a grammar of the declared tools (``engine.grammar``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import AKVError

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


_FENCE = re.compile(r"^```[A-Za-z]*\s*\n?(.*?)\n?```$", re.DOTALL)


@dataclass(frozen=True)
class ParsedReply:
    """Text before the first tool call, the calls (OpenAI shape), and the text of the blocks that hold
    no JSON call (whole: a caller may read them another way, as BFCL's Python form).

    ``untagged``: the calls were read from a reply that is only their JSON, without
    ``<tool_call>`` tags (see the module docstring)."""

    content: str
    tool_calls: list[dict[str, Any]]
    invalid: list[str]
    untagged: bool = False


def _call(i: int, raw: str, obj: Any) -> dict[str, Any] | None:
    """The OpenAI call of one parsed ``{"name", "arguments"}`` object, or ``None`` if it is not one."""
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    args = obj.get("arguments", {})
    digest = hashlib.sha256(f"{i}:{raw}".encode()).hexdigest()[:12]
    return {"id": f"call_{digest}", "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}


def _unfenced(text: str) -> str:
    """``text`` stripped, and without the Markdown code fence around it if it has one."""
    body = text.strip()
    fenced = _FENCE.match(body)
    return fenced.group(1).strip() if fenced else body


def _json(text: str) -> Any:
    """``text``'s JSON value, or ``None`` when it is not JSON."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError, and an integer past 4,300 digits
        return None


def _block_calls(i: int, raw: str) -> list[dict[str, Any]] | None:
    """The calls in one ``<tool_call>`` block's text (in a Markdown fence or not): one call's JSON,
    a JSON list of calls, or one call's JSON per line; ``None`` when it is none of these (``i``:
    the block's index, for the calls' ids)."""
    body = _unfenced(raw)
    whole = _json(body)
    objs = whole if isinstance(whole, list) else [whole] if whole is not None else None
    if objs is None and "\n" in body:
        lines = [_json(line) for line in body.splitlines() if line.strip()]
        objs = lines if all(isinstance(o, dict) for o in lines) else None
    if not objs:
        return None
    calls = [_call(i, f"{j}:{raw}" if j else raw, o) for j, o in enumerate(objs)]
    return None if any(c is None for c in calls) else [c for c in calls if c is not None]


def _untagged(text: str, tool_names: Collection[str]) -> list[dict[str, Any]]:
    """The calls of a reply that is only a call's JSON (or a list of calls), fenced or not, whose
    names are all in ``tool_names``; empty otherwise."""
    body = _unfenced(text)
    if not body.startswith(("{", "[")):
        return []
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):  # JSONDecodeError, and an integer past 4,300 digits
        return []
    objs = obj if isinstance(obj, list) else [obj]
    calls = [_call(i, json.dumps(o, sort_keys=True), o) for i, o in enumerate(objs)]
    if not calls or any(c is None or c["function"]["name"] not in tool_names for c in calls):
        return []
    return [c for c in calls if c is not None]


def parse_tool_calls(text: str, tool_names: Collection[str] = ()) -> ParsedReply:
    """The ``<tool_call>`` blocks of ``text`` as OpenAI calls; with ``tool_names`` (the declared
    tools), a reply without blocks that is only such a call's JSON counts too."""
    calls: list[dict[str, Any]] = []
    invalid: list[str] = []
    blocks = _BLOCK.findall(text)
    for i, raw in enumerate(blocks):
        found = _block_calls(i, raw)
        if found is None:
            invalid.append(raw)
            continue
        calls.extend(found)
    opened = text.rfind("<tool_call>")
    if opened >= 0 and text.find("</tool_call>", opened) < 0:  # the turn ended inside a block
        cut_calls = _block_calls(len(blocks), text[opened + len("<tool_call>"):].strip())
        calls.extend(cut_calls or ())
    if not calls and not invalid and tool_names:
        bare = _untagged(text, tool_names)
        if bare:
            return ParsedReply("", bare, [], untagged=True)
    cut = text.find("<tool_call>")
    content = (text if cut < 0 else text[:cut]).strip()
    return ParsedReply(content, calls, invalid)


def tool_names(tools: Any) -> list[str]:
    """The function names of an OpenAI ``tools`` list (entries without one are skipped)."""
    names = []
    for tool in tools or ():
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.append(fn["name"])
    return names


def reply_message(text: str, finish_reason: str, tools_declared: bool | Collection[str]) -> tuple[dict[str, Any], str]:
    """The OpenAI ``message`` and ``finish_reason`` of a generated reply: with tools declared and
    at least one well-formed ``<tool_call>`` block, the calls come back as ``tool_calls`` (the text
    before them as ``content``, or null) and the finish reason is ``tool_calls``. Given the
    declared tools' names, a reply that is only a call's untagged JSON counts as that call."""
    if tools_declared:
        names = () if isinstance(tools_declared, bool) else tools_declared
        parsed = parse_tool_calls(text, names)
        if parsed.tool_calls:
            message = {"role": "assistant", "content": parsed.content or None, "tool_calls": parsed.tool_calls}
            return message, "tool_calls"
    return {"role": "assistant", "content": text}, finish_reason


TOOL_CHOICES = ("auto", "none", "required")


def message_tools(messages: Any) -> Any:
    """The tool specs a request declares: message 0's ``tools`` (how requests carry them here)."""
    first = messages[0] if isinstance(messages, Sequence) and not isinstance(messages, str) and messages else None
    return first.get("tools") if isinstance(first, Mapping) else None


def forced_opening(tool_choice: Any, tools: Any) -> str:
    """The text a reply must open with under OpenAI's ``tool_choice`` given the declared ``tools``:
    ``""`` for ``None``, ``"auto"`` and ``"none"``; ``"<tool_call>\n"`` for ``"required"``; that and
    the function's name for ``{"type": "function", "function": {"name": ...}}``.

    Raises:
        AKVError (field ``tool_choice``): another value, a call required with no tools declared,
            or a named function that is not one of them.
    """
    if tool_choice is None or tool_choice in ("auto", "none"):
        return ""
    names = tool_names(tools)
    if tool_choice == "required":
        if not names:
            raise AKVError("tool_choice: 'required' needs declared tools (the request's tools)",
                           field="tool_choice", value=tool_choice)
        return "<tool_call>\n"
    fn = tool_choice.get("function") if isinstance(tool_choice, dict) and tool_choice.get("type") == "function" \
        else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise AKVError(f"tool_choice must be one of {list(TOOL_CHOICES)} or {{'type': 'function', 'function': "
                       f"{{'name': ...}}}}, got {tool_choice!r}"[:300], field="tool_choice", value=tool_choice)
    if name not in names:
        raise AKVError(f"tool_choice names {name!r}, which is not a declared tool ({', '.join(names) or 'none'})",
                       field="tool_choice", value=tool_choice)
    return f'<tool_call>\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": '
