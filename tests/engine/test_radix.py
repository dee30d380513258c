"""The history-aware radix tree: one conformance suite on the tree and on the naive reference,
then eviction, drop-aware freeing and the host tier on the tree."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import REPOSITION, Accountant, Drop
from engine.cache.radix import KVState, RadixTree
from engine.oracle.naive_cache import NaiveCache

BPT = 10  # bytes per token in these tests


def radix(pool_tokens: int = 10**9, host_tokens: int = 0) -> Accountant:
    return Accountant(None, BPT, pool_tokens * BPT, host_tokens * BPT)


IMPLS = {"radix": radix, "naive": NaiveCache}


def build(messages: list[list[int]], drops: dict[int, list[int]], repos: set[int], gen: list[int]) -> list:
    """Items of a request: message token lists with drop/reposition events after their triggers."""
    items: list = []
    spans = []
    for i, toks in enumerate(messages):
        spans.append((len([x for x in items if isinstance(x, int)]), 0))
        items.extend(toks)
        spans[-1] = (spans[-1][0], spans[-1][0] + len(toks))
        if drops.get(i):
            items.append(Drop(tuple(sorted(spans[m] for m in drops[i]))))
        if i in repos:
            items.append(REPOSITION)
    return items + gen


MSGS = [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12], [13, 14], [15, 16, 17, 18]]
GEN = [99, 98]


@pytest.fixture(params=list(IMPLS))
def cache(request):
    return IMPLS[request.param]()


# ---------------------------------------------------------------- conformance (both implementations)

def test_first_request_computes_everything(cache):
    u = cache.request_items(build(MSGS[:3], {}, set(), GEN))
    assert (u.prompt_tokens, u.prefill_tokens, u.cached_tokens, u.drop_skipped_tokens) == (14, 14, 0, 0)


def test_identical_request_computes_nothing(cache):
    items = build(MSGS[:3], {}, set(), GEN)
    cache.request_items(items)
    u = cache.request_items(items)
    assert (u.prefill_tokens, u.cached_tokens) == (0, 14)


def test_extension_reuses_the_prefix(cache):
    cache.request_items(build(MSGS[:2], {}, set(), GEN))
    u = cache.request_items(build(MSGS[:4], {}, set(), GEN))
    # Messages 0-1 (7 tokens) are reused; the old generation prompt diverges from message 2.
    assert u.cached_tokens == 7 and u.prefill_tokens == 16 - 7


def test_same_text_different_drop_history_is_not_shared(cache):
    a = build(MSGS[:4], {1: [0]}, set(), GEN)  # drop message 0 after message 1
    b = build(MSGS[:4], {2: [0]}, set(), GEN)  # the same drop, one message later
    cache.request_items(a)
    u = cache.request_items(b)
    # b shares a's tokens only up to the end of message 1 (where a's drop event sits); message 0
    # is dropped at the end, message 1 is read from the cache, messages 2-3 and the prompt are new.
    assert (u.cached_tokens, u.prefill_tokens, u.drop_skipped_tokens) == (3, 9, 4)


def test_output_tokens_are_reused_by_the_next_turn(cache):
    first = build(MSGS[:2], {}, set(), GEN)
    cache.request_items(first, output_ids=[55, 56, 57])
    nxt = [*first, 55, 56, 60]
    u = cache.request_items(nxt)
    # 55 and 56 were fed back during generation, so they are cached; 57 was never fed.
    assert u.cached_tokens == 7 + 2 + 2 and u.prefill_tokens == 1


def test_dropped_before_use_is_skipped(cache):
    # Message 3 is dropped right after it is processed: nothing after it attends to it.
    u = cache.request_items(build(MSGS[:5], {3: [3]}, set(), GEN))
    assert u.drop_skipped_tokens == 2 and u.prefill_tokens == 20 - 2


def test_reposition_counts_rotated_keys_once(cache):
    items = build(MSGS[:4], {2: [0]}, {2}, GEN)
    u = cache.request_items(items)
    assert u.repos_tokens == 3 + 5  # messages 1 and 2 move left by 4; nothing else was before them
    assert cache.request_items(items).repos_tokens == 0


@st.composite
def streams(draw):
    """Several policies replaying one trajectory turn by turn, interleaved."""
    n_msgs = draw(st.integers(2, 7))
    msgs = [draw(st.lists(st.integers(1, 6), min_size=1, max_size=5)) for _ in range(n_msgs)]
    n_pol = draw(st.integers(1, 4))
    requests = []
    for _ in range(n_pol):
        drops: dict[int, list[int]] = {}
        repos: set[int] = set()
        dropped: set[int] = set()
        for turn in range(1, n_msgs + 1):
            t = turn - 1
            if draw(st.booleans()):
                cand = [m for m in range(t + 1) if m not in dropped]
                if cand:
                    pick = draw(st.sampled_from(cand))
                    drops.setdefault(t, []).append(pick)
                    dropped.add(pick)
            if draw(st.integers(0, 3)) == 0:
                repos.add(t)
            gen = draw(st.lists(st.integers(1, 6), min_size=1, max_size=2))
            out = draw(st.lists(st.integers(1, 6), max_size=3))
            requests.append((build(msgs[:turn], {k: list(v) for k, v in drops.items()}, set(repos), gen), out))
    order = draw(st.permutations(range(len(requests))))
    return [requests[i] for i in order]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_radix_equals_naive_on_random_streams(stream):
    tree, naive = radix(), NaiveCache()
    for items, out in stream:
        a = tree.request_items(items, out)
        b = naive.request_items(items, out)
        assert a == b, (items, out)
        tree.check_integrity()
        assert a.prompt_tokens == a.prefill_tokens + a.cached_tokens + a.drop_skipped_tokens


# ---------------------------------------------------------------- the tree under pressure

@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.integers(1, 40), st.integers(0, 30))
def test_small_budgets_evict_and_never_break(stream, pool, host):
    acc = radix(pool, host)
    for items, out in stream:
        u = acc.request_items(items, out)
        acc.check_integrity()
        assert acc.tree.pool_used <= pool * BPT and acc.tree.host_used <= host * BPT
        assert u.prompt_tokens == u.prefill_tokens + u.cached_tokens + u.drop_skipped_tokens
        assert all(n.lock == 0 for n in acc.tree.nodes())


class ScanTree(RadixTree):
    """The reference victim choice: scan the whole tree for the candidate with the smallest current
    (key, uid) -- what the persistent queues must pick."""

    def _pop(self, queue, candidate):
        found = [(self._key(n), n.uid, n) for n in self.nodes() if candidate(n)]
        return min(found, key=lambda e: (e[0], e[1]))[2] if found else None


def shape(tree: RadixTree) -> list:
    """The tree as plain data: every node's tokens, state, lock and items, in a canonical order."""
    return sorted((n.token_start, n.n_tokens, n.state.value, n.lock, tuple(map(repr, n.items))) for n in tree.nodes())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.integers(1, 40), st.integers(0, 30))
