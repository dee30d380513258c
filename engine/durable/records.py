"""Step records of a durable session, and the errors of replaying them.

A session's history is a list of steps. A step is written twice: once ``STARTED`` (before it
runs: the intent) and once ``DONE`` (with its result and the messages it appended). A step left
``STARTED`` by a crash is *in doubt*: an LLM call or a tool without side effects simply runs
again, but a tool with side effects may or may not have acted, so it is never run again without
a recorded result (:class:`SideEffectError`, naming the tool and the step).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.durable.store import DurableError


class SideEffectError(DurableError):
    """Replaying or restoring past a side-effecting tool call that has no recorded result."""

    def __init__(self, tool: str, step: int, what: str) -> None:
        super().__init__(f"tool {tool!r} at step {step} has side effects and no recorded result: {what} "
                         f"(record what it did with resolve({step}, result), or resolve({step}, None, ran=False) "
                         "if it did not run)", field=f"steps[{step}]", value=tool)
        self.tool = tool
        self.step = step


class ReplayMismatchError(DurableError):
    """The re-run agent asked for a different step than the one recorded at that position."""


class StepKind(enum.Enum):
    LLM = "llm"
    TOOL = "tool"
    MERGE = "merge"
    MESSAGE = "message"


class StepStatus(enum.Enum):
    STARTED = "started"
    DONE = "done"


@dataclass(frozen=True)
class StepRecord:
    """One step (see the module docstring).

    Attributes:
        index: position in the session's history.
        kind / status: what it is, whether it finished.
        tool, args, side_effect, key: the tool call (``key``: idempotency key of a side effect).
        result: the LLM's text or the tool's result (``DONE`` only).
        appended: the messages the step added to the history.
        schedule: the cache schedule of an LLM call; usage: its token accounting.
        reused_effect: the result came from the effect ledger, not from running the tool.
        meta: more about the step; an LLM call's ``token_ids`` (the reply's tokens, as generated).
    """

    index: int
    kind: StepKind
    status: StepStatus
    tool: str | None = None
    args: Mapping[str, Any] | None = None
    side_effect: bool = False
    key: str | None = None
    result: str | None = None
    appended: tuple[Mapping[str, Any], ...] = ()
    schedule: Mapping[str, Any] | None = None
    usage: Mapping[str, int] | None = None
    reused_effect: bool = False
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def in_doubt(self) -> bool:
        """A started side-effecting tool call whose outcome is unknown."""
        return self.status is StepStatus.STARTED and self.kind is StepKind.TOOL and self.side_effect

    def wire(self) -> dict[str, Any]:
        return {"index": self.index, "kind": self.kind.value, "status": self.status.value, "tool": self.tool,
                "args": dict(self.args) if self.args is not None else None, "side_effect": self.side_effect,
                "key": self.key, "result": self.result, "appended": [dict(m) for m in self.appended],
                "schedule": dict(self.schedule) if self.schedule is not None else None,
                "usage": dict(self.usage) if self.usage is not None else None, "reused_effect": self.reused_effect,
                "meta": dict(self.meta)}

    @classmethod
    def from_wire(cls, raw: Any) -> StepRecord:
        try:
            return cls(int(raw["index"]), StepKind(raw["kind"]), StepStatus(raw["status"]), raw.get("tool"),
                       raw.get("args"), bool(raw.get("side_effect", False)), raw.get("key"), raw.get("result"),
                       tuple(raw.get("appended") or ()), raw.get("schedule"), raw.get("usage"),
                       bool(raw.get("reused_effect", False)), dict(raw.get("meta") or {}))
        except (KeyError, TypeError, ValueError) as err:
            raise DurableError(f"malformed step record: {err}", field="steps", value=None) from err
