"""The session accountant against the general one (and the naive oracle): the same usage on every
request of random sessions, on the fast path when the history only grows and after a break."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import REPOSITION, Accountant, Drop
from engine.cache.session_accountant import SessionAccountant
from engine.history import merge_ranges
from engine.layout import SessionLayout
from engine.oracle.naive_cache import NaiveCache

GEN = [90, 91]  # the generation prompt, which is also an assistant turn's header
STOP = 92  # an assistant turn's footer starts with the stop token


def items_of(msgs: list[list[int]], events: dict[int, list], upto: int) -> list:
    """Tokens of ``msgs[:upto]`` with each trigger's events after it, then the generation prompt."""
    out: list = []
    for i, toks in enumerate(msgs[:upto]):
        out += toks
        out += events.get(i, [])
    return out + GEN


@st.composite
def sessions(draw, breaks: bool = False, layout: bool = False):
    """One trajectory replayed request by request under a schedule that only grows (and, with
    ``breaks``, sometimes rewrites its past). Assistant turns are header + body + footer, and the
    request before one generates its body and stop token, so later requests match that output."""
    n_msgs = draw(st.integers(2, 9))
    msgs, outputs = [], {}
    for i in range(n_msgs):
        body = draw(st.lists(st.integers(1, 30), min_size=1, max_size=6))
        if i and draw(st.booleans()):
            msgs.append(GEN + body + [STOP, 93])
            outputs[i] = [*body, STOP] if draw(st.integers(0, 4)) else draw(st.lists(st.integers(1, 30), max_size=3))
        else:
            msgs.append(body)
    starts = [sum(len(m) for m in msgs[:i]) for i in range(n_msgs + 1)]
    events: dict[int, list] = {}
    dropped: set[int] = set()
    requests, prev_n = [], 0
    for n in range(1, n_msgs + 1):
        if not (n in outputs or n == n_msgs or draw(st.integers(0, 2)) == 0):
            continue
        for t in range(prev_n, n):  # events only at triggers this request is the first to see
            if draw(st.booleans()):
                live = [m for m in range(t + 1) if m not in dropped]
                if live:
                    ms = draw(st.lists(st.sampled_from(live), max_size=2, unique=True))
                    ranges = []
                    for m in ms:
                        s, e = starts[m], starts[m + 1]
                        cut = draw(st.integers(s, e - 1)) if draw(st.booleans()) else s  # part of a message
                        ranges.append((cut, e))
                        dropped.add(m)
                    if ranges:
                        events.setdefault(t, []).append(Drop(merge_ranges(ranges)))
            if draw(st.integers(0, 3)) == 0:
                events.setdefault(t, []).append(REPOSITION)
        if breaks and prev_n > 1 and draw(st.integers(0, 4)) == 0:
            events.setdefault(draw(st.integers(0, prev_n - 2)), []).append(REPOSITION)  # rewrites the past
        requests.append((items_of(msgs, events, n), outputs.get(n, []), n))
        prev_n = n
    if layout:  # the session compiled once under its last schedule (engine.layout.SessionLayout)
        ends = [len(items_of(msgs, events, n)) - len(GEN) for n in range(n_msgs + 1)]
        return requests, SessionLayout(items_of(msgs, events, n_msgs)[:-len(GEN)], ends, GEN)
    return requests


def check(requests: list) -> SessionAccountant:
    session = SessionAccountant(None)
    tree, naive = Accountant(None, 10, 1 << 60), NaiveCache()
    for items, out, *_ in requests:
        want = tree.request_items(items, out)
        assert session.request_items(items, len(GEN), out) == want, items
        assert naive.request_items(items, out) == want
    tree.check_integrity()
    return session


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_a_growing_session_is_accounted_on_the_fast_path_exactly(requests):
    session = check(requests)
    assert not session.general and session.fast_requests == len(requests)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions(breaks=True))
def test_a_session_that_rewrites_its_past_continues_exactly_on_the_tree(requests):
    check(requests)


def test_a_rewritten_past_leaves_the_fast_path_once_and_for_all():
    msgs = [[1, 2, 3], [4, 5], [6, 7, 8], [9]]
    first = items_of(msgs, {}, 2)
    rewritten = items_of(msgs, {0: [REPOSITION]}, 3)  # an event before the previous request's end
    later = items_of(msgs, {0: [REPOSITION]}, 4)
    session = check([(first, [4, 5]), (rewritten, []), (later, [])])
    assert session.general and session.fast_requests == 1


def test_the_whole_request_already_stored_is_left_to_the_tree():
    items = items_of([[1, 2, 3]], {}, 1)
    session = check([(items, []), (items, [])])  # the second request reads its last token's KV
    assert session.fast_requests == 1 and session.general


def test_an_older_output_that_runs_past_a_later_request_is_matched_on_the_tree():
    """Request 1 generates [5, 6, 7]; request 2 ends right after the 5 (its history agrees with that
    output that far); request 3 continues with 6: the tree holds its KV from request 1's output."""
    msgs = [[1, 2], [90, 91, 5], [6, 7, 8]]
    requests = [(items_of(msgs, {}, 1), [5, 6, 7]), (items_of(msgs, {}, 2), []), (items_of(msgs, {}, 3), [])]
    session = check(requests)
    assert session.fast_requests == 2 and session.general


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions(layout=True))
def test_a_session_compiled_once_is_accounted_request_by_request_exactly(drawn):
    """request_layout (the evaluator's path: no history is copied or compared) against the tree fed
    each request's full history, which must be the layout's request(n)."""
    requests, layout = drawn
    session, tree = SessionAccountant(None), Accountant(None, 10, 1 << 60)
    for items, out, n in requests:
        assert layout.request(n) == items
        assert session.request_layout(layout, n, out) == tree.request_items(items, out)
    assert not session.general and session.fast_requests == len(requests)


def test_a_request_from_another_layout_is_accounted_on_the_tree():
    """A second layout that rewrites the first one's past: its request cannot extend the first, so
    the session leaves the fast path, with the same usage as the tree."""
    msgs = [[1, 2, 3], [4, 5], [6, 7, 8], [9]]

    def layout(events):
        ends = [len(items_of(msgs, events, n)) - len(GEN) for n in range(len(msgs) + 1)]
        return SessionLayout(items_of(msgs, events, len(msgs))[:-len(GEN)], ends, GEN)

    plain, rewritten = layout({}), layout({0: [REPOSITION]})
    session, tree = SessionAccountant(None), Accountant(None, 10, 1 << 60)
    for lay, n in ((plain, 2), (rewritten, 3), (rewritten, 4)):
        assert session.request_layout(lay, n) == tree.request_items(lay.request(n), [])
    assert session.general and session.fast_requests == 1
