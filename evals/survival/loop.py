"""The run loop shared by the real-engine replay and the simulator (one scheduling policy, two clocks).

Like the HTTP scheduler (``engine.server.scheduler``), each iteration admits at most one waiting
request (its prefill runs on admission), then advances every running generation by one token in
one decode step, then finishes those that are done. Waiting requests are served first come, first
served. A finished turn pauses its session on its tool (:meth:`SurvivalManager.pause`, which asks
the survival policy), and the tool's return, ``gap_s`` later, makes the next turn ready (after
:meth:`SurvivalManager.resume`). When nothing can run, the loop waits for the next tool return
or TTL expiry. An :class:`Executor` supplies the clock and the work: the real engine
(``evals.survival.real``) or the model of it (``evals.survival.sim``).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from engine.survival import SurvivalManager, ToolGap
from evals.survival.metrics import Recorder
from evals.survival.trace import SessionSpec, Trace, WorkloadError


@dataclass(frozen=True)
class Started:
    """A started turn: its executor handle and the token accounting of its prefill."""

    handle: Any
    prompt_tokens: int
    prefill_tokens: int
    recompute_tokens: int


class Executor(Protocol):
    """Runs turns. ``start`` prefills a turn and returns :class:`Started`; ``step`` advances the
    given handles by one token; ``finish`` releases a done handle and returns the handle the
    survival manager keeps for the paused session (``None`` after the last turn)."""

    def now(self) -> float: ...

    def wait_until(self, t: float) -> None: ...

    def start(self, session: SessionSpec, turn: int) -> Started: ...

    def step(self, handles: list[Any]) -> None: ...

    def generated(self, handle: Any) -> int: ...

    def done(self, handle: Any) -> bool: ...

    def finish(self, handle: Any, last: bool) -> Any: ...

    def pool_used(self) -> int: ...


@dataclass
class _Active:
    spec: SessionSpec
    turn: int
    started: Started
    ready_at: float
    started_at: float
    got_first: bool = False


@dataclass(frozen=True)
class LoopConfig:
    """Scheduling knobs. ``max_batch``: generations in flight at once."""

    max_batch: int = 4

    def __post_init__(self) -> None:
        if isinstance(self.max_batch, bool) or not isinstance(self.max_batch, int) or not 1 <= self.max_batch <= 1024:
            raise WorkloadError(f"max_batch must be an integer in [1, 1024], got {self.max_batch!r}",
                                field="max_batch", value=self.max_batch)


def run_loop(trace: Trace, ex: Executor, manager: SurvivalManager, config: LoopConfig,
             pool_bytes: int, on_iteration: Callable[[], None] | None = None) -> Recorder:
    """Run every session of ``trace`` to completion; returns what was observed."""
    rec = Recorder()
    events: list[tuple[float, int, str, int]] = []
    specs = {s.session: s for s in trace.sessions}
    seq = 0
    for s in trace.sessions:
        heapq.heappush(events, (s.arrival_s, seq, s.session, 0))
        seq += 1
    service: dict[str, float] = dict.fromkeys(specs, 0.0)
    waited: dict[str, float] = dict.fromkeys(specs, 0.0)
    ready: deque[tuple[float, str, int]] = deque()
    active: list[_Active] = []
    rec.pool(ex.now(), ex.pool_used())
    while events or ready or active:
        now = ex.now()
        while events and events[0][0] <= now:
            t, _, sid, turn = heapq.heappop(events)
            if turn:
                manager.resume(sid, t)
            ready.append((t, sid, turn))
        manager.tick(now)
        if ready and len(active) < config.max_batch:
            t_ready, sid, turn = ready.popleft()
            t_start = ex.now()
            manager.admitted(sid, t_start - t_ready)
            rec.hol_wait.append(t_start - t_ready)
            waited[sid] += t_start - t_ready
            started = ex.start(specs[sid], turn)
            rec.prefill_tokens += started.prefill_tokens
            rec.recompute_tokens += started.recompute_tokens
            rec.new_tokens += started.prefill_tokens - started.recompute_tokens
            active.append(_Active(specs[sid], turn, started, t_ready, t_start))
            manager.set_running(sum(a.started.prompt_tokens for a in active), len(active))
            rec.pool(ex.now(), ex.pool_used())
        if active:
            ex.step([a.started.handle for a in active])
            now = ex.now()
            for a in active:
                if not a.got_first and ex.generated(a.started.handle) >= 1:
                    a.got_first = True
                    (rec.resume_ttft if a.turn else rec.first_ttft).append(now - a.ready_at)
            still = []
            for a in active:
                if not ex.done(a.started.handle):
                    still.append(a)
                    continue
                seq = _end_turn(a, ex, manager, rec, events, service, waited, seq)
            active = still
            manager.set_running(sum(a.started.prompt_tokens for a in active), len(active))
            rec.pool(ex.now(), ex.pool_used())
            if on_iteration is not None:
                on_iteration()
            continue
        if not ready:
            wake = [t for t in (events[0][0] if events else None, manager.next_expiry()) if t is not None]
            if not wake:
                break
            ex.wait_until(min(wake))
    rec.pool(ex.now(), ex.pool_used())
    return rec


def _end_turn(a: _Active, ex: Executor, manager: SurvivalManager, rec: Recorder,
              events: list[tuple[float, int, str, int]], service: dict[str, float], waited: dict[str, float],
              seq: int) -> int:
    spec, turn = a.spec, a.turn
    last = turn == len(spec.turns) - 1
    handle = ex.finish(a.started.handle, last)
    now = ex.now()
    rec.turns += 1
    service[spec.session] += now - a.started_at
    if last:
        manager.finish(spec.session, len(spec.turns))
        rec.jct[spec.session] = now - spec.arrival_s
        return seq
    t = spec.turns[turn]
    assert t.tool is not None
    manager.pause(spec.session, handle, now=now, turn=turn, context_tokens=a.started.prompt_tokens,
                  gap=ToolGap(t.tool, t.expected_gap_s, t.side_effect), program=spec.program,
                  arrival_s=spec.arrival_s, service_s=service[spec.session], queue_wait_s=waited[spec.session],
                  relevance=t.relevance)
    heapq.heappush(events, (now + t.gap_s, seq, spec.session, turn + 1))
    return seq + 1
