"""The simulator's KV memory: a session-granular model of the radix tree's pool and host tier.

What it keeps of the tree (``engine.radix``, ``engine.survival.tree``):

- a session's context is a chain of *segments*, one per turn's prompt growth (the tree's nodes);
  eviction takes a session's deepest resident segment first (the tree evicts leaves first);
- each turn's generated tokens (all but the last) are an *orphan* unit: the next request resends
  the trace's text, so nobody reuses them; they rank lowest, like nodes off every paused path;
- victims go in the survival manager's order ``(rank, score, last access)`` -- the same
  :meth:`SurvivalManager.order` the tree backend uses -- to the host tier when it has room (its
  own victims go in the same order), else they are discarded;
- a turn's start swaps its host segments back in (room permitting; otherwise they are read from
  the host), recomputes its absent segments and stores as much of the recomputed and new tokens
  as fits, earliest first; a running session cannot be evicted.

What it simplifies: the shared system prompt is never evicted; an orphan does not hold back the
eviction of the segment it hangs from; segments are never split by drop-aware freeing (the
workloads have no drops). Victim lookup is a lazy heap (O(log n)), so thousands of sessions
simulate in seconds. The simulator's accuracy against the real engine is measured, not assumed
(docs/survival.md).
"""

from __future__ import annotations

import enum
import heapq
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.survival import Footprint, PoolState

if TYPE_CHECKING:
    from engine.survival import SurvivalManager


class Tier(enum.Enum):
    POOL = "pool"
    HOST = "host"
    ABSENT = "absent"


@dataclass(eq=False)
class Unit:
    """A run of tokens with one tier: a session's segment or an orphan."""

    uid: int
    session: str
    tokens: int
    tier: Tier
    last_access: float
    orphan: bool = False


@dataclass(eq=False)
class SimSession:
    sid: str
    segments: list[Unit] = field(default_factory=list)
    locked: bool = False
    last_access: float = 0.0
    version: int = 0

    def tail(self, tier: Tier) -> Unit | None:
        for u in reversed(self.segments):
            if u.tier is tier:
                return u
        return None

    def tokens(self, tier: Tier) -> int:
        return sum(u.tokens for u in self.segments if u.tier is tier)


@dataclass(frozen=True)
class Begin:
    """What starting a turn found: tokens recomputed, bytes swapped back in."""

    recompute_tokens: int
    swapped_in_bytes: int


