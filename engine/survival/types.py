"""Values of the survival layer: what a policy is asked (:class:`SurvivalRequest`) and what it answers.

While an agent waits on a tool, its KV sits in memory. A *survival policy* decides, per paused
session, one :class:`Action`:

    KEEP     leave the KV where it is; under memory pressure it is evicted in ``score`` order
             (lowest first; ``score=None`` means plain LRU, exactly the engine's default)
    PIN      keep it in the pool; evicted only after every unpinned candidate
    SWAP     move it to the host tier now (where the host tier has room)
    DISCARD  free it now; the next turn recomputes it

``ttl_s`` makes a decision temporary: when it expires the policy is asked again about that
session (with the time waited so far), so "pin for 2 s, then release" or "preserve, then swap
at 4 s, then discard at 7 s" are sequences of decisions. Every value here is frozen and has a
JSON form (``wire()``), because policy programs see requests as JSON inside the sandbox.

This module holds data and validation only; the manager that applies decisions is
``engine.survival.manager``.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.errors import AKVError, show

if TYPE_CHECKING:
    from engine.survival.cost import CostModel


class SurvivalError(AKVError):
    """A malformed tool gap, survival decision or survival request (names the field and value)."""


class Action(enum.Enum):
    """What happens to a paused session's KV (see the module docstring)."""

    KEEP = "keep"
    PIN = "pin"
    SWAP = "swap"
    DISCARD = "discard"


def check_number(value: Any, where: str, *, low: float = -math.inf, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SurvivalError(f"{where} must be a finite number, got {show(value)}", field=where, value=value)
    if value < low:
        raise SurvivalError(f"{where} must be >= {low:g}, got {show(value)}", field=where, value=value)
    return float(value)


@dataclass(frozen=True)
class SurvivalDecision:
    """One policy answer for one paused session (see the module docstring).

    Attributes:
        action: what to do now.
        ttl_s: seconds until the policy is asked again about this session (``None``: never).
        score: survival score; under pressure lower scores are evicted first (``None``: LRU).
    """

    action: Action
    ttl_s: float | None = None
    score: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.action, Action):
            raise SurvivalError(f"action must be an Action, got {show(self.action)}", field="action",
                                value=self.action)
        check_number(self.ttl_s, "ttl_s", low=0.0, allow_none=True)
        check_number(self.score, "score", allow_none=True)

    @classmethod
    def from_wire(cls, raw: Any, where: str = "decision") -> SurvivalDecision:
        """Parse ``{"action": "keep"|"pin"|"swap"|"discard", "ttl_s": s|None, "score": x|None}``.

        Raises:
            SurvivalError: naming ``where`` and the offending field.
        """
        if not isinstance(raw, Mapping):
            raise SurvivalError(f"{where} must be an object with an 'action', got {show(raw)}", field=where, value=raw)
        extra = set(raw) - {"action", "ttl_s", "score"}
        if extra:
            raise SurvivalError(f"{where}: unknown field {sorted(extra)[0]!r}; valid fields: action, ttl_s, score",
                                field=where, value=sorted(extra)[0])
        names = [a.value for a in Action]
        action = raw.get("action")
        if action not in names:
            raise SurvivalError(f"{where}.action must be one of {', '.join(names)}, got {show(action)}",
                                field=f"{where}.action", value=action)
        ttl = check_number(raw.get("ttl_s"), f"{where}.ttl_s", low=0.0, allow_none=True)
        score = check_number(raw.get("score"), f"{where}.score", allow_none=True)
        return cls(Action(action), ttl, score)

    def wire(self) -> dict[str, Any]:
        return {"action": self.action.value, "ttl_s": self.ttl_s, "score": self.score}


KEEP = SurvivalDecision(Action.KEEP)


