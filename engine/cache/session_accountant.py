"""Dry-run accounting of one chat session, in time proportional to what each request adds.

An evaluator replays a trajectory request by request: request ``k`` holds the first messages of
the session under the policy's cache schedule at that point, and a validated cache schedule only
grows (``search_spaces.cache.decision.check_extends``). Then each request's history extends the
previous request's history up to that request's generation prompt, and :class:`Accountant` spends
almost all its time re-walking the shared prefix (rendering, replaying, matching it in the tree).
:class:`SessionAccountant` keeps that prefix's state between requests instead and only walks the
new items, with an unbounded pool and no host tier (the evaluator's cost model).

Why the usage is the same, token for token (the tests check it against :class:`Accountant` on
every built-in policy and on random sessions, breaks of the structure included). Call ``stable``
a request's history without its generation prompt and ``tail`` what the tree holds after it (the
generation prompt and the fed output tokens, all with KV):

1. Every token alive at the end of ``stable`` has KV in the tree: it was alive at the end of its
   request, so needed, so computed or read; the pool is unbounded, so nothing is ever evicted.
2. A token without KV was skipped: dropped, by an event in some ``stable``, before anything
   attended to it. A later request keeps that drop (it extends ``stable``), so the token is not
   alive at its end and not in the view of any later segment: no request needs it again.
3. So :func:`engine.cache.plan.closure` computes nothing before the new items: the segments there need
   only tokens with KV. The new items match the previous ``tail`` as far as they agree with it
   (no older tail branches off at or after the end of ``stable``: checked, else the general path
   runs), the rest
   is computed when needed, and the closure runs over the new segments only, their views cut to
   the new tokens (older viewed tokens have KV by 1).

A request that breaks the structure (a rewritten past, an edited text, a history that ends inside
the previous request's output) is accounted by an :class:`Accountant` fed every request so far,
and the session continues there.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from engine.cache.accounting import Accountant
from engine.cache.plan import TokenUsage
from engine.cache.radix import common_prefix
from engine.history import Drop, Item, Reposition, event_indices
from engine.layout import Rendered, Renderer, SessionLayout
from engine.schedule import Schedule

UNBOUNDED = 1 << 60


class SessionAccountant:
    """:class:`Accountant` with an unbounded pool and no host tier, for the requests of one session
    in order (see the module docstring).

    Args:
        renderer: the engine's renderer (``None``: :meth:`request_items` only).
        bytes_per_token: KV bytes of one token, for the fallback accountant (usage does not depend
            on it with an unbounded pool).
    """

    def __init__(self, renderer: Renderer | None, bytes_per_token: int = 1):
        self.renderer = renderer
        self.bytes_per_token = bytes_per_token
        self.fast_requests = 0
        self._general: Accountant | None = None
        self._log: list[tuple[list[Item] | tuple[SessionLayout, int], list[int]]] = []
        self._stable: list[Item] | tuple[SessionLayout, int] = []  # a list, or a session layout's first items
        self._tail: list[Item] = []
        self._branch = -1  # the furthest item index where an older request's tail leaves the session's path
        self._alive = np.zeros(0, dtype=bool)  # per token of stable: alive at its end
        self._pos = np.zeros(0, dtype=np.int64)  # per token of stable: its position at its end
        self._next_pos = 0
        self._positions = True  # positions are tracked (not when the session's layout never repositions)

    @property
    def _stable_len(self) -> int:
        """How many items the stable history holds."""
        return len(self._stable) if isinstance(self._stable, list) else self._stable[1]

    @property
    def general(self) -> bool:
        """Whether the session has left the fast path (every later request is accounted by the tree)."""
        return self._general is not None

    def request_rendered(self, rendered: Rendered, schedule: Mapping[str, Any] | Schedule | None = None,
                         output_ids: Sequence[int] = ()) -> TokenUsage:
        """:meth:`Accountant.request_rendered` for the session's next request."""
        if self.renderer is None:
            raise TypeError("this accountant has no renderer; use request_items()")
        items = self.renderer.layout_rendered(rendered, schedule).items
        return self.request_items(items, len(rendered.token_ids) - rendered.prompt_start, output_ids)

    def request_items(self, items: Sequence[Item], prompt_items: int, output_ids: Sequence[int] = ()) -> TokenUsage:
        """Account a request given as its history whose last ``prompt_items`` items are the
        generation prompt (tokens), and whose generation produced ``output_ids``."""
        items, output = list(items), list(output_ids)
        usage = None if self._general is not None else self._fast(items, prompt_items, output)
        if usage is None:
            usage = self._slow(items, output)
        self._log.append((items, output))
        return usage

    def request_layout(self, layout: SessionLayout, n: int, output_ids: Sequence[int] = ()) -> TokenUsage:
        """:meth:`request_items` of ``layout.request(n)`` (the request holding the first ``n``
        messages of a session compiled once), in time proportional to what it adds when the previous
        request came from the same layout: its history is then known to be a prefix."""
        output = list(output_ids)
        end = layout.ends[n]
        usage = None
        if not self._log:
            self._positions = layout.repositions  # without repositions, positions never matter
        if self._general is None and (self._stable_len == 0 or (
                isinstance(self._stable, tuple) and self._stable[0] is layout and self._stable[1] <= end)):
            k0 = self._stable_len
            events = [e - k0 for e in layout.events[bisect_left(layout.events, k0):bisect_left(layout.events, end)]]
            usage = self._advance([*layout.items[k0:end], *layout.prompt], len(layout.prompt), output, (layout, end),
                                  events)
        if usage is None:
            usage = self.request_items(layout.request(n), len(layout.prompt), output)
            self._log.pop()
        self._log.append(((layout, n), output))
        return usage

    def _slow(self, items: list[Item], output: list[int]) -> TokenUsage:
        if self._general is None:
            self._general = Accountant(self.renderer, self.bytes_per_token, UNBOUNDED, 0)
            for old_items, old_output in self._log:
                self._general.request_items(_materialize(old_items), old_output)
        return self._general.request_items(items, output)

    def _fast(self, items: list[Item], g: int, output: list[int]) -> TokenUsage | None:
        """The usage when the request keeps the structure (module docstring), else ``None``."""
        k0 = self._stable_len
        if not self._positions or len(items) - g < k0 or items[:k0] != _stable_items(self._stable):
            return None
        return self._advance(items[k0:], g, output, items[:-g], event_indices(items[k0:]))

    def _advance(self, new: list[Item], g: int, output: list[int], stable: list[Item] | tuple[SessionLayout, int],
                 events: list[int]) -> TokenUsage | None:
        """The usage of a request that is the stable history followed by ``new`` (whose last ``g``
        items are the generation prompt; ``events``: where its events lie), when it keeps the
        structure; else ``None``."""
        k0 = self._stable_len
        if self._branch >= k0:
            return None
        m = common_prefix(self._tail, new)  # the tail holds tokens only: m tokens have KV
        if m >= len(new) or not 0 < g <= len(new) - m or any(type(t) is not int for t in new[-g:]):
            return None
        walk = _walk(new, events, self._alive, self._pos if self._positions else None, self._next_pos)
        if walk is None:
            return None
        alive, pos, next_pos, segments, repos = walk
        t0, n = len(self._alive), len(alive)
        if segments is None:  # every new token stays alive, so each one without KV is computed
            prefill = n - t0 - m
            cached = int(alive.sum()) - prefill
        else:
            compute = _closure(alive[t0:], segments, m)
            prefill = int(compute.sum())
            cached = int(alive.sum()) - int((alive[t0:] & compute).sum())
        if m < len(self._tail):  # the previous tail branches off here: a later request might match it
            self._branch = max(self._branch, k0 + m)
        self._stable, self._tail = stable, [*new[-g:], *output[:-1]]
        self._alive, self._next_pos = alive[:n - g], next_pos - g
        if pos is not None:
            self._pos = pos[:n - g]
        self.fast_requests += 1
        return TokenUsage(n, prefill, cached, n - prefill - cached, repos, len(output))