class SimPool:
    """Pool + host model implementing :class:`engine.survival.MemoryBackend` (handles are session ids).

    Args:
        pool_bytes: pool budget; host_bytes: host budget (0: no host tier).
        bytes_per_token: KV bytes of one token.
    """

    def __init__(self, pool_bytes: int, host_bytes: int, bytes_per_token: int) -> None:
        self.pool_bytes = pool_bytes
        self.host_bytes = host_bytes
        self.bytes_per_token = bytes_per_token
        self.pool_used = 0
        self.host_used = 0
        self.swap_in_bytes = 0
        self.swap_out_bytes = 0
        self.evicted_tokens = 0
        self.manager: SurvivalManager | None = None
        self.sessions: dict[str, SimSession] = {}
        self.shared_tokens = 0
        self._uids = itertools.count()
        self._seq = itertools.count()
        self._heap: list[tuple[int, float, float, int, str, Unit | SimSession, int]] = []
        self._host_heap: list[tuple[int, float, float, int, str, Unit | SimSession, int]] = []

    # ------------------------------------------------------------------ MemoryBackend

    def attach(self, manager: SurvivalManager) -> None:
        self.manager = manager

    def changed(self, session: str) -> None:
        """The session's eviction rank may have changed: re-queue it."""
        s = self.sessions.get(session)
        if s is not None:
            self._requeue(s)

    def footprint(self, handle: str) -> Footprint:
        """Like the tree's: the shared system prompt counts as part of every session's path."""
        s = self.sessions.get(handle)
        if s is None:
            return Footprint(0, 0)
        return Footprint(self.shared_tokens + s.tokens(Tier.POOL), s.tokens(Tier.HOST))

    def swap_out(self, session: str, handle: str) -> int:
        s = self.sessions.get(handle)
        if s is None or s.locked:
            return 0
        moved = 0
        for u in reversed(s.segments):
            if u.tier is Tier.POOL:
                size = u.tokens * self.bytes_per_token
                if self.host_bytes < size or not self._make_host_room(size, exclude=s):
                    break
                self._move(u, Tier.HOST)
                moved += size
        self.swap_out_bytes += moved
        self._requeue(s)
        return moved

    def discard(self, session: str, handle: str) -> int:
        s = self.sessions.get(handle)
        if s is None or s.locked:
            return 0
        freed = 0
        for u in s.segments:
            if u.tier is not Tier.ABSENT:
                freed += u.tokens
                self._move(u, Tier.ABSENT)
        self._requeue(s)
        return freed

    def pool(self) -> PoolState:
        return PoolState(self.pool_bytes, self.pool_used, self.host_bytes, self.host_used)

    # ------------------------------------------------------------------ turns

    def share(self, tokens: int) -> int:
        """Store the shared system prompt once (never evicted); returns tokens computed now."""
        if self.shared_tokens or tokens <= 0:
            return 0
        if self.ensure_room(tokens * self.bytes_per_token):
            self.shared_tokens = tokens
            self.pool_used += tokens * self.bytes_per_token
        return tokens

    def begin(self, sid: str, new_tokens: int, now: float) -> Begin:
        """Start a turn of ``sid`` adding ``new_tokens``: swap in, recompute, store what fits."""
        s = self.sessions.setdefault(sid, SimSession(sid))
        s.locked = True
        s.last_access = now
        s.version += 1
        bpt = self.bytes_per_token
        swapped = 0
        for u in s.segments:
            if u.tier is Tier.HOST and self.ensure_room(u.tokens * bpt):
                self._move(u, Tier.POOL)
                swapped += u.tokens * bpt
        self.swap_in_bytes += swapped
        absent = [u for u in s.segments if u.tier is Tier.ABSENT]
        recompute = sum(u.tokens for u in absent)
        want = recompute + new_tokens
        if want:
            self.ensure_room(want * bpt)
        room = max(0, (self.pool_bytes - self.pool_used) // bpt)
        for u in absent:
            if room <= 0:
                break
            if u.tokens > room:  # store the first ``room`` tokens of this segment, as the tree would
                rest = Unit(next(self._uids), sid, u.tokens - room, Tier.ABSENT, now)
                u.tokens = room
                s.segments.insert(s.segments.index(u) + 1, rest)
            self._move(u, Tier.POOL)
            room -= u.tokens
        if new_tokens:
            stored = min(new_tokens, room)
            if stored:
                s.segments.append(Unit(next(self._uids), sid, stored, Tier.ABSENT, now))
                self._move(s.segments[-1], Tier.POOL)
            if new_tokens > stored:
                s.segments.append(Unit(next(self._uids), sid, new_tokens - stored, Tier.ABSENT, now))
        for u in s.segments:
            u.last_access = now
        return Begin(recompute, swapped)

    def finish(self, sid: str, orphan_tokens: int, now: float) -> None:
        """End a turn: store its generated tokens as an orphan (when they fit), then unlock."""
        s = self.sessions[sid]
        if orphan_tokens > 0 and self.ensure_room(orphan_tokens * self.bytes_per_token):
            u = Unit(next(self._uids), sid, orphan_tokens, Tier.ABSENT, s.last_access, orphan=True)
            self._move(u, Tier.POOL)
            self._push(self._heap, (0, 0.0, u.last_access), u, 0)
        s.locked = False
        self._requeue(s)

    # ------------------------------------------------------------------ eviction

    def ensure_room(self, nbytes: int) -> bool:
        """Evict (to host, else discard) until ``nbytes`` more fit in the pool."""
        while self.pool_used + nbytes > self.pool_bytes:
            victim = self._pop(self._heap, Tier.POOL)
            if victim is None:
                return False
            size = victim.tokens * self.bytes_per_token
            owner = self.sessions.get(victim.session)
            if self.host_bytes >= size and self._make_host_room(size, exclude=None):
                self._move(victim, Tier.HOST)
                self.swap_out_bytes += size
            else:
                self._move(victim, Tier.ABSENT)
                self.evicted_tokens += victim.tokens
            if owner is not None and not victim.orphan:
                self._requeue(owner)
            elif victim.tier is Tier.HOST:
                self._push(self._host_heap, (0, 0.0, victim.last_access), victim, 0)
        return True

    def _make_host_room(self, nbytes: int, exclude: SimSession | None) -> bool:
        while self.host_used + nbytes > self.host_bytes:
            victim = self._pop(self._host_heap, Tier.HOST, exclude)
            if victim is None:
                return False
            self._move(victim, Tier.ABSENT)
            owner = self.sessions.get(victim.session)
            if owner is not None and not victim.orphan:
                self._requeue(owner)
        return True

    def _key(self, s: SimSession) -> tuple[int, float, float]:
        rank, score = self.manager.order(s.sid) if self.manager is not None else (0, 0.0)
        return (rank, score, s.last_access)

    def _push(self, heap: list, key: tuple[int, float, float], obj: Unit | SimSession, version: int) -> None:
        heapq.heappush(heap, (*key, next(self._seq), "u" if isinstance(obj, Unit) else "s", obj, version))

    def _requeue(self, s: SimSession) -> None:
        s.version += 1
        if s.locked:
            return
        key = self._key(s)
        if s.tail(Tier.POOL) is not None:
            self._push(self._heap, key, s, s.version)
        if s.tail(Tier.HOST) is not None:
            self._push(self._host_heap, key, s, s.version)

    def _pop(self, heap: list, tier: Tier, exclude: SimSession | None = None) -> Unit | None:
        skipped = []
        found: Unit | None = None
        while heap:
            entry = heapq.heappop(heap)
            obj, version = entry[5], entry[6]
            if isinstance(obj, SimSession):
                if obj.version != version or obj.locked:
                    continue
                if obj is exclude:
                    skipped.append(entry)
                    continue
                unit = obj.tail(tier)
                if unit is None:
                    continue
                heapq.heappush(heap, entry)  # the session may have more units of this tier
                found = unit
            elif obj.tier is tier:
                found = obj
            if found is not None:
                break
        for entry in skipped:
            heapq.heappush(heap, entry)
        return found

    def _move(self, u: Unit, to: Tier) -> None:
        size = u.tokens * self.bytes_per_token
        if u.tier is Tier.POOL:
            self.pool_used -= size
        elif u.tier is Tier.HOST:
            self.host_used -= size
        if to is Tier.POOL:
            self.pool_used += size
        elif to is Tier.HOST:
            self.host_used += size
        u.tier = to

    def check_integrity(self) -> None:
        """Assert the accounting (raises AssertionError)."""
        pool = self.shared_tokens * self.bytes_per_token
        host = 0
        units = [u for s in self.sessions.values() for u in s.segments]
        for entry in self._heap + self._host_heap:
            if isinstance(entry[5], Unit) and entry[5].orphan:
                units.append(entry[5])
        seen = set()
        for u in units:
            if u.uid in seen:
                continue
            seen.add(u.uid)
            assert u.tokens > 0, f"unit {u.uid} has no tokens"
            if u.tier is Tier.POOL:
                pool += u.tokens * self.bytes_per_token
            elif u.tier is Tier.HOST:
                host += u.tokens * self.bytes_per_token
        assert pool == self.pool_used, f"pool accounting {self.pool_used} != {pool}"
        assert host == self.host_used, f"host accounting {self.host_used} != {host}"
        assert self.host_used <= self.host_bytes, "host over budget"
        assert self.pool_used <= self.pool_bytes, "pool over budget"
