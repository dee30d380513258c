"""Who writes the model's replies for the BFCL replay judge: the engine (:class:`EngineResponder`)
or the gold calls (:class:`GoldResponder`, a check of the judge), one :class:`ReplyAsk` at a time.

Not for: deciding what is asked (:mod:`evals.bfcl.judge`), nor batching replies across jobs
(:func:`evals.bfcl.judge.judge` does that with the engine's own requests, :meth:`EngineResponder.options`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from engine.interface import ChatEngine, ChatOptions
from engine.template import render_tool_calls
from evals.tasks.schema import Task


@dataclass(frozen=True)
class ReplyAsk:
    """The reply a judgement needs next: the ``context`` messages under ``schedule`` (the wire
    format, or ``None``), at reply ``step`` of ``turn``."""

    context: list[dict[str, Any]]
    schedule: Any
    turn: int
    step: int


class Responder(Protocol):
    """Writes the assistant's reply to ``context`` under ``schedule`` (the wire format, or ``None``);
    ``turn`` and ``step`` say where in the task it is. Raises ``AKVError`` when it cannot."""

    def reply(self, context: list[dict[str, Any]], schedule: Any, turn: int, step: int) -> str: ...


@dataclass
class EngineResponder:
    """The engine's greedy reply. ``tool_choice``: ``auto`` (OpenAI's: the model may end its turn in
    prose at any reply) or ``required`` (a turn's first reply is a call of a declared tool, decoded
    under the tools' grammar; later replies ``auto``, so the turn can end)."""

    engine: ChatEngine
    max_tokens: int = 256
    tool_choice: str = "auto"

    def options(self, step: int) -> ChatOptions:
        """The chat options of the reply at ``step`` of a turn (the batched judge builds its requests with them)."""
        choice = "required" if self.tool_choice == "required" and step == 0 else "auto"
        return {"max_tokens": self.max_tokens, "temperature": 0.0, "tool_choice": choice}

    def reply(self, context: list[dict[str, Any]], schedule: Any, turn: int, step: int) -> str:
        return self.engine.chat(context, schedule, **self.options(step)).text


@dataclass
class GoldResponder:
    """Replies with the gold calls of each turn (as ``<tool_call>`` blocks), then with no call: a
    check of the judge itself, which must pass every turn."""

    task: Task

    def reply(self, context: list[dict[str, Any]], schedule: Any, turn: int, step: int) -> str:
        if step > 0:
            return "Done."
        calls = [c for m in self._assistant_of(turn) for c in m.get("tool_calls") or ()]
        return render_tool_calls(calls, leading_newline=False, style="qwen") if calls else "Done."

    def _assistant_of(self, turn: int) -> list[Mapping[str, Any]]:
        starts = [*self.task.meta["bfcl"]["turn_starts"], len(self.task.messages)]
        return [m for m in self.task.messages[starts[turn]:starts[turn + 1]] if m["role"] == "assistant"]
