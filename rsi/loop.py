"""The generation loop of both tracks, and their tuning-only arm.

A track (the cache search, ``rsi.cache.search.Search``; the survival evolution,
``rsi.survival.evolve.SurvivalEvolution``) gives the loop what differs between them (:class:`Track`):
its archive and run directory, how parents are chosen, how one program is tuned and how a
generation closes. The loop owns what is the same: generation ``g``'s seeded ``random.Random``, the
proposals made once and saved before any is tuned (a resume replays them from
``proposals/g<N>.json``), the proposer's stats, the labels ``g<N>-p<i>``, the record of a program
the checker refuses, and the tuning-only arm (:func:`run_arm`: the seed programs tuned again in
new studies until the arm has spent what the generations spent, in an archive of its own).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from rsi.proposers.base import ParentView, Proposal, Proposer
from rsi.proposers.mutation import source_hash
from rsi.proposers.tuning import PROPOSER as ARM
from rsi.proposers.tuning import TuningOnly
from rsi.rundir import RunDir
from search_spaces.sandbox import CheckResult

MAX_ARM_ROUNDS_FACTOR = 4  # the arm stops after this many times the track's generations, budget spent or not


class Track(Protocol):
    """What a search track gives the loop (see the module docstring).

    ``archive`` may be swapped by :func:`arm_archive` while the tuning-only arm runs; ``seen`` holds
    the source hashes a proposer must not propose again.
    """

    archive: Any  # the track's CandidateArchive (Archive, SurvivalArchive)
    files: RunDir
    seen: set[str]

    @property
    def seed(self) -> int: ...

    @property
    def per_generation(self) -> int: ...

    @property
    def generations(self) -> int: ...

    def parents(self) -> list[ParentView]: ...

    def check(self, source: str) -> CheckResult:
        """``source`` checked statically against the track's program API (its ``check_program``)."""

    def proposed(self, proposals: Sequence[Proposal], proposer: Proposer) -> None:
        """Called with a generation's proposals before they are tuned (progress, a line to say)."""

    def tune_program(self, source: str, label: str, g: int, parents: tuple[str, ...], proposer: str,
                     note: str = "") -> None: ...

    def close_generation(self, g: int) -> None: ...

    def refused(self, sha: str, label: str, g: int, parents: tuple[str, ...], proposer: str, reason: str,
                source: str) -> None:
        """Record a program the checker refused (its candidate of the track's type)."""


def generation(track: Track, g: int, proposer: Proposer) -> list[Proposal]:
    """Generation ``g``: parents, proposals (made once, saved, replayed on resume), tuning, close."""
    rng = random.Random(f"{track.seed}-{g}")
    parents = track.parents()
    saved = track.files.proposals_of(g)
    if saved is not None:  # resume: the proposals of this generation were made before
        proposals = [Proposal.from_row(p) for p in saved]
    else:
        track.seen |= {c.program for c in track.archive.candidates}
        proposals = proposer.propose(parents, track.archive, track.per_generation, rng, track.seen)
        track.files.save_proposals(g, [p.to_row() for p in proposals])
        track.files.write("proposer_stats.json", proposer.stats.to_dict())
    track.proposed(proposals, proposer)
    for i, p in enumerate(proposals):
        track.tune_program(p.source, f"g{g}-p{i}", g, p.parents, p.proposer, p.note)
    track.close_generation(g)
    return proposals


def admit(track: Track, source: str, label: str, g: int, parents: tuple[str, ...],
          proposer: str) -> tuple[str, CheckResult] | None:
    """Save ``source`` under its hash and check it; a refused program is recorded (``Track.refused``)
    and ``None`` returned, else ``(sha, check)``."""
    sha = source_hash(source)
    track.seen.add(sha)
    track.files.save_program(sha, source)
    check = track.check(source)
    if not check.ok:
        track.refused(sha, label, g, parents, proposer, check.reason, source)
        return None
    return sha, check


@contextmanager
def arm_archive(track: Track, archive: Any) -> Iterator[None]:
    """``track`` tuning into ``archive`` (its reference front for pruning included) while inside."""
    saved = track.archive
    track.archive = archive
    try:
        yield
    finally:
        track.archive = saved


def run_arm(track: Track, seeds: Sequence[str], seed_source: Callable[[str], str],
            archive: Any, budget: int, spent: Callable[[], int]) -> int:
    """The tuning-only arm: the seed programs tuned again (``TuningOnly``), round by round, into
    ``archive``, until ``spent()`` reaches ``budget`` (or :data:`MAX_ARM_ROUNDS_FACTOR` times the
    track's generations); returns the rounds run. Candidates are labelled ``t<round>-p<i>``."""
    return run_proposer_arm(track, TuningOnly(seeds, seed_source), ARM, "t", archive, budget, spent)


def run_proposer_arm(track: Track, proposer: Proposer, name: str, tag: str, archive: Any, budget: int,
                     spent: Callable[[], int], max_rounds: int | None = None) -> int:
    """An arm of ``proposer`` (which reads no parents: it draws programs, or takes its parent from
    ``archive``), round by round into ``archive`` until ``spent()`` reaches ``budget`` (or
    ``max_rounds``, default :data:`MAX_ARM_ROUNDS_FACTOR` times the track's generations, or a round
    that proposes nothing); returns the rounds run. Candidates are labelled ``<tag><round>-p<i>``,
    recorded as ``name``."""
    rounds = 0
    seen = set(track.seen)
    limit = max_rounds if max_rounds is not None else MAX_ARM_ROUNDS_FACTOR * max(1, track.generations)
    with arm_archive(track, archive):
        while spent() < budget and rounds < limit:
            rounds += 1
            rng = random.Random(f"{track.seed}-{name if name != ARM else 'tuning'}-{rounds}")
            proposals = proposer.propose([], archive, track.per_generation, rng, seen)
            if not proposals:
                break
            for i, p in enumerate(proposals):
                track.tune_program(p.source, f"{tag}{rounds}-p{i}", rounds, p.parents, name, p.note)
                if spent() >= budget:
                    break
    return rounds


__all__ = ["ARM", "Track", "admit", "arm_archive", "generation", "run_arm", "run_proposer_arm"]
