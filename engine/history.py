"""Event histories and what they imply for every token: the pure semantics of drop and reposition.

An *event history* is a sequence of items: token ids (``int``) and cache events (:class:`Drop`,
:class:`Reposition`), optionally led by a tenant's :class:`Salt`. It is the key of the radix tree,
because a token's KV is a pure function of the items before it (docs/architecture.md, invariant 1).
:func:`replay` walks a history once and records, for every token, the position it was computed at
and, for every run of tokens between events (a *segment*), the view it attended to: the alive
tokens and their positions at that time.

Position rules (kept exactly):
- positions start at 0; a token appended gets ``next_pos`` and ``next_pos`` grows by one;
- a drop removes tokens from the alive set and leaves ``next_pos`` alone, so without a
  reposition the numbering continues (dropped tokens keep their slots);
- a reposition renumbers the alive tokens 0..n-1 in order and sets ``next_pos = n``.

Nothing here touches tensors; the reference executor, the batched prefill, the radix tree and the
dry-run accountant all read these arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.errors import AKVError


@dataclass(frozen=True)
class Drop:
    """Remove the tokens in ``ranges`` (absolute token indices, half-open, sorted, disjoint)."""

    ranges: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        prev = -1
        for s, e in self.ranges:
            assert prev <= s < e, f"Drop ranges must be sorted, disjoint and non-empty: {self.ranges}"
            prev = e

    @property
    def n_tokens(self) -> int:
        return sum(e - s for s, e in self.ranges)

    def __repr__(self) -> str:
        return f"Drop{list(self.ranges)}"


@dataclass(frozen=True)
class Reposition:
    """Renumber the alive tokens 0..n-1 (their keys are rotated by the position delta)."""

    def __repr__(self) -> str:
        return "Reposition"


REPOSITION = Reposition()


@dataclass(frozen=True)
class Salt:
    """A namespace marker, only ever the first item of a history: it changes no token and no
    position, but two histories with different salts (or one with and one without) share no radix
    node, so one tenant's cached prefix is never reused, nor measurable, by another (as vLLM's
    ``cache_salt``). Histories without a salt behave exactly as before.
    """

    key: str

    def __repr__(self) -> str:
        return "Salt"  # the key may name a tenant: keep it out of logs and error messages


Item = int | Drop | Reposition | Salt


def merge_ranges(ranges: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sort and merge half-open ranges, dropping empty ones."""
    out: list[tuple[int, int]] = []
    for s, e in sorted(r for r in ranges if r[1] > r[0]):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return tuple(out)


@dataclass(frozen=True)
class Segment:
    """A run of consecutive tokens with no event between them.

    Attributes:
        start, end: token index range [start, end) of the run.
        first_pos: position of token ``start`` (the run's positions are consecutive).
        view: indices of the tokens alive just before the run (ascending).
        view_pos: their positions at that moment (ascending).
    """

    start: int
    end: int
    first_pos: int
    view: np.ndarray
    view_pos: np.ndarray


@dataclass(frozen=True)
class History:
    """What an event history implies for every token (arrays are int64).

    Attributes:
        token_ids: [N] the tokens in order.
        compute_pos: [N] the position each token was computed at.
        segments: the runs of tokens between events, in order.
        alive: indices of the tokens alive at the end (ascending).
        alive_pos: their positions at the end.
        next_pos: the position the next token would get.
        item_token: [n_items + 1] number of tokens among the first i items.
        repos_rotated: per item index of a Reposition, how many alive keys it rotated (delta != 0).
    """

    token_ids: np.ndarray
    compute_pos: np.ndarray
    segments: tuple[Segment, ...]
    alive: np.ndarray
    alive_pos: np.ndarray
    next_pos: int
    item_token: np.ndarray
    repos_rotated: dict[int, int]

    @property
    def n_tokens(self) -> int:
        return int(self.token_ids.shape[0])


