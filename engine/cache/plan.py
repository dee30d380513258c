"""Request planning: what to reuse, what to compute, what to skip, and the exact token accounting.

Shared by the engine and the dry-run accountant, so both make the same tree decisions and report
the same usage (docs/architecture.md, invariant 4). Per request, over the tokens of its history:

- *needed*: alive at the end (the generation attends to them), or attended to by a token that
  must be computed (its segment's view, and its own segment's earlier tokens);
- *compute*: needed but without KV in the tree (new, evicted, or freed after a drop), plus the
  last prompt token, whose logits start generation;
- *skipped*: neither needed nor stored: dropped before anything attended to it.

Usage partitions the prompt: ``prompt_tokens = prefill_tokens + cached_tokens + drop_skipped_tokens``
where ``cached`` counts alive tokens read from the tree and ``drop_skipped`` the dropped tokens
that were neither computed nor read. ``repos_tokens`` counts keys rotated by reposition events
that this request is the first to apply (events already in the tree were paid for before).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.cache.kvstore import Payload
from engine.cache.radix import KVState, MatchResult, Node, RadixTree
from engine.history import History, Item, mask_runs


@dataclass(frozen=True)
class TokenUsage:
    """Token accounting of one request (see the module docstring)."""

    prompt_tokens: int
    prefill_tokens: int
    cached_tokens: int
    drop_skipped_tokens: int
    repos_tokens: int
    completion_tokens: int = 0

    def with_completion(self, n: int) -> TokenUsage:
        return TokenUsage(self.prompt_tokens, self.prefill_tokens, self.cached_tokens,
                          self.drop_skipped_tokens, self.repos_tokens, n)

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "prefill_tokens": self.prefill_tokens,
            "cached_tokens": self.cached_tokens,
            "drop_skipped_tokens": self.drop_skipped_tokens,
            "repos_tokens": self.repos_tokens,
        }


@dataclass(frozen=True)
class RequestPlan:
    """What one request will do to the cache.

    Attributes:
        history: the request's history.
        match: the longest stored prefix (its path is locked by :func:`plan_request`).
        matched_tokens: tokens covered by the match.
        avail: [N] whether each token has KV in the tree (pool or host).
        compute: [N] whether each token is computed by this request.
        usage: the token accounting.
        end_hidden: the stored hidden state after the last token, when the whole history was
            already in the tree with it (then the last token need not be recomputed).
    """

    history: History
    match: MatchResult
    matched_tokens: int
    avail: np.ndarray
    compute: np.ndarray
    usage: TokenUsage
    end_hidden: Any = None

    @property
    def compute_idx(self) -> np.ndarray:
        return np.flatnonzero(self.compute)


def plan_request(tree: RadixTree, items: Sequence[Item], history: History) -> RequestPlan:
    """Match ``items`` in ``tree``, lock the match, and decide what to compute."""
    match = tree.match(items)
    if match.last is not None:
        tree.lock(match.last)
        tree.touch(match.last)
    n = history.n_tokens
    matched_tokens = int(history.item_token[match.n_items])
    avail = np.zeros(n, dtype=bool)
    for node in match.path:
        if node.n_tokens and node.state is not KVState.ABSENT:
            avail[node.token_start:node.token_end] = True
    last = match.last
    end_hidden = None
    if last is not None and match.n_items == len(items) and last.end_hidden is not None and avail[n - 1]:
        end_hidden = last.end_hidden
    needed, compute = closure(history, avail, force_last=end_hidden is None)
    for node in match.path:  # bring back swapped-out KV this request reads (stays readable if no room)
        if node.state is KVState.HOST and needed[node.token_start:node.token_end].any():
            tree.swap_in(node)
    alive = np.zeros(n, dtype=bool)
    alive[history.alive] = True
    prefill = int(compute.sum())
    cached = int((alive & ~compute).sum())
    repos = sum(c for i, c in history.repos_rotated.items() if i >= match.n_items)
    usage = TokenUsage(n, prefill, cached, n - prefill - cached, repos)
    return RequestPlan(history, match, matched_tokens, avail, compute, usage, end_hidden)


def needed_closure(history: History, avail: np.ndarray, force_last: bool = True) -> np.ndarray:
    """Which tokens must be computed, given which have KV (see the module docstring).

    ``force_last`` computes the last token even when stored, for its logits.
    """
    return closure(history, avail, force_last)[1]


def closure(history: History, avail: np.ndarray, force_last: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(needed, compute) masks [N]: tokens read by this request, and tokens it must compute."""
    n = history.n_tokens
    needed = np.zeros(n, dtype=bool)
    needed[history.alive] = True
    compute = np.zeros(n, dtype=bool)
    if n == 0:
        return needed, compute
    compute[n - 1] = force_last  # its logits start generation
    for seg in reversed(history.segments):
        s, e = seg.start, seg.end
        want = (needed[s:e] & ~avail[s:e]) | compute[s:e]
        hits = np.flatnonzero(want)
        if hits.size == 0:
            continue
        last = s + int(hits[-1])
        # Computing token `last` needs every earlier token of its segment and the segment's view.
        compute[s:last + 1] |= ~avail[s:last + 1]
        needed[s:last + 1] = True
        needed[seg.view] = True
    return needed, compute


