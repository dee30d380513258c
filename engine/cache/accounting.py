"""Dry-run accounting: the engine's cache decisions and token usage, without a model or tensors.

An :class:`Accountant` owns its own radix tree whose payloads are sizes only. Fed the same
requests (and the same output tokens) as an :class:`engine.Engine` with the same budgets, it
reports the same usage token for token, because both go through ``engine.cache.plan``. The evaluator
uses it to cost a policy's run exactly and in milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from engine.cache.kvstore import Payload, SizedKV
from engine.cache.plan import TokenUsage, commit, plan_request, release
from engine.cache.radix import KVState, Node, RadixTree
from engine.history import Item, replay
from engine.layout import Rendered, Renderer
from engine.schedule import Schedule


@dataclass(eq=False)
class DryRequest:
    """A request between :meth:`Accountant.start` and :meth:`Accountant.finish`: its history, its
    token accounting, and the node its prompt ends on (locked until the finish)."""

    items: list[Item]
    usage: TokenUsage
    end: Node
    finished: bool = False


class Accountant:
    """Token accounting of a stream of requests against one radix tree.

    Args:
        renderer: the engine's renderer (same tokenizer and template); ``None`` for items only.
        bytes_per_token: KV bytes of one token (``engine.geometry.bytes_per_token``).
        pool_bytes: pool budget; host_bytes: host-tier budget (0: none).
    """

    def __init__(self, renderer: Renderer | None, bytes_per_token: int, pool_bytes: int, host_bytes: int = 0):
        self.renderer = renderer
        self.bytes_per_token = bytes_per_token
        self.tree = RadixTree(pool_bytes, host_bytes)

    def request(
        self,
        messages: Sequence[Mapping[str, Any]],
        schedule: Mapping[str, Any] | Schedule | None = None,
        output_ids: Sequence[int] = (),
    ) -> TokenUsage:
        """Account one request whose generation produced ``output_ids``.

        As in the engine, the output tokens whose KV was computed (all but the last) are
        inserted after the prompt, so the next turn can reuse them.
        """
        if self.renderer is None:
            raise TypeError("this accountant has no renderer; use request_items()")
        return self.request_rendered(self.renderer.render(messages), schedule, output_ids)

    def request_rendered(self, rendered: Rendered, schedule: Mapping[str, Any] | Schedule | None = None,
                         output_ids: Sequence[int] = ()) -> TokenUsage:
        """:meth:`request` of messages already rendered (a replay renders a trajectory once and
        accounts each request on a :meth:`Rendered.prefix` of it)."""
        if self.renderer is None:
            raise TypeError("this accountant has no renderer; use request_items()")
        return self.request_items(self.renderer.layout_rendered(rendered, schedule).items, output_ids)

    def request_items(self, items: Sequence[Item], output_ids: Sequence[int] = ()) -> TokenUsage:
        """Account a request given as its event history."""
        return self.finish(self.start(items), output_ids)

    def start(self, items: Sequence[Item]) -> DryRequest:
        """What :meth:`engine.Engine.start` does to the tree: plan, store the prompt's KV, and hold
        the prompt's end node locked until :meth:`finish` (other requests may run in between)."""
        history = replay(items)
        plan = plan_request(self.tree, items, history)
        bpt = self.bytes_per_token
        end = commit(self.tree, plan, items, lambda s, e: SizedKV(e - s, bpt), bpt, last_hidden=True)
        return DryRequest(list(items), plan.usage, end)

    def finish(self, request: DryRequest, output_ids: Sequence[int] = ()) -> TokenUsage:
        """What :meth:`engine.Engine.finish` does: store the generated KV and release the locks
        (call exactly once per :meth:`start`)."""
        assert not request.finished, "finish() called twice"
        request.finished = True
        bpt = self.bytes_per_token
        try:
            if len(output_ids) > 1:
                insert_output(self.tree, request.items, list(output_ids), lambda s, e: SizedKV(e - s, bpt), bpt)
        finally:
            release(self.tree, request.end)
        return request.usage.with_completion(len(output_ids))

    def check_integrity(self) -> None:
        self.tree.check_integrity()


def insert_output(tree: RadixTree, items: list[Item], output_ids: list[int],
                  make: Callable[[int, int], Payload], bytes_per_token: int) -> None:
    """Store the generated tokens whose KV exists (all but the last) after the prompt ``items``.

    ``make(s, e)`` returns the payload of fed tokens [s, e) (offsets into ``output_ids``). Nodes
    for these tokens may already exist without KV (e.g. a branch that skipped them): they are
    filled, so the tree never forgets KV that was computed.
    """
    fed = output_ids[:-1]
    if not fed:
        return
    n_prompt = sum(map(isinstance, items, repeat(int)))  # tokens among the items (C-speed count)
    full = [*items, *fed]
    match = tree.match(full)
    parent = match.last or tree.root
    tree.lock(parent)
    try:
        for node in list(match.path):
            if node.state is KVState.ABSENT and node.n_tokens and node.token_end > n_prompt:
                s, e = max(node.token_start, n_prompt), node.token_end
                if tree.ensure_room((e - s) * bytes_per_token):
                    tree.fill(tree.isolate(node, s, e), make(s - n_prompt, e - n_prompt))
        missing = len(full) - match.n_items
        if missing > 0:
            room = tree.ensure_room(missing * bytes_per_token)
            tree.extend(parent, full[match.n_items:], make(len(fed) - missing, len(fed)) if room else None)
    finally:
        tree.unlock(parent)
