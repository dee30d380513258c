"""The history-aware radix tree: a prefix cache keyed by event histories, not by tokens alone.

Edges are lists of items (token ids and Drop/Reposition events), so two requests with the same
text but different drop histories share a node only up to their first differing event. A history
led by a :class:`engine.history.Salt` (a server tenant's namespace) hangs below its own child of
the root, so histories with different salts share no node at all; unsalted histories are
unaffected. Each node holds the KV of its token items as one payload, in one of three states:

    RESIDENT  in the pool (counts against ``pool_bytes``)
    HOST      swapped out to the host tier (counts against ``host_bytes``)
    ABSENT    no KV: evicted, freed because every continuation dropped it, or never computed
              because it was dropped before anything attended to it

A node that is ABSENT stays in the tree while it has descendants: they remain usable, because a
token's KV never needs its predecessors' KV to be *read*, only to be *computed*.

Eviction (:meth:`RadixTree.ensure_room`), in order:
1. drop-aware: free the KV of every unlocked span that all paths below it have dropped;
2. LRU over unlocked resident nodes with no resident child: swap to the host tier when it has
   room (making room there by discarding its own LRU nodes), otherwise discard; ABSENT leaves
   are removed from the tree.

The order of step 2 (and of host-tier victims) is LRU unless an :class:`EvictionOrder` is set on
``tree.eviction_order`` (the survival layer, ``engine.survival``, sets one); with none set nothing
changes. :meth:`RadixTree.swap_out` and :meth:`RadixTree.discard` let that layer move one node.

Victims come from two persistent priority queues (pool and host) of ``(key, uid, node)`` entries
that every event changing a node's key or state re-queues (touch, unlock, a tier move, a child
leaving the pool, :meth:`RadixTree.requeue` from the eviction order); a popped entry whose node
is no longer a candidate or whose key has changed since is stale and skipped. The victim is
therefore always the candidate with the smallest current ``(key, uid)`` -- what a full scan of
the tree would pick (``tests/engine/test_radix.py`` checks this against one) -- at a cost of
``O(log n)`` per event, so a simulator can drive thousands of sessions through the same tree.

The tree is payload-agnostic (``engine.cache.kvstore``): the dry run uses sizes only and makes exactly
the same decisions. Mutations happen only through its methods; ``check_integrity`` verifies
every structural and accounting invariant.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.cache.kvstore import Payload
from engine.errors import AKVError
from engine.history import Drop, Item, count_drops, count_tokens, intersect_ranges, merge_ranges


class KVState(enum.Enum):
    RESIDENT = "resident"
    HOST = "host"
    ABSENT = "absent"


_uids = itertools.count()


@dataclass(eq=False)
class Node:
    """One edge of the tree and the KV of its token items.

    Attributes:
        items: the edge's items (non-empty except at the root).
        token_start: absolute index of the edge's first token in every history through it.
        n_tokens: number of token items in ``items``.
        payload: the KV of those tokens, or ``None`` (ABSENT, or no tokens).
        lock: how many in-flight requests hold this node or a descendant.
    """

    items: list[Item]
    parent: Node | None
    token_start: int
    n_tokens: int
    payload: Payload | None = None
    state: KVState = KVState.ABSENT
    children: dict[Item, Node] = field(default_factory=dict)
    lock: int = 0
    last_access: int = 0
    end_hidden: Any = None  # hidden state after the edge's last item, when that item is a token
    uid: int = field(default_factory=lambda: next(_uids))

    @property
    def token_end(self) -> int:
        return self.token_start + self.n_tokens

    @property
    def has_kv(self) -> bool:
        """Whether every token of the edge has KV somewhere (pool or host)."""
        return self.n_tokens == 0 or self.state is not KVState.ABSENT

    def __repr__(self) -> str:
        return f"Node#{self.uid}(tokens [{self.token_start}, {self.token_end}), {self.state.name}, lock={self.lock})"


@dataclass(frozen=True)
class MatchResult:
    """The longest stored prefix of a history.

    Attributes:
        path: matched nodes from the root's child down (ends on a node boundary).
        n_items: number of leading items matched.
    """

    path: tuple[Node, ...]
    n_items: int

    @property
    def last(self) -> Node | None:
        return self.path[-1] if self.path else None


@dataclass
class TreeStats:
    """Counters since the tree was made (tokens and bytes)."""

    evicted_tokens: int = 0
    freed_dropped_tokens: int = 0
    swap_outs: int = 0
    swap_ins: int = 0
    swap_out_bytes: int = 0
    swap_in_bytes: int = 0
    host_discarded_tokens: int = 0


class EvictionOrder(Protocol):
    """Orders eviction victims: the node with the smallest ``key`` goes first (ties: older node).

    ``key`` must not mutate the tree, keys must be mutually comparable, and a node's key may
    depend only on the node's own fields and on state the order owns: when that state changes a
    node's key, the order calls ``tree.requeue(node)`` (the tree requeues on its own changes,
    such as ``last_access``). ``split(head, tail)`` is called when the tree splits ``tail``'s edge
    and inserts ``head`` above it: whatever the order knew of the node now holds for both.
    """

    def key(self, node: Node) -> Any: ...

    def split(self, head: Node, tail: Node) -> None: ...


class RadixTree:
    """History-aware radix tree with a pool budget and an optional host tier.

    Args:
        pool_bytes: budget of RESIDENT payloads.
        host_bytes: budget of HOST payloads (0 disables swapping).
    """

    def __init__(self, pool_bytes: int, host_bytes: int = 0):
        if pool_bytes < 0 or host_bytes < 0:
            raise AKVError(f"budgets must be >= 0, got pool_bytes={pool_bytes}, host_bytes={host_bytes}",
                           field="pool_bytes" if pool_bytes < 0 else "host_bytes", value=min(pool_bytes, host_bytes))
        self.pool_bytes = pool_bytes
        self.host_bytes = host_bytes
        self.root = Node(items=[], parent=None, token_start=0, n_tokens=0, state=KVState.RESIDENT)
        self.pool_used = 0
        self.host_used = 0
        self.clock = 0
        self.stats = TreeStats()
        self._order: EvictionOrder | None = None  # None: LRU (see the module docstring)
        self._drops = 0  # Drop items on the tree's edges (none: nothing for drop-aware freeing to find)
        self._pool_queue: list[tuple[Any, int, Node]] = []  # eviction candidates (and stale entries)
        self._host_queue: list[tuple[Any, int, Node]] = []  # host-tier victims (and stale entries)
        self._compact_at = 4096

    @property
    def eviction_order(self) -> EvictionOrder | None:
        """The order of eviction victims (``None``: LRU); setting it re-queues every node."""
        return self._order

    @eviction_order.setter
    def eviction_order(self, order: EvictionOrder | None) -> None:
        self._order = order
        self.rebuild_queues()

    # ------------------------------------------------------------------ lookup and insertion

    def match(self, items: Sequence[Item]) -> MatchResult:
        """Find the longest stored prefix of ``items``, splitting a node where the match ends inside it."""
        node, i, path = self.root, 0, []
        while i < len(items):
            child = node.children.get(items[i])
            if child is None:
                break
            k = common_prefix(child.items, items, i)
            if k < len(child.items):
                child = self._split(child, k)
            path.append(child)
            i += k
            node = child
            if k < len(child.items):
                break
        return MatchResult(tuple(path), i)

    def extend(self, parent: Node, items: Sequence[Item], payload: Payload | None) -> Node:
        """Add a child of ``parent`` holding ``items``; ``payload`` (or ``None`` = ABSENT) is its KV.

        The caller must have matched maximally, so no child of ``parent`` starts with ``items[0]``.
        The payload is charged to the pool as is: call :meth:`ensure_room` first.
        """
        assert items, "cannot insert an empty edge"
        assert items[0] not in parent.children, "extend() after a maximal match only"
        n = count_tokens(items)
        node = Node(list(items), parent, parent.token_end, n, last_access=self.clock)
        if n == 0:
            node.state = KVState.RESIDENT
        elif payload is not None:
            assert payload.n_tokens == n, f"payload holds {payload.n_tokens} tokens, edge has {n}"
            node.payload, node.state = payload, KVState.RESIDENT
            self.pool_used += payload.nbytes
        if n != len(items):
            self._drops += count_drops(items)
        parent.children[items[0]] = node
        self.requeue(node)
        return node

    def fill(self, node: Node, payload: Payload) -> None:
        """Give an ABSENT node its recomputed KV (charged to the pool)."""
        assert node.state is KVState.ABSENT and node.n_tokens == payload.n_tokens > 0
        node.payload, node.state = payload, KVState.RESIDENT
        self.pool_used += payload.nbytes
        self.requeue(node)

    def unfill(self, node: Node) -> None:
        """Undo :meth:`fill` or a payload given to :meth:`extend`, locked or not: the node becomes
        ABSENT (when the work that was to produce its KV failed). An unlocked leaf is removed."""
        assert node.n_tokens > 0
        self._discard_kv_only(node)

    def split_at_token(self, node: Node, offset: int) -> Node:
        """Split ``node`` before its ``offset``-th token (0 < offset < n_tokens); returns the prefix node."""
        assert 0 < offset < node.n_tokens
        seen = 0
        for k, it in enumerate(node.items):
            if isinstance(it, int):
                if seen == offset:
                    return self._split(node, k)
                seen += 1
        raise AssertionError("unreachable")

    def _split(self, node: Node, k: int) -> Node:
        """Split ``node``'s edge after ``k`` items; the new prefix node takes its place."""
        assert 0 < k < len(node.items)
        parent = node.parent
        assert parent is not None
        head_items, tail_items = node.items[:k], node.items[k:]
        head_n = count_tokens(head_items)
        head = Node(head_items, parent, node.token_start, head_n, lock=node.lock, last_access=node.last_access)
        tail_n = node.n_tokens - head_n
        head_payload: Payload | None = None
        tail_payload: Payload | None = None
        if node.payload is not None:
            if head_n == 0:
                tail_payload = node.payload
            elif tail_n == 0:
                head_payload = node.payload
            else:
                head_payload, tail_payload = node.payload.split(head_n)
        # A side without tokens holds no payload and counts as complete; sizes are conserved.
        head.payload, head.state = head_payload, (node.state if head_n else KVState.RESIDENT)
        node.payload, node.state = tail_payload, (node.state if tail_n else KVState.RESIDENT)
        node.items, node.token_start, node.n_tokens = tail_items, node.token_start + head_n, tail_n
        parent.children[head_items[0]] = head
        head.children[tail_items[0]] = node
        node.parent = head
        if self._order is not None:
            self._order.split(head, node)
        self.requeue(head)
        self.requeue(node)
        return head

    # ------------------------------------------------------------------ locks and recency

    def lock(self, node: Node) -> None:
        """Pin ``node`` and its ancestors against eviction."""
        n: Node | None = node
        while n is not None and n is not self.root:
            n.lock += 1
            n = n.parent

    def unlock(self, node: Node) -> None:
        n: Node | None = node
        while n is not None and n is not self.root:
            assert n.lock > 0, f"unlock of unlocked {n}"
            n.lock -= 1
            if n.lock == 0:
                self.requeue(n)
            n = n.parent

    def touch(self, node: Node) -> None:
        """Mark ``node`` and its ancestors as used now (LRU)."""
        self.clock += 1
        n: Node | None = node
        while n is not None and n is not self.root:
            n.last_access = self.clock
            if n.lock == 0:  # a locked node is re-queued when it is unlocked
                self.requeue(n)
            n = n.parent

    # ------------------------------------------------------------------ tiers

    def swap_in(self, node: Node) -> bool:
        """Bring a HOST node back into the pool if there is room; returns whether it moved."""
        assert node.state is KVState.HOST and node.payload is not None
        size = node.payload.nbytes
        if not self.ensure_room(size):
            return False
        self.host_used -= size
        node.payload = node.payload.to_device()
        node.state = KVState.RESIDENT
        self.pool_used += size
        self.stats.swap_ins += 1
        self.stats.swap_in_bytes += size
        self.requeue(node)
        return True

    def _swap_out(self, node: Node) -> None:
        assert node.payload is not None
        size = node.payload.nbytes
        self.pool_used -= size
        node.payload = node.payload.to_host()
        node.state = KVState.HOST
        self.host_used += size
        self.stats.swap_outs += 1
        self.stats.swap_out_bytes += size
        self.requeue(node)
        if node.parent is not None:
            self.requeue(node.parent)  # it may have no resident child left

    def _discard(self, node: Node) -> None:
        """Forget a node's KV; remove the node (and newly childless ABSENT ancestors) when it is a leaf."""
        if node.payload is not None:
            size = node.payload.nbytes
            if node.state is KVState.RESIDENT:
                self.pool_used -= size
                self.stats.evicted_tokens += node.n_tokens
            else:
                self.host_used -= size
                self.stats.host_discarded_tokens += node.n_tokens
        node.payload = None
        if node.n_tokens:
            node.state = KVState.ABSENT
        if node.parent is not None:
            self.requeue(node.parent)  # it may have no resident child left
        self._prune(node)

    def _prune(self, node: Node) -> None:
        n: Node | None = node
        while (n is not None and n is not self.root and not n.children and n.lock == 0
               and (n.state is KVState.ABSENT or n.n_tokens == 0)):
            parent = n.parent
            assert parent is not None
            del parent.children[n.items[0]]
            n.parent = None
            if n.n_tokens != len(n.items):
                self._drops -= count_drops(n.items)
            n = parent

    # ------------------------------------------------------------------ eviction

    def ensure_room(self, nbytes: int) -> bool:
        """Evict until ``nbytes`` more fit in the pool; returns False if locked KV makes that impossible."""
        if self.pool_used + nbytes <= self.pool_bytes:
            return True
        self.free_dropped()
        while self.pool_used + nbytes > self.pool_bytes:
            node = self._pop(self._pool_queue, self._evictable)
            if node is None:
                break
            size = node.payload.nbytes if node.payload is not None else 0
            if self.host_bytes >= size and self._make_host_room(size):
                self._swap_out(node)
            else:
                self._discard(node)
        return self.pool_used + nbytes <= self.pool_bytes

    # ------------------------------------------------------------------ victim queues

    def _key(self, node: Node) -> Any:
        return node.last_access if self._order is None else self._order.key(node)

    def requeue(self, node: Node) -> None:
        """Queue ``node`` under its current eviction key (call when its key may have changed)."""
        if node.parent is None or node.n_tokens == 0 or node.state is KVState.ABSENT:
            return
        queue = self._pool_queue if node.state is KVState.RESIDENT else self._host_queue
        heapq.heappush(queue, (self._key(node), node.uid, node))
        if len(queue) > self._compact_at:
            self.rebuild_queues()

    def rebuild_queues(self) -> None:
        """Drop every stale entry: re-queue the tree's nodes from scratch."""
        self._pool_queue, self._host_queue = [], []
        for n in self.nodes():
            if n.n_tokens and n.state is not KVState.ABSENT:
                queue = self._pool_queue if n.state is KVState.RESIDENT else self._host_queue
                queue.append((self._key(n), n.uid, n))
        heapq.heapify(self._pool_queue)
        heapq.heapify(self._host_queue)
        self._compact_at = max(4096, 4 * (len(self._pool_queue) + len(self._host_queue)))

    def _pop(self, queue: list[tuple[Any, int, Node]], candidate: Any) -> Node | None:
        """Pop the candidate with the smallest current (key, uid), skipping stale entries."""
        while queue:
            key, _, node = heapq.heappop(queue)
            if candidate(node) and key == self._key(node):
                return node
        return None

    def _host_victim(self, node: Node) -> bool:
        return node.parent is not None and node.lock == 0 and node.state is KVState.HOST

    def _evictable(self, node: Node) -> bool:
        return (node is not self.root and node.parent is not None and node.lock == 0
                and node.state is KVState.RESIDENT and node.n_tokens > 0
                and not any(c.state is KVState.RESIDENT and c.n_tokens > 0 for c in node.children.values()))

    def swap_out(self, node: Node) -> bool:
        """Move an unlocked RESIDENT node to the host tier now, making room there by discarding
        host nodes in eviction order; returns whether it moved (False: locked, not resident, or no
        host room)."""
        if node.lock or node.state is not KVState.RESIDENT or node.payload is None or node.parent is None:
            return False
        size = node.payload.nbytes
        if self.host_bytes < size:
            return False
        if not self._make_host_room(size):
            return False
        self._swap_out(node)
        return True

    def discard(self, node: Node) -> int:
        """Forget an unlocked node's KV now (pool or host); returns the tokens freed (0 if locked
        or already ABSENT). A leaf is removed from the tree, as in eviction."""
        if node.lock or node.payload is None or node.parent is None:
            return 0
        n = node.n_tokens
        self._discard(node)
        return n

    def _make_host_room(self, nbytes: int) -> bool:
        while self.host_used + nbytes > self.host_bytes:
            victim = self._pop(self._host_queue, self._host_victim)
            if victim is None:
                return False
            self._discard(victim)
        return True

    def dead_ranges(self) -> dict[int, tuple[tuple[int, int], ...]]:
        """Per node uid, the token ranges of its edge that every path below it drops."""
        out: dict[int, tuple[tuple[int, int], ...]] = {}

        def visit(node: Node) -> tuple[tuple[int, int], ...]:
            own = merge_ranges([r for it in node.items if isinstance(it, Drop) for r in it.ranges])
            below: tuple[tuple[int, int], ...] | None = None
            for child in node.children.values():
                sub = visit(child)
                below = sub if below is None else intersect_ranges(below, sub)
            total = merge_ranges(list(own) + list(below or ()))
            if node.n_tokens:
                dead = intersect_ranges(total, [(node.token_start, node.token_end)])
                if dead:
                    out[node.uid] = dead
            return total

        visit(self.root)
        return out

    def free_dropped(self) -> int:
        """Drop-aware eviction: free KV that every continuation has dropped; returns tokens freed."""
        if not self._drops:
            return 0
        dead = self.dead_ranges()
        targets = [n for n in self.nodes() if n.uid in dead and n.lock == 0
                   and n.state is not KVState.ABSENT]
        freed = 0
        for node in targets:
            # Left to right: isolating [s, e) leaves ``node`` holding the tokens after e.
            for s, e in dead[node.uid]:
                piece = self.isolate(node, s, e)
                freed += piece.n_tokens
                self._discard_kv_only(piece)
        self.stats.freed_dropped_tokens += freed
        return freed

    def isolate(self, node: Node, s: int, e: int) -> Node:
        """Split ``node`` so that tokens [s, e) form one node, and return that node."""
        if e < node.token_end:
            node = self.split_at_token(node, e - node.token_start)
        if s > node.token_start:
            self.split_at_token(node, s - node.token_start)
        return node

    def _discard_kv_only(self, node: Node) -> None:
        if node.payload is None:
            return
        size = node.payload.nbytes
        if node.state is KVState.RESIDENT:
            self.pool_used -= size
        else:
            self.host_used -= size
        node.payload = None
        node.state = KVState.ABSENT
        if node.parent is not None:
            self.requeue(node.parent)
        self._prune(node)

    # ------------------------------------------------------------------ inspection

    def nodes(self) -> Iterator[Node]:
        stack = list(self.root.children.values())
        while stack:
            n = stack.pop()
            yield n
            stack.extend(n.children.values())

    def resident_tokens(self) -> int:
        return sum(n.n_tokens for n in self.nodes() if n.state is KVState.RESIDENT)

    def check_integrity(self) -> None:
        """Assert every structural and accounting invariant (raises AssertionError)."""
        pool = host = 0
        stack = [self.root]
        while stack:
            n = stack.pop()
            if n is not self.root:
                assert n.items, f"{n} has an empty edge"
                assert n.parent is not None and n.parent.children.get(n.items[0]) is n, f"{n} not linked"
                assert n.token_start == n.parent.token_end, f"{n} starts at the wrong token"
                assert n.n_tokens == count_tokens(n.items), f"{n} miscounts its tokens"
                assert (n.lock >= 0 and n.parent is self.root) or n.parent.lock >= n.lock, f"{n} lock > parent's"
            if n.n_tokens == 0:
                assert n.payload is None and n.state is KVState.RESIDENT, f"{n} has no tokens but a payload"
            elif n.state is KVState.ABSENT:
                assert n.payload is None, f"{n} is ABSENT with a payload"
            else:
                assert n.payload is not None and n.payload.n_tokens == n.n_tokens, f"{n} payload mismatch"
                if n.state is KVState.RESIDENT:
                    pool += n.payload.nbytes
                else:
                    host += n.payload.nbytes
            for key, c in n.children.items():
                assert c.items and c.items[0] == key, f"child key {key!r} does not start {c}"
                stack.append(c)
        drops = sum(count_drops(n.items) for n in self.nodes())
        assert drops == self._drops, f"drop count {self._drops} != {drops}"
        pool_q = {uid for key, uid, n in self._pool_queue if n.parent is not None and key == self._key(n)}
        host_q = {uid for key, uid, n in self._host_queue if n.parent is not None and key == self._key(n)}
        for n in self.nodes():  # every candidate is queued under its current key
            assert not self._evictable(n) or n.uid in pool_q, f"{n} is not queued for eviction"
            assert not self._host_victim(n) or n.uid in host_q, f"{n} is not queued as a host victim"
        assert pool == self.pool_used, f"pool accounting {self.pool_used} != {pool}"
        assert host == self.host_used, f"host accounting {self.host_used} != {host}"
        assert self.pool_used <= self.pool_bytes, f"pool over budget: {self.pool_used} > {self.pool_bytes}"
        assert self.host_used <= self.host_bytes, f"host over budget: {self.host_used} > {self.host_bytes}"


def common_prefix(edge: Sequence[Item], items: Sequence[Item], start: int = 0) -> int:
    """Length of the common prefix of ``edge`` and ``items[start:]``."""
    n = min(len(edge), len(items) - start)
    if list(edge[:n]) == list(items[start:start + n]):
        return n
    lo, hi = 0, n  # invariant: edge[:lo] matches, edge[:hi+1] does not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if list(edge[:mid]) == list(items[start:start + mid]):
            lo = mid
        else:
            hi = mid - 1
    return lo