PayloadFactory = Callable[[int, int], Payload]
"""(start, end) token range, all computed by this request -> its payload."""


def commit(
    tree: RadixTree,
    plan: RequestPlan,
    items: Sequence[Item],
    make_payload: PayloadFactory | None,
    bytes_per_token: int,
    last_hidden: Any = None,
) -> Node:
    """Store what the request computed and add its unmatched suffix to the tree.

    Matched ABSENT tokens that were recomputed get their KV back (nodes are split so that a
    node is either wholly restored or wholly left ABSENT). The suffix is added as a chain of
    nodes alternating between stored runs (with KV) and runs without KV (skipped, or beyond the
    pool). When the pool cannot hold everything even after eviction, the earliest tokens are
    stored first, as many as fit (``make_payload=None`` stores nothing). ``last_hidden`` (the
    hidden state after the last token, when this request computed it) is remembered on the end
    node. Returns the node the prompt ends on, locked in place of the match's lock.
    """
    # Tokens to store: computed now and not already stored, in token order, as many as fit.
    stored = plan.compute & ~plan.avail
    if make_payload is None:
        stored[:] = False
    want = int(stored.sum())
    if want and not tree.ensure_room(want * bytes_per_token):
        room = max(0, (tree.pool_bytes - tree.pool_used) // bytes_per_token)
        stored &= np.cumsum(stored) <= room
    if stored.any():
        assert make_payload is not None
        for node in list(plan.match.path):
            if node.state is KVState.ABSENT and node.n_tokens:
                a = node.token_start
                for s, e in mask_runs(stored[a:node.token_end]):
                    tree.fill(tree.isolate(node, a + s, a + e), make_payload(a + s, a + e))
    end: Node = plan.match.last or tree.root
    suffix = list(items[plan.match.n_items:])
    token = plan.matched_tokens
    pos = 0
    while pos < len(suffix):
        # The next chunk: items up to where the stored/not-stored flag of tokens changes.
        j, ntok, flag = pos, 0, None
        while j < len(suffix):
            if isinstance(suffix[j], int):
                f = bool(stored[token + ntok])
                if flag is not None and f != flag:
                    break
                flag = f
                ntok += 1
            j += 1
        payload = make_payload(token, token + ntok) if (flag and make_payload is not None) else None
        end = tree.extend(end, suffix[pos:j], payload)
        pos, token = j, token + ntok
    if end is not tree.root:
        if last_hidden is not None and plan.compute[-1] and isinstance(end.items[-1], int):
            end.end_hidden = last_hidden
        tree.touch(end)
        if suffix:
            tree.lock(end)
            if plan.match.last is not None:
                tree.unlock(plan.match.last)
    return end


def release(tree: RadixTree, node: Node) -> None:
    """Unlock the prompt's end node once the request is done."""
    if node is not tree.root:
        tree.unlock(node)


