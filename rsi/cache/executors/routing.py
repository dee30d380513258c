"""Task-affine routing: consistent hashing of task ids onto replicas, with work stealing.

Evaluations of one task go to the same replica, so every policy evaluated on that task reuses the
task's KV in that replica's radix tree. A replica whose own queue is empty steals from the
longest other queue (whole tasks first, so affinity survives the steal where it can).
"""

from __future__ import annotations

import bisect
import hashlib
from collections import deque
from collections.abc import Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


def _h(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:16], 16)


class HashRing:
    """Consistent hashing with virtual nodes: adding or removing a replica moves few tasks."""

    def __init__(self, replicas: Sequence[str], vnodes: int = 64):
        self.points = sorted((_h(f"{r}#{v}"), r) for r in replicas for v in range(vnodes))
        self.keys = [p for p, _ in self.points]

    def owner(self, key: str) -> str:
        i = bisect.bisect(self.keys, _h(key)) % len(self.points)
        return self.points[i][1]


class Router(Generic[T]):
    """Per-replica queues filled by affinity (or round robin), drained with stealing.

    Args:
        replicas: replica names.
        affinity: route by task (True) or round robin (False, the baseline for comparison).
    """

    def __init__(self, replicas: Sequence[str], affinity: bool = True):
        self.replicas = list(replicas)
        self.ring = HashRing(self.replicas)
        self.affinity = affinity
        self.queues: dict[str, deque[tuple[str, T]]] = {r: deque() for r in self.replicas}
        self._rr = 0
        self.stolen = 0

    def add(self, task_id: str, item: T) -> str:
        if self.affinity:
            target = self.ring.owner(task_id)
        else:
            target = self.replicas[self._rr % len(self.replicas)]
            self._rr += 1
        self.queues[target].append((task_id, item))
        return target

    def next_for(self, replica: str, busy: dict[str, str] | None = None) -> T | None:
        """The next item for ``replica``: its own queue first, else stolen from the longest queue.

        ``busy`` maps replicas to the task they are evaluating now: a thief takes a whole task the
        victim has not started (from the back of its queue), and splits the victim's current
        task only when nothing else is left.
        """
        own = self.queues[replica]
        if own:
            return own.popleft()[1]
        victim = max(self.replicas, key=lambda r: len(self.queues[r]))
        q = self.queues[victim]
        if not q:
            return None
        current = (busy or {}).get(victim)
        untouched = [x[0] for x in q if x[0] != current]
        task_id = untouched[-1] if untouched else q[-1][0]
        stolen = [x for x in q if x[0] == task_id]
        for x in stolen[1:]:
            q.remove(x)
            own.append(x)
        q.remove(stolen[0])
        self.stolen += 1
        return stolen[0][1]

    def pending(self) -> int:
        return sum(len(q) for q in self.queues.values())
