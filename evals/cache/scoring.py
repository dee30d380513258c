"""Scoring helpers: answer matching, pass rates with Wilson intervals, per-family aggregation.

Matching follows the SQuAD convention: lowercase, drop punctuation, drop the articles a/an/the,
collapse whitespace. A pass rate over zero outcomes is ``nan`` with the interval [0, 1], never 0:
no evidence is not a failure.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

Z95 = 1.959963984540054  # two-sided 95% normal quantile
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lowercase, remove punctuation (any Unicode P* character) and articles, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if not unicodedata.category(ch).startswith("P"))
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> bool:
    """Normalised exact match."""
    return normalize_answer(prediction) == normalize_answer(gold)


def contains_match(prediction: str, gold: str) -> bool:
    """Whether the normalised gold answer occurs in the normalised prediction as whole words.

    An empty gold answer (after normalisation) never matches.
    """
    g = normalize_answer(gold)
    return bool(g) and f" {g} " in f" {normalize_answer(prediction)} "


@dataclass(frozen=True)
class Interval:
    """A confidence interval [low, high]."""

    low: float
    high: float


def wilson_interval(passed: int, total: int, z: float = Z95) -> Interval:
    """The Wilson score interval of ``passed`` successes in ``total`` trials ([0, 1] when total is 0).

    Raises:
        ValueError: for negative counts or ``passed > total``.
    """
    if total < 0 or not 0 <= passed <= total:
        raise ValueError(f"need 0 <= passed <= total, got passed={passed}, total={total}")
    if total == 0:
        return Interval(0.0, 1.0)
    p = passed / total
    denom = 1 + z * z / total
    center = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    low = 0.0 if passed == 0 else max(0.0, center - half)
    high = 1.0 if passed == total else min(1.0, center + half)
    return Interval(low, high)


@dataclass(frozen=True)
class PassRate:
    """``passed`` of ``total`` with its 95% Wilson interval; ``rate`` is nan when ``total`` is 0."""

    passed: int
    total: int

    def __post_init__(self) -> None:
        wilson_interval(self.passed, self.total)  # validates the counts

    @property
    def rate(self) -> float:
        return self.passed / self.total if self.total else math.nan

    @property
    def interval(self) -> Interval:
        return wilson_interval(self.passed, self.total)

    def __str__(self) -> str:
        ci = self.interval
        return f"{self.passed}/{self.total} = {self.rate:.3f} [{ci.low:.3f}, {ci.high:.3f}]"


def pass_rate(outcomes: Iterable[bool]) -> PassRate:
    """The pass rate of a sequence of pass/fail outcomes."""
    flags = [bool(o) for o in outcomes]
    return PassRate(sum(flags), len(flags))


def per_family(results: Iterable[tuple[str, bool]]) -> dict[str, PassRate]:
    """Pass rates per family from ``(family, passed)`` pairs, families in order of first appearance."""
    groups: dict[str, list[bool]] = {}
    for family, ok in results:
        groups.setdefault(family, []).append(bool(ok))
    return {family: pass_rate(flags) for family, flags in groups.items()}
