"""The entities of one ``mixed`` task: names and numbers of one split, each number printed once.

Every value a task prints comes from the half of a pool that belongs to its split (names by
alternation, numbers by range), so train and held-out share no entity. A number drawn with
:meth:`MixedWorld.number` is never drawn again in the task, so an answer occurs only where the
kind puts it; :meth:`MixedWorld.candidates` gives an answer's distractors: other numbers of its
kind (same unit, similar size) the task has already printed.

Not for: the ``default`` and ``horizon`` suites (``evals.tasks.world`` serves those).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from evals.tasks.pools import SPLITS, alternate


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


SOURCES = _words("""Harrow Calder Brightwater Fenwick Ashgrove Marlow Thornfield Kessler Linwood Redmere Oakridge Halden
Westcott Pemberton Ravensworth Sterling Whitlock Ellery Fairhaven Holbrook Lindqvist Morrow Norcross
Quillon Rosenthal Selwyn Tamsin Underwood Vantor Wexley Yarrow Zellner Albright Bexley Corwin
Dunmore Everly Foxley Garland Hensley""")
SOURCE_KINDS = ("Institute", "Review", "Labs", "Survey Group", "Observatory", "Council")
WAREHOUSES = _words("""Kestrel Osprey Heron Falcon Plover Merlin Condor Puffin Gannet Harrier Ibis Jacana Kite Lapwing
Magpie Nightjar Oriole Pelican Quail Raven Sandpiper Tern Vireo Warbler Bittern Curlew Dunlin Egret
Fulmar Godwit Avocet Kingfisher""")
CARRIERS = _words("""Nordline Freightway Bluewater Cargofix Alpenrail Tidemark Swiftpath Ironbridge Coastway Meridian
Polaris Keystone Redfern Silverline Harbourlink Crestmoor Larkspur Oakhaven Brightwell Fernwood
Granitex Halcyon Ironwood Juniper Kingsway Lodestar Marlowe Northgate""")
SERVICES = _words("""billing ledger search auth catalog payments inventory notify profile checkout pricing
routing ingest export invoice session media archive metrics quota gateway scheduler webhook""")
HOST_PREFIXES = ("db", "app", "cache", "node", "srv", "vm", "edge", "batch")
MODULES = _words("""retry limits pool cache queue breaker backoff shard replica quota window batch stream index compact
session budget ledger""")

# Numeric ranges: (train, held-out), disjoint, 3-4 digits (never a year: no 19xx or 20xx).
RANGES: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "ms": ((110, 549), (550, 989)),
    "count": ((2110, 5499), (5500, 8990)),
    "kb": ((310, 649), (650, 979)),
    "id": ((31000, 64999), (65000, 98999)),
}


class MixedWorld:
    """Names and never-repeated numbers for one task of one split (module docstring)."""

    def __init__(self, split: str, rng: random.Random) -> None:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
        self.split, self.rng = split, rng
        self._used: set[str] = set()
        self.printed: dict[str, list[str]] = {}  # unit -> numbers drawn, in order
        self._names: dict[str, list[str]] = {}
        self._left: dict[str, list[str]] = {}

    def number(self, unit: str) -> str:
        """A number of ``unit`` (a key of :data:`RANGES`) not drawn before in this task.

        Raises:
            RuntimeError: the task has printed every number of the range (a kind drawing too many).
        """
        if unit not in self._left:
            low, high = RANGES[unit][SPLITS.index(self.split)]
            pool = [str(v) for v in range(low, high + 1) if not str(v).startswith(("19", "20"))]
            self.rng.shuffle(pool)
            self._left[unit] = pool
        left = self._left[unit]
        while left:
            value = left.pop()
            if value not in self._used:
                self._used.add(value)
                self.printed.setdefault(unit, []).append(value)
                return value
        raise RuntimeError(f"no unused {unit} number left in this task")

    def name(self, pool: str, words: Sequence[str]) -> str:
        """A name of ``pool`` (this split's half of ``words``) not handed out before in this task."""
        taken = self._names.setdefault(pool, [])
        free = [w for w in alternate(words, self.split) if w not in taken]
        value = self.rng.choice(free)
        taken.append(value)
        return value

    def source(self) -> str:
        return f"{self.name('source', SOURCES)} {self.rng.choice(SOURCE_KINDS)}"

    def host(self) -> str:
        prefix = self.rng.choice(alternate(HOST_PREFIXES, self.split))
        return self._fresh(lambda: f"{prefix}-{self.rng.randint(11, 99)}", "host")

    def instance(self) -> str:
        """A service instance such as ``ledger-07`` (an entity policies can see: letters, dash, digits)."""
        return self._fresh(lambda: f"{self.rng.choice(alternate(SERVICES, self.split))}-{self.rng.randint(10, 99):02d}",
                           "instance")

    def _fresh(self, draw: Callable[[], str], what: str) -> str:
        """A value of ``draw`` not handed out before in this task.

        Raises:
            RuntimeError: 200 draws in a row were taken (a kind asking for far more than it should).
        """
        for _ in range(200):
            value = draw()
            if value not in self._used:
                self._used.add(value)
                return value
        raise RuntimeError(f"no unused {what} left in this task")

    def candidates(self, answer: str, unit: str, before: Sequence[str], n: int = 6) -> tuple[str, ...]:
        """``answer`` and up to ``n - 1`` other printed values of ``unit`` found in ``before`` (the text
        the probe follows), of its length (numbers: as many digits) where there are enough, drawn at
        random, in random order."""
        text = "\n".join(before)
        others = [v for v in dict.fromkeys(self.printed.get(unit, [])) if v != answer and _word_in(v, text)]
        self.rng.shuffle(others)
        others.sort(key=lambda v: abs(len(v) - len(answer)))  # (stable: random within a length)
        picked = [answer, *others[: n - 1]]
        self.rng.shuffle(picked)
        return tuple(picked)


def _word_in(value: str, text: str) -> bool:
    from evals.tasks.schema import mentions

    return mentions(text, value)
