"""``engine.history.replay`` against a token-by-token reference on random event histories.

``replay`` writes each run of tokens between events at once; the reference below walks one item
at a time, the obvious way. Every field of the History must agree exactly (integers).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.history import Drop, Reposition, Salt, count_drops, count_tokens, event_indices, mask_runs, replay


def reference(items):
    """Token by token: the position each token was computed at, which are alive at the end and at
    what position, the segments (runs between events) with the view they attended."""
    token_ids, compute_pos, cur_pos, alive, item_token, segments, rotated = [], [], [], [], [0], [], {}
    next_pos, seg = 0, None
    for i, it in enumerate(items):
        if isinstance(it, (Drop, Reposition)):
            if seg is not None:
                segments.append((*seg, len(token_ids)))
                seg = None
            if isinstance(it, Drop):
                for s, e in it.ranges:
                    for t in range(s, e):
                        alive[t] = False
            else:
                live = [t for t in range(len(token_ids)) if alive[t]]
                rotated[i] = sum(cur_pos[t] != k for k, t in enumerate(live))
                for k, t in enumerate(live):
                    cur_pos[t] = k
                next_pos = len(live)
        elif not isinstance(it, Salt):
            if seg is None:
                live = [t for t in range(len(token_ids)) if alive[t]]
                seg = (len(token_ids), next_pos, tuple(live), tuple(cur_pos[t] for t in live))
            token_ids.append(it)
            compute_pos.append(next_pos)
            cur_pos.append(next_pos)
            alive.append(True)
            next_pos += 1
        item_token.append(len(token_ids))
    if seg is not None:
        segments.append((*seg, len(token_ids)))
    live = [t for t in range(len(token_ids)) if alive[t]]
    return token_ids, compute_pos, live, [cur_pos[t] for t in live], next_pos, item_token, segments, rotated


def random_items(rng: random.Random, n_events: int, salted: bool):
    items: list = [Salt("tenant")] if salted else []
    count = 0
    for _ in range(n_events):
        run = rng.randrange(0, 9)
        items += [rng.randrange(1000) for _ in range(run)]
        count += run
        if count and rng.random() < 0.5:
            s = rng.randrange(count)
            items.append(Drop(((s, rng.randrange(s, count) + 1),)))
        elif rng.random() < 0.5:
            items.append(Reposition())
    return items


@pytest.mark.parametrize("seed", range(40))
def test_replay_equals_the_token_by_token_reference(seed):
    rng = random.Random(seed)
    items = random_items(rng, rng.randrange(0, 12), salted=seed % 4 == 0)
    h = replay(items)
    tokens, compute, live, live_pos, next_pos, item_token, segments, rotated = reference(items)
    assert h.token_ids.tolist() == tokens and h.compute_pos.tolist() == compute
    assert h.alive.tolist() == live and h.alive_pos.tolist() == live_pos and h.next_pos == next_pos
    assert h.item_token.tolist() == item_token and h.repos_rotated == rotated
    got = [(s.start, s.first_pos, tuple(s.view.tolist()), tuple(s.view_pos.tolist()), s.end) for s in h.segments]
    assert got == [(a, p, v, vp, e) for a, p, v, vp, e in segments]
    assert all(arr.dtype == np.int64 for arr in (h.token_ids, h.compute_pos, h.alive, h.alive_pos, h.item_token))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.booleans(), max_size=40))
def test_mask_runs_are_the_maximal_true_runs(bits):
    runs, start = [], None  # the obvious scan
    for i, b in enumerate([*bits, False]):
        if b and start is None:
            start = i
        elif not b and start is not None:
            runs.append((start, i))
            start = None
    assert mask_runs(np.array(bits, dtype=bool)) == runs


def test_events_and_tokens_are_counted_by_type():
    items = [Salt("t"), 1, 2, Drop(((0, 1),)), 3, Reposition(), Drop(((1, 2),)), 4]
    assert event_indices(items) == [0, 3, 5, 6]
    assert count_tokens(items) == 4 and count_drops(items) == 2
    assert event_indices([]) == [] and count_tokens([]) == 0 == count_drops([5, 6])
