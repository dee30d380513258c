"""The radix tree as a survival backend: paused sessions are end-nodes of their history's path.

A session's KV is the path from the root to its end node; a handle (:class:`TreeHandle`) keeps the
history's items too, so that when eviction prunes the end node from the tree the handle finds
the deepest node still stored for it. Nodes on several paused sessions'
paths (a shared system prompt, a forked prefix) take the highest rank among those sessions, so
shared KV is evicted last (KVFlow's rule: a shared prefix node takes the best of its users).
Ranks are kept per node and updated when the manager reports a change, so eviction costs
``O(log n)`` per victim whatever the number of paused sessions.
Explicit SWAP / DISCARD act bottom-up on the session's *exclusive* nodes: those on no other
paused session's path and not locked by a running request. Nodes off every paused path (ended
sessions, generated branches nobody resent) rank lowest and go first, by LRU.

Installing it sets ``tree.eviction_order``; :meth:`TreeBackend.detach` restores LRU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.cache.radix import KVState, Node, RadixTree
from engine.history import Item
from engine.survival.backend import Footprint, PoolState

if TYPE_CHECKING:
    from engine.survival.manager import SurvivalManager


def path_of(node: Node) -> list[Node]:
    """Nodes from ``node`` up to (not including) the root, bottom first; a node that was pruned
    from the tree (its parent is ``None``) ends the walk, since it holds nothing."""
    out: list[Node] = []
    n: Node | None = node
    while n is not None and n.parent is not None:
        out.append(n)
        n = n.parent
    return out


@dataclass(eq=False)
class TreeHandle:
    """Where a paused session's history ends in the tree: its end node and its items."""

    node: Node
    items: tuple[Item, ...]


class TreeBackend:
    """Survival backend over an engine's (or a dry-run accountant's) radix tree.

    It keeps, for every node on a tracked session's path (paused, or resumed and waiting for
    admission), the sessions using it and the best of their eviction ranks; the manager's
    :meth:`changed` calls update them and re-queue the nodes whose key changed, so the tree never
    rescans. A session's path is taken when it changes (a pause, a decision, a resume); nodes the
    tree splits off it later stay on it.

    Args:
        tree: the radix tree.
        bytes_per_token: KV bytes of one token.
    """

    def __init__(self, tree: RadixTree, bytes_per_token: int) -> None:
        self.tree = tree
        self.bytes_per_token = bytes_per_token
        self.manager: SurvivalManager | None = None
        self._paths: dict[str, list[Node]] = {}  # tracked session -> its nodes (bottom first, then split heads)
        self._users: dict[Node, dict[str, tuple[int, float]]] = {}  # node -> {session: its rank}
        self._best: dict[Node, tuple[int, float]] = {}  # node -> the highest rank of its users

    def attach(self, manager: SurvivalManager) -> None:
        self.manager = manager
        self.tree.eviction_order = self
        for p in manager:
            self.changed(p.session)

    def changed(self, session: str) -> None:
        """``session``'s rank or state may have changed: re-register its path with its rank now."""
        for node in self._paths.pop(session, ()):
            users = self._users.get(node)
            if users is None or session not in users:
                continue
            rank = users.pop(session)
            if not users:
                del self._users[node]
            if rank == self._best.get(node):
                self._set_best(node, max(users.values()) if users else None)
        p = self.manager.tracked(session) if self.manager is not None else None
        if p is None:
            return
        assert self.manager is not None
        rank = self.manager.order(session)
        path = path_of(self.node(p.handle))
        self._paths[session] = path
        for node in path:
            self._users.setdefault(node, {})[session] = rank
            best = self._best.get(node)
            if best is None or rank > best:
                self._set_best(node, rank)

    def _set_best(self, node: Node, rank: tuple[int, float] | None) -> None:
        if self._best.get(node) == rank:
            return
        if rank is None:
            self._best.pop(node, None)
        else:
            self._best[node] = rank
        self.tree.requeue(node)

    def detach(self) -> None:
        if self.tree.eviction_order is self:
            self.tree.eviction_order = None
        self.manager = None
        self._paths, self._users, self._best = {}, {}, {}

    def handle_for(self, items: Sequence[Item]) -> TreeHandle:
        """A handle on ``items`` as stored (the deepest node of their longest stored prefix)."""
        return TreeHandle(self.tree.match(items).last or self.tree.root, tuple(items))

    def node(self, handle: TreeHandle) -> Node:
        """The handle's end node, found again when eviction pruned it from the tree."""
        n: Node | None = handle.node
        while n is not None and n is not self.tree.root:
            n = n.parent
        if n is None:
            handle.node = self.tree.match(handle.items).last or self.tree.root
        return handle.node

    # ------------------------------------------------------------------ EvictionOrder

    def key(self, node: Node) -> tuple[int, float, int]:
        rank, score = self._best.get(node, (0, 0.0))
        return (rank, score, node.last_access)

    def split(self, head: Node, tail: Node) -> None:
        users = self._users.get(tail)
        if users:
            self._users[head] = dict(users)
            self._best[head] = self._best[tail]
            for s in users:
                self._paths[s].append(head)

    # ------------------------------------------------------------------ session operations

    def footprint(self, handle: TreeHandle) -> Footprint:
        resident = host = 0
        for node in path_of(self.node(handle)):
            if node.state is KVState.RESIDENT:
                resident += node.n_tokens
            elif node.state is KVState.HOST:
                host += node.n_tokens
        return Footprint(resident, host)

    def _exclusive(self, session: str, handle: TreeHandle) -> list[Node]:
        """The session's nodes, bottom up, until one another tracked session uses or a request holds."""
        out = []
        for node in path_of(self.node(handle)):
            users = self._users.get(node, {})
            if node.lock or len(users) > (session in users):
                break
            out.append(node)
        return out

    def swap_out(self, session: str, handle: TreeHandle) -> int:
        moved = 0
        for node in self._exclusive(session, handle):
            if node.state is KVState.RESIDENT and node.n_tokens and node.payload is not None:
                size = node.payload.nbytes
                if not self.tree.swap_out(node):
                    break
                moved += size
        return moved

    def discard(self, session: str, handle: TreeHandle) -> int:
        freed = 0
        for node in self._exclusive(session, handle):
            if node.n_tokens and node.state is not KVState.ABSENT:
                freed += self.tree.discard(node)
        return freed

    def pool(self) -> PoolState:
        t = self.tree
        return PoolState(t.pool_bytes, t.pool_used, t.host_bytes, t.host_used)

    def check_integrity(self) -> None:
        """The tree's invariants, the manager's, and the ranks against a recount from scratch."""
        self.tree.check_integrity()
        if self.manager is None:
            return
        assert self.tree.eviction_order is self, "the tree's eviction order is not this backend"
        self.manager.check_integrity()
        tracked = {p.session for p in self.manager}
        assert set(self._paths) == tracked, f"registered {sorted(self._paths)} != tracked {sorted(tracked)}"
        best: dict[Node, tuple[int, float]] = {}
        for p in self.manager:
            r = self.manager.order(p.session)
            for node in path_of(self.node(p.handle)):
                if node not in best or r > best[node]:
                    best[node] = r
        for node in self.tree.nodes():
            assert self._best.get(node) == best.get(node), f"{node}: rank {self._best.get(node)} != {best.get(node)}"
