"""Task lengths in tokens (gemma template) and per-family summaries of a task set.

Lengths are measured, not estimated: ``engine.layout.Renderer`` renders the messages exactly as
the engine would, and ``n_tokens`` counts every message token (the generation prompt excluded).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from evals.tasks.schema import Task

DEFAULT_MODEL = "gemma-3-270m"


def token_counter(model: str = DEFAULT_MODEL, template: str = "gemma") -> Callable[[Sequence[dict[str, Any]]], int]:
    """A function: messages -> their token count under ``template`` with ``model`` 's tokenizer (offline)."""
    from engine.layout import Renderer
    from engine.models.loading import load_tokenizer

    renderer = Renderer(load_tokenizer(model), template)

    def count(messages: Sequence[dict[str, Any]]) -> int:
        return renderer.render(list(messages)).prompt_start

    return count


def measure(tasks: Iterable[Task], count: Callable[[Sequence[dict[str, Any]]], int] | None = None) -> list[Task]:
    """``tasks`` with ``n_tokens`` filled in (``count`` defaults to :func:`token_counter`)."""
    count = count or token_counter()
    return [replace(t, n_tokens=count(t.messages)) for t in tasks]


@dataclass(frozen=True)
class FamilySummary:
    """Tasks, probes and token lengths (min, mean, max; ``None`` when unmeasured) of one family."""

    family: str
    tasks: int
    probes: int
    min_tokens: int | None
    mean_tokens: float | None
    max_tokens: int | None


def summarize(tasks: Iterable[Task]) -> list[FamilySummary]:
    """One :class:`FamilySummary` per family, in order of first appearance."""
    groups: dict[str, list[Task]] = {}
    for t in tasks:
        groups.setdefault(t.family, []).append(t)
    out = []
    for family, group in groups.items():
        lengths = [t.n_tokens for t in group if t.n_tokens is not None]
        out.append(FamilySummary(family, len(group), sum(len(t.probes) for t in group),
                                 min(lengths) if lengths else None,
                                 sum(lengths) / len(lengths) if lengths else None,
                                 max(lengths) if lengths else None))
    return out