def replay(items: Sequence[Item]) -> History:
    """Walk ``items`` once and return the :class:`History` they imply.

    Raises:
        AssertionError: if a Drop names a token that does not exist yet (compiled schedules
            never do; ``engine.layout`` validates user input before it gets here).
    """
    n = len(items)  # an upper bound on the tokens; the arrays are cut to the count at the end
    token_ids = np.empty(n, dtype=np.int64)
    compute_pos = np.empty(n, dtype=np.int64)
    cur_pos = np.empty(n, dtype=np.int64)  # current position of every token (meaningful if alive)
    alive_mask = np.zeros(n, dtype=bool)
    item_token = np.zeros(len(items) + 1, dtype=np.int64)
    segments: list[Segment] = []
    repos_rotated: dict[int, int] = {}
    count = 0
    next_pos = 0
    seg_start: int | None = None
    seg_view: tuple[np.ndarray, np.ndarray, int] | None = None

    def close_segment() -> None:
        nonlocal seg_start
        if seg_start is not None and seg_view is not None:
            segments.append(Segment(seg_start, count, seg_view[2], seg_view[0], seg_view[1]))
        seg_start = None

    prev = 0
    for e in [*event_indices(items), len(items)]:
        if prev < e:  # a run of tokens up to the next event, written at once (the same as one by one)
            run = e - prev
            if seg_start is None:
                idx = np.flatnonzero(alive_mask[:count])
                seg_start = count
                seg_view = (idx, cur_pos[idx].copy(), next_pos)
            token_ids[count:count + run] = items[prev:e]  # type: ignore[assignment]  # (tokens only)
            positions = np.arange(next_pos, next_pos + run, dtype=np.int64)
            compute_pos[count:count + run] = positions
            cur_pos[count:count + run] = positions
            alive_mask[count:count + run] = True
            item_token[prev + 1:e + 1] = np.arange(count + 1, count + run + 1, dtype=np.int64)
            next_pos += run
            count += run
        if e == len(items):
            break
        it = items[e]
        if isinstance(it, Drop):
            close_segment()
            for s, t in it.ranges:
                assert t <= count, f"Drop {it} names tokens beyond the {count} seen so far"
                alive_mask[s:t] = False
        elif isinstance(it, Reposition):
            close_segment()
            idx = np.flatnonzero(alive_mask[:count])
            new = np.arange(idx.shape[0], dtype=np.int64)
            repos_rotated[e] = int(np.count_nonzero(cur_pos[idx] != new))
            cur_pos[idx] = new
            next_pos = int(idx.shape[0])
        else:
            assert e == 0, "a Salt may only start a history"
        item_token[e + 1] = count
        prev = e + 1
    close_segment()
    token_ids, compute_pos = token_ids[:count], compute_pos[:count]
    cur_pos, alive_mask = cur_pos[:count], alive_mask[:count]
    alive = np.flatnonzero(alive_mask)
    return History(
        token_ids=token_ids,
        compute_pos=compute_pos,
        segments=tuple(segments),
        alive=alive,
        alive_pos=cur_pos[alive].copy(),
        next_pos=next_pos,
        item_token=item_token,
        repos_rotated=repos_rotated,
    )


EVENTS = (Drop, Reposition, Salt)


def event_indices(items: Sequence[Item]) -> list[int]:
    """Indices of the events (everything else is a token), ascending. Histories are thousands of
    tokens and a few events, so the scan runs in C: ``list.index`` over the items' types."""
    kinds = list(map(type, items))
    out: list[int] = []
    for cls in set(kinds):
        if issubclass(cls, EVENTS):
            i = kinds.index(cls)
            while True:
                out.append(i)
                try:
                    i = kinds.index(cls, i + 1)
                except ValueError:
                    break
    return sorted(out)


def count_tokens(items: Sequence[Item]) -> int:
    """How many of ``items`` are tokens (counted by type, in C)."""
    kinds = list(map(type, items))
    return sum(kinds.count(cls) for cls in set(kinds) if not issubclass(cls, EVENTS))


def count_drops(items: Sequence[Item]) -> int:
    """How many of ``items`` are :class:`Drop` events."""
    kinds = list(map(type, items))
    return sum(kinds.count(cls) for cls in set(kinds) if issubclass(cls, Drop))


def mask_runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """The maximal runs [s, e) where the boolean ``mask`` is true, in order."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


def intersect_ranges(
    a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]]
) -> tuple[tuple[int, int], ...]:
    """Intersection of two sorted, disjoint range lists."""
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def salted(items: Sequence[Item], salt: str | None) -> list[Item]:
    """``items`` in ``salt``'s namespace: led by ``Salt(salt)``, or unchanged when ``salt`` is None.

    Raises:
        AKVError: a salt that is not a string (named by its type only: a salt may name a tenant).
    """
    if salt is None:
        return list(items)
    if not isinstance(salt, str):
        raise AKVError(f"salt must be a string or None, got a {type(salt).__name__}", field="salt", value=None)
    return [Salt(salt), *items]