def test_queued_victims_are_the_full_scans(stream, pool, host):
    fast, scan = radix(pool, host), radix(pool, host)
    scan.tree = ScanTree(pool * BPT, host * BPT)
    for items, out in stream:
        assert fast.request_items(items, out) == scan.request_items(items, out)
        assert shape(fast.tree) == shape(scan.tree) and fast.tree.stats == scan.tree.stats
        fast.check_integrity()


def test_drop_aware_eviction_frees_dropped_spans_and_keeps_descendants():
    acc = radix(pool_tokens=40)
    first = build(MSGS[:3], {}, set(), GEN)  # 12 + 2 tokens
    acc.request_items(first)
    second = build(MSGS[:5], {3: [1, 2]}, set(), GEN)  # drops messages 1 and 2 (8 tokens)
    acc.request_items(second)
    tree = acc.tree
    # Message 1-2 KV is shared with `first`'s path, so it is not dead yet.
    assert tree.free_dropped() == 0
    # Once `first`'s own continuation is gone, every path below messages 1-2 drops them.
    acc2 = radix(pool_tokens=40)
    acc2.request_items(second)
    freed = acc2.tree.free_dropped()
    assert freed == 8
    acc2.check_integrity()
    # The continuation still reuses everything it attends to: no recompute.
    nxt = build(MSGS[:5], {3: [1, 2]}, set(), GEN)
    u = acc2.request_items(nxt)
    assert u.prefill_tokens == 0 and u.cached_tokens == 20 - 8
    # A branch made before the drop needs messages 1-2 again: they are restored by recompute.
    branch = build(MSGS[:3], {}, set(), [77])
    u = acc2.request_items(branch)
    assert u.prefill_tokens == 8 + 1 and u.cached_tokens == 4


def test_pressure_frees_dropped_kv_before_evicting_live_kv():
    acc = radix(pool_tokens=30)
    items = build(MSGS[:5], {3: [1, 2]}, set(), GEN)
    acc.request_items(items)
    tree = acc.tree
    assert tree.pool_used == 20 * BPT  # every token was computed, the dropped ones too
    # A new, unrelated request needs 16 tokens of room: the 8 dropped ones go first, then LRU.
    acc.request_items(build([[40, 41, 42, 43, 44, 45, 46, 47], [48, 49, 50, 51, 52, 53]], {}, set(), GEN))
    assert tree.stats.freed_dropped_tokens == 8
    acc.check_integrity()


def test_host_tier_swaps_out_and_back_in():
    acc = radix(pool_tokens=20, host_tokens=40)
    a = build(MSGS[:3], {}, set(), GEN)  # 14 tokens
    acc.request_items(a)
    acc.request_items(build([[60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71]], {}, set(), GEN))
    tree = acc.tree
    assert tree.stats.swap_outs >= 1 and tree.host_used > 0
    assert any(n.state is KVState.HOST for n in tree.nodes())
    u = acc.request_items(a)
    assert u.prefill_tokens == 0 and u.cached_tokens == 14  # read back from the host tier
    assert tree.stats.swap_ins >= 1
    acc.check_integrity()
