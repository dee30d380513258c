"""Two-objective Pareto helpers: cost (lower is better) and pass rate (higher is better)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
Point = tuple[float, float]


def dominates(a: Point, b: Point) -> bool:
    """``a`` = (cost, pass) is at least as good as ``b`` in both objectives and better in one."""
    return a[0] <= b[0] and a[1] >= b[1] and (a[0] < b[0] or a[1] > b[1])


def front(items: Sequence[T], point: Callable[[T], Point]) -> list[T]:
    """The non-dominated items (the first of identical points only), sorted by cost."""
    pts = [(point(x), x) for x in items]
    out: list[tuple[Point, T]] = []
    seen: set[Point] = set()
    for p, x in pts:
        if p in seen or any(dominates(q, p) for q, _ in pts):
            continue
        seen.add(p)
        out.append((p, x))
    return [x for _, x in sorted(out, key=lambda t: (t[0][0], -t[0][1]))]


def hypervolume(points: Sequence[Point], ref_cost: float, ref_pass: float = 0.0) -> float:
    """Area dominated by ``points`` inside the box bounded by the reference point.

    Sorted by cost, the front's pass rate increases; for costs in [c_i, c_{i+1}) the best pass
    rate reachable is p_i, so the area is the sum of (c_{i+1} - c_i) * (p_i - ref_pass).
    """
    stair: list[Point] = []
    for c, p in sorted({(c, p) for c, p in points if c < ref_cost and p > ref_pass}, key=lambda t: (t[0], -t[1])):
        if not stair or p > stair[-1][1]:
            stair.append((c, p))
    area = 0.0
    for i, (c, p) in enumerate(stair):
        nxt = stair[i + 1][0] if i + 1 < len(stair) else ref_cost
        area += (nxt - c) * (p - ref_pass)
    return area
