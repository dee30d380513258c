"""The radix tree as a survival backend: paused sessions are end-nodes of their history's path.

A session's KV is the path from the root to its end node; a handle (:class:`TreeHandle`) keeps the
history's items too, so that when eviction prunes the end node from the tree the handle finds
the deepest node still stored for it. Nodes on several paused sessions'
paths (a shared system prompt, a forked prefix) take the highest rank among those sessions, so
shared KV is evicted last (KVFlow's rule: a shared prefix node takes the best of its users).
Explicit SWAP / DISCARD act bottom-up on the session's *exclusive* nodes: those on no other
paused session's path and not locked by a running request. Nodes off every paused path (ended
sessions, generated branches nobody resent) rank lowest and go first, by LRU.

Installing it sets ``tree.eviction_order``; :meth:`TreeBackend.detach` restores LRU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.history import Item
from engine.radix import KVState, Node, RadixTree
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

    Args:
        tree: the radix tree.
        bytes_per_token: KV bytes of one token.
    """

    def __init__(self, tree: RadixTree, bytes_per_token: int) -> None:
        self.tree = tree
        self.bytes_per_token = bytes_per_token
        self.manager: SurvivalManager | None = None
        self._rank: dict[int, tuple[int, float]] = {}

    def attach(self, manager: SurvivalManager) -> None:
        self.manager = manager
        self.tree.eviction_order = self

    def changed(self, session: str) -> None:
        """Nothing to do: ranks are recomputed at the start of every eviction pass."""

    def detach(self) -> None:
        if self.tree.eviction_order is self:
            self.tree.eviction_order = None
        self.manager = None

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

    def prepare(self, tree: RadixTree) -> None:
        self._rank = {}
        if self.manager is None:
            return
        for p in self.manager:
            r = self.manager.order(p.session)
            for node in path_of(self.node(p.handle)):
                old = self._rank.get(node.uid)
                if old is None or r > old:
                    self._rank[node.uid] = r

    def key(self, node: Node) -> tuple[int, float, int]:
        rank, score = self._rank.get(node.uid, (0, 0.0))
        return (rank, score, node.last_access)

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
        shared: set[int] = set()
        if self.manager is not None:
            for p in self.manager:
                if p.session != session:
                    shared.update(n.uid for n in path_of(self.node(p.handle)))
        out = []
        for node in path_of(self.node(handle)):
            if node.uid in shared or node.lock:
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
        self.tree.check_integrity()
        if self.manager is not None:
            assert self.tree.eviction_order is self, "the tree's eviction order is not this backend"
            self.manager.check_integrity()
