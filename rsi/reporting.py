"""What the reports of both tracks draw and write alike: HTML tables and images, the hypervolume
curve, the plane of a front against its experts (``rsi.cache.report``, ``rsi.survival.report`` and the
proposer section use these; none of them reaches into another's helpers).

Not for: deciding what a report says (each report module does), or anything interactive.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

Point = tuple[float, float]


def fmt(v: Any, digits: int = 4) -> str:
    """A table cell: floats to ``digits`` places, dicts as short JSON, ``None`` empty."""
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True)[:160]
    return "" if v is None else str(v)


def table(rows: Sequence[Mapping[str, Any]], cols: Sequence[str], digits: int = 4) -> str:
    """An HTML table of ``rows`` (one column per name in ``cols``; cells escaped)."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(r.get(c), digits))}</td>" for c in cols) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def img(path: Path) -> str:
    """``path`` (a PNG) inline, so the page is one self-contained file."""
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def hypervolume_figure(history: Sequence[Mapping[str, Any]], path: Path,
                       size: tuple[float, float] = (5.2, 3.4)) -> None:
    """The hypervolume of the front on train, per generation (``archive.hv_history``)."""
    fig, ax = plt.subplots(figsize=size)
    ax.plot([h["generation"] for h in history], [h["hypervolume"] for h in history], marker="o", color="#2ca02c")
    ax.set_xlabel("generation")
    ax.set_ylabel("hypervolume (train)")
    ax.set_title("hypervolume per generation")
    ax.grid(alpha=0.3)
    _save(fig, path)


@dataclass(frozen=True)
class Marker:
    """One expert on a plane: its label, point, marker, colour and whether it is drawn hollow."""

    label: str
    point: Point
    marker: str = "o"
    color: str = "black"
    hollow: bool = False


def plane(path: Path, evolved: Sequence[Point], front: Sequence[Point], experts: Sequence[Marker], *, xlabel: str,
          ylabel: str, title: str, legend: Literal["lower right", "upper right"] = "lower right") -> None:
    """The evolved candidates (grey), their front (green steps) and the experts on one plane."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    if evolved:
        xs, ys = zip(*evolved)
        ax.scatter(xs, ys, s=18, color="#bbbbbb", label="evolved candidates", zorder=1)
    if front:
        fx, fy = zip(*front)
        ax.step(fx, fy, where="post", color="#2ca02c", lw=1.5, zorder=2)
        ax.scatter(fx, fy, s=40, color="#2ca02c", label="evolved front", zorder=3)
    for m in experts:
        ax.scatter([m.point[0]], [m.point[1]], marker=m.marker, s=70, label=m.label, zorder=4,
                   facecolors="none" if m.hollow else m.color, edgecolors=m.color)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc=legend)
    _save(fig, path)


def front_points(candidates: Sequence[Any], point: Callable[[Any], Point],
                 key: Callable[[Any], Point]) -> tuple[list[Point], list[Point]]:
    """(every candidate's ``point``, the front's points in order) where ``key`` is the candidate's point in
    ``rsi.pareto``'s orientation (first coordinate down, second up)."""
    from rsi.pareto import front

    return [point(c) for c in candidates], [point(c) for c in front(list(candidates), key)]