def _stable_items(stable: list[Item] | tuple[SessionLayout, int]) -> list[Item]:
    return stable if isinstance(stable, list) else stable[0].items[:stable[1]]


def _materialize(request: list[Item] | tuple[SessionLayout, int]) -> list[Item]:
    return request if isinstance(request, list) else request[0].request(request[1])


Walk = tuple[np.ndarray, np.ndarray | None, int, list[tuple[int, int, np.ndarray]] | None, int]


def _walk(new: Sequence[Item], events: list[int], alive0: np.ndarray, pos0: np.ndarray | None,
          next_pos: int) -> Walk | None:
    """:func:`engine.history.replay` continued over ``new`` (its events at ``events``) from the
    state after ``stable``: (alive [N], positions [N], next position, the new segments as (start,
    end, view) in tokens counted from the first new token with views cut to new tokens, keys
    rotated by the new repositions). Without ``pos0`` positions are not tracked (no position is
    returned, and a reposition is not taken). No segments (``None``) when no drop reaches a new
    token: every new token is then alive at the end, and the closure needs no views. ``None`` for
    an item the fast path does not take (a Salt after the start)."""
    t0 = len(alive0)
    views = any(isinstance(it := new[e], Drop) and it.ranges and it.ranges[-1][1] > t0 for e in events)
    n = t0 + len(new) - len(events)
    alive = np.zeros(n, dtype=bool)
    alive[:t0] = alive0
    pos = None
    if pos0 is not None:
        pos = np.empty(n, dtype=np.int64)
        pos[:t0] = pos0
    segments: list[tuple[int, int, np.ndarray]] = []
    count, repos, prev = t0, 0, 0
    seg: tuple[int, np.ndarray] | None = None  # the open segment: its start and view (new tokens)
    for e in [*events, len(new)]:
        if prev < e:
            if seg is None and views:
                seg = (count - t0, np.flatnonzero(alive[t0:count]))
            run = e - prev
            if pos is not None:
                pos[count:count + run] = np.arange(next_pos, next_pos + run, dtype=np.int64)
            alive[count:count + run] = True
            next_pos += run
            count += run
        if e == len(new):
            break
        it = new[e]
        if seg is not None:
            segments.append((seg[0], count - t0, seg[1]))
            seg = None
        if isinstance(it, Drop):
            for s, t in it.ranges:
                assert t <= count, f"Drop {it} names tokens beyond the {count} seen so far"
                alive[s:t] = False
        elif isinstance(it, Reposition) and pos is not None:
            idx = np.flatnonzero(alive[:count])
            ranks = np.arange(idx.shape[0], dtype=np.int64)
            repos += int(np.count_nonzero(pos[idx] != ranks))
            pos[idx] = ranks
            next_pos = int(idx.shape[0])
        else:
            return None
        prev = e + 1
    if seg is not None:
        segments.append((seg[0], count - t0, seg[1]))
    return alive, pos, next_pos, segments if views else None, repos


def _closure(alive: np.ndarray, segments: list[tuple[int, int, np.ndarray]], matched: int) -> np.ndarray:
    """:func:`engine.cache.plan.closure` over the new tokens (the first ``matched`` have KV): which to compute."""
    n = alive.shape[0]
    avail = np.zeros(n, dtype=bool)
    avail[:matched] = True
    needed = alive.copy()
    compute = np.zeros(n, dtype=bool)
    compute[n - 1] = True  # its logits start generation
    for s, e, view in reversed(segments):
        hits = np.flatnonzero((needed[s:e] & ~avail[s:e]) | compute[s:e])
        if hits.size == 0:
            continue
        last = s + int(hits[-1])
        compute[s:last + 1] |= ~avail[s:last + 1]
        needed[s:last + 1] = True
        needed[view] = True
    return compute
