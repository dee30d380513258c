"""Tools of a durable session: each declares whether it has side effects.

A tool without side effects (a lookup, a computation) may run again when a step is replayed after
a crash. A tool with side effects (sending mail, writing a record, paying) never runs twice for
the same call: its result is recorded in the session's effect ledger under an idempotency key
(by default, the tool name and its canonical JSON arguments) and every later call with that key
-- on replay, after a restore, in a fork -- returns the recorded result instead.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.durable.store import DurableError
from engine.errors import show


@dataclass(frozen=True)
class Tool:
    """A callable tool.

    Attributes:
        name: unique name.
        fn: ``(args) -> str`` result text.
        side_effect: whether calling it changes the world.
        description: one line for listings.
    """

    name: str
    fn: Callable[[Mapping[str, Any]], str]
    side_effect: bool = False
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not 0 < len(self.name) <= 128:
            raise DurableError(f"tool name must be a non-empty string, got {show(self.name)}", field="tool",
                               value=self.name)
        if not callable(self.fn):
            raise DurableError(f"tool {self.name!r}: fn must be callable", field="tool", value=self.name)


class ToolBox:
    """Tools by name; an unknown name raises an error listing the valid ones."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            if t.name in self._tools:
                raise DurableError(f"tool {t.name!r} is defined twice", field="tool", value=t.name)
            self._tools[t.name] = t

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except (KeyError, TypeError):
            raise DurableError(f"unknown tool {show(name)}; valid tools: {', '.join(self._tools) or 'none'}",
                               field="tool", value=name) from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)


def canonical_args(args: Mapping[str, Any] | None) -> dict[str, Any]:
    """``args`` as a JSON round trip (raises :class:`DurableError` for values that are not JSON)."""
    try:
        return json.loads(json.dumps(dict(args or {}), sort_keys=True))
    except (TypeError, ValueError) as err:
        raise DurableError(f"tool arguments must be JSON values: {err}", field="args", value=None) from None


def idempotency_key(name: str, args: Mapping[str, Any] | None) -> str:
    """The default key of a side-effecting call: SHA-256 of the tool name and canonical arguments."""
    text = json.dumps([name, canonical_args(args)], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]