@dataclass(frozen=True)
class ToolGap:
    """What the harness says about a pause (the ``tool_gap`` request field).

    Attributes:
        tool: the tool being waited on (durations are learned per tool).
        expected_s: the harness's estimate of the pause, or ``None`` when unknown.
        side_effect: whether the tool changes the world (informational for survival).
    """

    tool: str = "unknown"
    expected_s: float | None = None
    side_effect: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.tool, str) or not 0 < len(self.tool) <= 128:
            raise SurvivalError(f"tool_gap.tool must be a non-empty string of at most 128 characters, got "
                                f"{show(self.tool)}", field="tool_gap.tool", value=self.tool)
        check_number(self.expected_s, "tool_gap.expected_s", low=0.0, allow_none=True)
        if not isinstance(self.side_effect, bool):
            raise SurvivalError(f"tool_gap.side_effect must be a boolean, got {show(self.side_effect)}",
                                field="tool_gap.side_effect", value=self.side_effect)

    @classmethod
    def from_wire(cls, raw: Any) -> ToolGap:
        """Parse ``{"expected_s": 3.0, "tool": "search", "side_effect": false}`` (all optional).

        Raises:
            SurvivalError: a negative or non-numeric gap, a bad tool name, an unknown field.
        """
        if not isinstance(raw, Mapping):
            raise SurvivalError(f"tool_gap must be an object, got {show(raw)}", field="tool_gap", value=raw)
        extra = set(raw) - {"tool", "expected_s", "side_effect"}
        if extra:
            raise SurvivalError(f"tool_gap: unknown field {sorted(extra)[0]!r}; valid fields: tool, expected_s, "
                                "side_effect", field="tool_gap", value=sorted(extra)[0])
        expected = check_number(raw.get("expected_s"), "tool_gap.expected_s", low=0.0, allow_none=True)
        return cls(raw.get("tool", "unknown"), expected, raw.get("side_effect", False))


_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)


def tool_call_name(text: str) -> str | None:
    """The tool named by the last ``<tool_call>{json}</tool_call>`` block of a reply (the templates'
    rendering of calls), ``"unknown"`` for a block without a readable name, ``None`` for no block."""
    if "<tool_call>" not in text:
        return None
    blocks = _TOOL_CALL.findall(text)
    for raw in reversed(blocks):
        try:
            name = json.loads(raw).get("name")
        except (json.JSONDecodeError, AttributeError):
            continue
        if isinstance(name, str) and 0 < len(name) <= 128:
            return name
    return "unknown"


@dataclass(frozen=True)
class SessionInfo:
    """What a policy sees of one paused session (tokens, bytes and seconds).

    ``service_s`` is the session's attained LLM service so far; ``program_service_s`` sums it
    over the sessions of the same program (Autellix PLAS) and ``critical_s`` is the largest
    per-session service in the program (ATLAS's critical path for parallel threads).
    ``queue_wait_s`` is the time its calls spent waiting for admission. ``previous`` is the
    decision this session had before (on a TTL expiry), else ``None``.
    """

    session: str
    program: str
    turn: int
    context_tokens: int
    kv_bytes: int
    resident_tokens: int
    host_tokens: int
    absent_tokens: int
    tool: str
    expected_gap_s: float | None
    waited_s: float
    paused_at: float
    arrival_s: float
    service_s: float
    program_service_s: float
    critical_s: float
    queue_wait_s: float
    relevance: float | None
    side_effect: bool
    previous: SurvivalDecision | None = None

    def wire(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "previous"}
        out["previous"] = self.previous.wire() if self.previous is not None else None
        return out


@dataclass(frozen=True)
class SystemInfo:
    """The serving system at decision time (bytes, tokens, counts)."""

    pool_bytes: int
    pool_used: int
    host_bytes: int
    host_used: int
    running_tokens: int
    running: int
    paused: int
    paused_bytes: int

    def wire(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class LogStats:
    """What the shared event log knows (``engine.survival.log``), bounded in size.

    Attributes:
        durations: per tool of the pending sessions, its most recent observed pause durations.
        all_durations: the most recent pause durations over every tool.
        n_returns: tool returns observed in total.
        eta: -corr(turn index, turns remaining) over finished programs (``None``: none finished).
        queue_delay_s: mean admission delay of resumed requests whose KV had been evicted.
        finished_turns: turn counts of recently finished programs.
    """

    durations: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    all_durations: tuple[float, ...] = ()
    n_returns: int = 0
    eta: float | None = None
    queue_delay_s: float | None = None
    finished_turns: tuple[int, ...] = ()

    def wire(self) -> dict[str, Any]:
        return {"durations": {k: list(v) for k, v in self.durations.items()}, "all_durations": list(self.all_durations),
                "n_returns": self.n_returns, "eta": self.eta, "queue_delay_s": self.queue_delay_s,
                "finished_turns": list(self.finished_turns)}


@dataclass(frozen=True)
class SurvivalRequest:
    """One decision point: the sessions that need a decision now, plus the system and the log.

    ``pending`` holds sessions that just paused or whose decision's TTL expired; a policy
    answers for each of them, by session id.
    """

    now: float
    pending: tuple[SessionInfo, ...]
    system: SystemInfo
    log: LogStats
    cost: CostModel

    def wire(self) -> dict[str, Any]:
        """The JSON form a policy program receives (``search_spaces/survival/api.py``)."""
        return {"now": self.now, "pending": [s.wire() for s in self.pending], "system": self.system.wire(),
                "log": self.log.wire(), "cost": self.cost.wire()}
