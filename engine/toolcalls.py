"""Tool calls in generated text: ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks.

The chat templates render an assistant's tool calls this way (``engine.template``), so a model
that imitates its history writes them the same way; the server turns them back into OpenAI
``tool_calls`` when the request declares ``tools``, and ``evals.cache.live`` runs the calls an agent makes.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ParsedReply:
    """Text before the first tool call, the calls (OpenAI shape), and unparseable blocks."""

    content: str
    tool_calls: list[dict[str, Any]]
    invalid: list[str]


def parse_tool_calls(text: str) -> ParsedReply:
    calls, invalid = [], []
    for i, raw in enumerate(_BLOCK.findall(text)):
        try:
            obj = json.loads(raw)
            name = obj["name"]
            if not isinstance(name, str) or not name:
                raise ValueError("name")
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            invalid.append(raw[:200])
            continue
        args = obj.get("arguments", {})
        digest = hashlib.sha256(f"{i}:{raw}".encode()).hexdigest()[:12]
        calls.append({"id": f"call_{digest}", "type": "function",
                      "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}})
    cut = text.find("<tool_call>")
    content = (text if cut < 0 else text[:cut]).strip()
    return ParsedReply(content, calls, invalid)


def reply_message(text: str, finish_reason: str, tools_declared: bool) -> tuple[dict[str, Any], str]:
    """The OpenAI ``message`` and ``finish_reason`` of a generated reply: with tools declared and
    at least one well-formed ``<tool_call>`` block, the calls come back as ``tool_calls`` (the text
    before them as ``content``, or null) and the finish reason is ``tool_calls``."""
    if tools_declared:
        parsed = parse_tool_calls(text)
        if parsed.tool_calls:
            message = {"role": "assistant", "content": parsed.content or None, "tool_calls": parsed.tool_calls}
            return message, "tool_calls"
    return {"role": "assistant", "content": text}, finish_reason
