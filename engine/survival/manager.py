"""The survival manager: the registry of paused sessions, their decisions, TTLs and counters.

A harness (the HTTP scheduler, the workload replay, the simulator) tells the manager when a
session pauses on a tool (:meth:`SurvivalManager.pause`), when its tool returns
(:meth:`~SurvivalManager.resume`) and when it ends (:meth:`~SurvivalManager.finish`), and calls
:meth:`~SurvivalManager.tick` now and then so that expired decisions are revisited. The manager
builds a :class:`~engine.survival.types.SurvivalRequest`, asks the policy, and applies the answer
through a :class:`MemoryBackend` (the radix tree's ``engine.survival.tree.TreeBackend``, in the
engine and in the workload simulator alike), which it tells when a session's eviction rank may
have changed (``changed``); backends ask :meth:`~SurvivalManager.order` for the rank.

It never touches KV itself and never sleeps; time is whatever ``now`` the caller passes.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Iterator, Mapping
from typing import Any

from engine.errors import AKVError
from engine.survival.backend import MemoryBackend, Paused, ResumeInfo, SurvivalCounters
from engine.survival.cost import CostModel
from engine.survival.log import EventLog
from engine.survival.policy import LRUSurvival, SurvivalPolicy
from engine.survival.types import (
    KEEP,
    Action,
    SessionInfo,
    SurvivalDecision,
    SurvivalError,
    SurvivalRequest,
    SystemInfo,
    ToolGap,
)


class SurvivalManager:
    """Paused sessions and their survival decisions.

    Args:
        backend: where the KV lives (attached at once).
        policy: the survival policy (default ``lru``: the engine's behaviour without this layer).
        cost: speeds that policies use to price recompute and swap.
        log: the shared event log (a new one by default).
        strict: re-raise a policy's error; otherwise record it and KEEP (the server's choice).
    """

    def __init__(self, backend: MemoryBackend, policy: SurvivalPolicy | None = None, cost: CostModel | None = None,
                 log: EventLog | None = None, *, strict: bool = True) -> None:
        self.backend = backend
        self.policy: SurvivalPolicy = policy if policy is not None else LRUSurvival()
        self.cost = cost or CostModel(bytes_per_token=backend.bytes_per_token)
        self.log = log or EventLog()
        self.strict = strict
        self.counters = SurvivalCounters()
        self._paused: dict[str, Paused] = {}
        self._ready: dict[str, Paused] = {}  # resumed, waiting for admission
        self._expiries: list[tuple[float, int, str]] = []  # lazy heap: stale entries are skipped
        self._seq = itertools.count()
        self._services: dict[str, dict[str, float]] = {}
        self._running = (0, 0)
        backend.attach(self)

    # ------------------------------------------------------------------ session lifecycle

    def pause(self, session: str, handle: Any, *, now: float, turn: int, context_tokens: int,
              gap: ToolGap | None = None, program: str | None = None, arrival_s: float = 0.0, service_s: float = 0.0,
              queue_wait_s: float = 0.0, relevance: float | None = None) -> SurvivalDecision:
        """Register ``session`` as paused on a tool, with ``handle`` locating its KV, and decide.

        Raises:
            SurvivalError: a negative count or time, or a session that is already paused.
            AKVError: the policy's error, when ``strict``.
        """
        if session in self._paused:
            raise SurvivalError(f"session {session!r} is already paused", field="session", value=session)
        self._ready.pop(session, None)
        for name, value in (("turn", turn), ("context_tokens", context_tokens), ("service_s", service_s),
                            ("queue_wait_s", queue_wait_s)):
            if value < 0:
                raise SurvivalError(f"{name} must be >= 0, got {value!r}", field=name, value=value)
        if relevance is not None and not 0.0 <= relevance <= 1.0:
            raise SurvivalError(f"relevance must be in [0, 1], got {relevance!r}", field="relevance", value=relevance)
        program = program or session
        self._services.setdefault(program, {})[session] = float(service_s)
        self._paused[session] = Paused(session, program, handle, int(turn), int(context_tokens), gap or ToolGap(),
                                       float(now), float(arrival_s), float(service_s), float(queue_wait_s), relevance)
        self.counters.pauses += 1
        due = self._due(now)
        self.counters.expiries += len(due)
        self._decide(now, [session, *due])
        return self._paused[session].decision

    def resume(self, session: str, now: float) -> ResumeInfo | None:
        """The tool of ``session`` returned: unregister it and record the pause in the log.

        Until :meth:`admitted`, a session whose policy scored or pinned it outranks every paused
        session in eviction order (it is about to run); under a score-less policy (``lru``) it is
        ordinary cache. Returns ``None`` when the session was not paused (its first turn, or a
        harness that never paused it).
        """
        p = self._paused.pop(session, None)
        if p is None:
            return None
        self._ready[session] = p
        self.backend.changed(session)
        fp = self.backend.footprint(p.handle)
        waited = max(0.0, now - p.paused_at)
        self.log.record_return(p.gap.tool, waited)
        self.counters.resumes += 1
        absent = max(0, p.context_tokens - fp.resident_tokens - fp.host_tokens)
        return ResumeInfo(session, waited, fp.resident_tokens, fp.host_tokens, absent, p.decision)

    def admitted(self, session: str, delay_s: float = 0.0) -> None:
        """The resumed request of ``session`` was admitted after waiting ``delay_s`` (its KV is now
        held by the request; Continuum's queue delay averages the waits of evicted ones)."""
        p = self._ready.pop(session, None)
        if p is None:
            return
        fp = self.backend.footprint(p.handle)
        if fp.resident_tokens < p.context_tokens:
            self.log.record_queue_delay(delay_s)
        self.backend.changed(session)

    def finish(self, session: str, turns: int) -> None:
        """The program of ``session`` ended after ``turns`` LLM calls (recorded for Continuum's eta)."""
        p = self._paused.pop(session, None) or self._ready.pop(session, None)
        if p is not None:
            self.backend.changed(session)
        program = p.program if p is not None else session
        self._services.get(program, {}).pop(session, None)
        if not self._services.get(program):
            self._services.pop(program, None)
        self.log.record_finish(turns)

    def set_running(self, tokens: int, count: int) -> None:
        """Context tokens and number of the requests running now (InferCept's C_other)."""
        self._running = (max(0, int(tokens)), max(0, int(count)))

    def _valid(self, entry: tuple[float, int, str]) -> bool:
        p = self._paused.get(entry[2])
        return p is not None and p.expires_at == entry[0]

    def _due(self, now: float) -> list[str]:
        """Sessions whose decision expired by ``now`` (removed from the expiry heap)."""
        due: list[str] = []
        while self._expiries and self._expiries[0][0] <= now:
            entry = heapq.heappop(self._expiries)
            if self._valid(entry) and entry[2] not in due:
                due.append(entry[2])
        return due

    def tick(self, now: float) -> int:
        """Revisit every decision whose TTL has expired; returns how many were revisited."""
        due = self._due(now)
        if due:
            self.counters.expiries += len(due)
            self._decide(now, due)
        return len(due)

    def next_expiry(self) -> float | None:
        """The earliest time a decision expires (for a harness that sleeps until then)."""
        while self._expiries and not self._valid(self._expiries[0]):
            heapq.heappop(self._expiries)
        return self._expiries[0][0] if self._expiries else None

    # ------------------------------------------------------------------ ordering (for backends)

    def order(self, session: str) -> tuple[int, float]:
        """Eviction rank of ``session``'s KV; smaller goes first.

        (0, 0.0): not paused, or paused with no score (plain LRU among these);
        (1, score): paused with a score; (2, score): pinned; (3, 0.0): resumed and waiting for
        admission after a scored or pinned decision.
        """
        p = self._paused.get(session)
        if p is None:
            r = self._ready.get(session)
            if r is not None and (r.decision.score is not None or r.decision.action is Action.PIN):
                return (3, 0.0)
            return (0, 0.0)
        d = p.decision
        if d.action is Action.PIN:
            return (2, d.score if d.score is not None else 0.0)
        if d.score is None:
            return (0, 0.0)
        return (1, d.score)

    @property
    def paused(self) -> Mapping[str, Paused]:
        return self._paused

    def tracked(self, session: str) -> Paused | None:
        """The record of ``session`` while backends track its KV: paused, or resumed and waiting
        for admission (``None`` otherwise)."""
        return self._paused.get(session) or self._ready.get(session)

    def __iter__(self) -> Iterator[Paused]:
        """Paused sessions, then resumed ones waiting for admission (whose KV backends still track)."""
        return iter([*self._paused.values(), *self._ready.values()])

    # ------------------------------------------------------------------ deciding

    def request(self, now: float, sessions: list[str]) -> SurvivalRequest:
        """The request a policy gets about ``sessions`` (paused) at ``now``."""
        bpt = self.backend.bytes_per_token
        infos = []
        for s in sessions:
            p = self._paused[s]
            fp = self.backend.footprint(p.handle)
            services = self._services.get(p.program, {p.session: p.service_s})
            infos.append(SessionInfo(
                session=p.session, program=p.program, turn=p.turn, context_tokens=p.context_tokens,
                kv_bytes=p.context_tokens * bpt, resident_tokens=fp.resident_tokens, host_tokens=fp.host_tokens,
                absent_tokens=max(0, p.context_tokens - fp.resident_tokens - fp.host_tokens), tool=p.gap.tool,
                expected_gap_s=p.gap.expected_s, waited_s=max(0.0, now - p.paused_at), paused_at=p.paused_at,
                arrival_s=p.arrival_s, service_s=p.service_s, program_service_s=sum(services.values()),
                critical_s=max(services.values(), default=0.0), queue_wait_s=p.queue_wait_s,
                relevance=p.relevance, side_effect=p.gap.side_effect,
                previous=p.decision if p.expires_at is not None else None))
        pool = self.backend.pool()
        system = SystemInfo(pool.pool_bytes, pool.pool_used, pool.host_bytes, pool.host_used, self._running[0],
                            self._running[1], len(self._paused),
                            sum(p.context_tokens for p in self._paused.values()) * bpt)
        return SurvivalRequest(float(now), tuple(infos), system, self.log.stats(i.tool for i in infos), self.cost)

    def _decide(self, now: float, sessions: list[str]) -> None:
        request = self.request(now, sessions)
        t0 = time.perf_counter()
        self.counters.policy_calls += 1
        try:
            answer = self.policy.decide(request)
            decisions = _validated(answer, sessions, self.policy.name)
        except AKVError as err:
            self.counters.policy_errors += 1
            self.counters.last_error = str(err)
            if self.strict:
                raise
            decisions = {s: KEEP for s in sessions}
        finally:
            self.counters.policy_seconds += time.perf_counter() - t0
        for s in sessions:
            self._apply(self._paused[s], decisions[s], now)

    def _apply(self, p: Paused, d: SurvivalDecision, now: float) -> None:
        p.decision = d
        p.expires_at = now + d.ttl_s if d.ttl_s is not None else None
        if p.expires_at is not None:
            heapq.heappush(self._expiries, (p.expires_at, next(self._seq), p.session))
        self.counters.actions[d.action.value] += 1
        self.backend.changed(p.session)
        if d.action is Action.SWAP:
            self.counters.swap_out_bytes += self.backend.swap_out(p.session, p.handle)
        elif d.action is Action.DISCARD:
            self.counters.discarded_tokens += self.backend.discard(p.session, p.handle)

    def close(self) -> None:
        self.policy.close()

    def check_integrity(self) -> None:
        """Assert the registry's invariants (raises AssertionError)."""
        for s, p in self._paused.items():
            assert p.session == s, f"paused entry {s!r} names {p.session!r}"
            assert p.context_tokens >= 0 and p.turn >= 0, f"{s!r} has negative counts"
            assert p.expires_at is None or p.decision.ttl_s is not None, f"{s!r} expires without a TTL"
            assert s in self._services.get(p.program, {}), f"{s!r} missing from program {p.program!r}"
            fp = self.backend.footprint(p.handle)
            assert fp.resident_tokens >= 0 and fp.host_tokens >= 0, f"{s!r} has a negative footprint"


def _validated(answer: Any, sessions: list[str], name: str) -> dict[str, SurvivalDecision]:
    if not isinstance(answer, Mapping):
        raise SurvivalError(f"survival policy {name!r} must answer a mapping of session id to decision, got "
                            f"{type(answer).__name__}", field="decisions", value=type(answer).__name__)
    missing = [s for s in sessions if s not in answer]
    if missing:
        raise SurvivalError(f"survival policy {name!r} gave no decision for session {missing[0]!r}",
                            field="decisions", value=missing[0])
    out = {}
    for s in sessions:
        d = answer[s]
        out[s] = d if isinstance(d, SurvivalDecision) else SurvivalDecision.from_wire(d, f"decisions[{s!r}]")
    return out
