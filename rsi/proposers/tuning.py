"""The tuning-only proposer (``proposer: none``): no new program, the seed programs tuned again.

Each generation "proposes" the seed programs, round robin, ``per_generation`` of them; the search
tunes each in a new Optuna study (its label, and so its sampler seed, differ per generation), so
the parameters explored grow with the generations while the programs never change. It is the
ablation of every other proposer: the same loop, the same budget, no structure.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from rsi.archive import ArchiveView, Record
from rsi.proposers.base import ParentView, Proposal, Proposer
from search_spaces import seed_source

PROPOSER = "tuning-only"


class TuningOnly(Proposer):
    """Proposes the seed programs again (module docstring).

    Args:
        seeds: names of the seed programs.
        source: a seed's program source by name (the cache track's seeds by default; the survival
            track gives ``search_spaces.survival.survival_seed_source``).
    """

    name = "none"

    def __init__(self, seeds: Sequence[str], source: Callable[[str], str] = seed_source) -> None:
        super().__init__()
        if not seeds:
            raise ValueError("the tuning-only proposer needs at least one seed program")
        self.seeds = list(seeds)
        self.source = source
        self.turn = 0

    def propose(self, parents: Sequence[ParentView], archive: ArchiveView[Record[Any]], n: int,
                rng: random.Random, seen: set[str]) -> list[Proposal]:
        out = []
        for _ in range(n):
            name = self.seeds[self.turn % len(self.seeds)]
            self.turn += 1
            self.stats.attempts += 1
            self.stats.valid += 1
            out.append(Proposal(self.source(name), (), PROPOSER, f"seed {name} tuned again in a new study"))
        return out
