"""What the survival manager needs from where KV lives, and the records it keeps.

:class:`MemoryBackend` is implemented by the radix tree (``engine.survival.tree.TreeBackend``),
which the engine and the workload simulator (a tree with sizes-only payloads) both use. The
dataclasses here are the manager's records: a paused session, what a resumed session found, and
counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from engine.survival.types import KEEP, Action, SurvivalDecision, ToolGap

if TYPE_CHECKING:
    from engine.survival.manager import SurvivalManager


@dataclass(frozen=True)
class Footprint:
    """Where a session's context KV is: tokens in the pool and in the host tier (the rest is absent)."""

    resident_tokens: int
    host_tokens: int


@dataclass(frozen=True)
class PoolState:
    pool_bytes: int
    pool_used: int
    host_bytes: int
    host_used: int


class MemoryBackend(Protocol):
    """Where paused sessions' KV lives.

    ``attach`` makes the backend order its eviction victims by :meth:`SurvivalManager.order`;
    ``changed`` tells it that a session's order may have changed (a decision, a resume).
    ``swap_out`` / ``discard`` act on the KV that only ``session`` uses (never on KV shared with
    another paused session or held by a running request) and return bytes moved / tokens freed.
    """

    bytes_per_token: int

    def attach(self, manager: SurvivalManager) -> None: ...

    def changed(self, session: str) -> None: ...

    def footprint(self, handle: Any) -> Footprint: ...

    def swap_out(self, session: str, handle: Any) -> int: ...

    def discard(self, session: str, handle: Any) -> int: ...

    def pool(self) -> PoolState: ...


@dataclass
class Paused:
    """One paused session (mutable: its decision changes on TTL expiry)."""

    session: str
    program: str
    handle: Any
    turn: int
    context_tokens: int
    gap: ToolGap
    paused_at: float
    arrival_s: float
    service_s: float
    queue_wait_s: float
    relevance: float | None
    decision: SurvivalDecision = KEEP
    expires_at: float | None = None


@dataclass(frozen=True)
class ResumeInfo:
    """What a resumed session found: how long it waited and where its KV was."""

    session: str
    waited_s: float
    resident_tokens: int
    host_tokens: int
    absent_tokens: int
    decision: SurvivalDecision

    @property
    def evicted(self) -> bool:
        return self.host_tokens > 0 or self.absent_tokens > 0


@dataclass
class SurvivalCounters:
    """Counters since the manager was made."""

    pauses: int = 0
    resumes: int = 0
    expiries: int = 0
    policy_calls: int = 0
    policy_seconds: float = 0.0
    policy_errors: int = 0
    swap_out_bytes: int = 0
    discarded_tokens: int = 0
    actions: dict[str, int] = field(default_factory=lambda: {a.value: 0 for a in Action})
    last_error: str | None = None
