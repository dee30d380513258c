"""Pareto helpers against brute force."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rsi.pareto import dominates, front, hypervolume

points = st.lists(st.tuples(st.integers(0, 20).map(float), st.integers(0, 20).map(lambda x: x / 20)),
                  min_size=0, max_size=12)


@settings(max_examples=300, deadline=None)
@given(points)
def test_front_is_exactly_the_non_dominated_set(pts):
    fr = front(pts, lambda p: p)
    assert set(fr) == {p for p in pts if not any(dominates(q, p) for q in pts)}
    assert [p[0] for p in fr] == sorted(p[0] for p in fr)


@settings(max_examples=300, deadline=None)
@given(points)
def test_hypervolume_equals_a_grid_count(pts):
    ref = 21.0
    # Brute force on the grid: unit cells in cost times 1/20 cells in pass rate.
    cells = 0
    for x in range(21):
        for y in range(20):
            cx, cy = x + 0.5, (y + 0.5) / 20
            if any(c <= cx and p >= cy for c, p in pts):
                cells += 1
    assert abs(hypervolume(pts, ref) - cells / 20) < 1e-9


def test_dominance():
    assert dominates((1.0, 0.5), (2.0, 0.5))
    assert dominates((1.0, 0.6), (1.0, 0.5))
    assert not dominates((1.0, 0.5), (1.0, 0.5))
    assert not dominates((1.0, 0.4), (2.0, 0.5))
