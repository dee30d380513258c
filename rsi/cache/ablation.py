"""The baseline arms of a search (``ablation``): does the proposer add anything beyond tuning, random
programs or hill climbing?

After the generations, the same search runs each arm of ``SearchConfig.arms`` in turn, until that
arm has asked the model for as many train policy-task evaluations as the generations did (the
ledger's ``rsi.cache.evaluations.Evaluations.spent``: stored results count, since a fresh run pays
for them; an arm whose rounds run out, :data:`PROGRAM_ARM_ROUNDS` per generation for the
program-writing arms, stops early and says so). Every arm starts from generation 0 (the seeds as
the search tuned them) and keeps its candidates in an archive of its own (``ablation.json``), so
nothing it finds enters the evolved front. Same seed, same tasks, same cascade and frame guard,
same model budget, same tuning of each candidate:

- ``tuning-only``: the seed programs tuned again in new studies (the proposer ``none``,
  ``rsi.proposers.tuning``); candidates ``t<round>-p<i>``.
- ``random``: independent programs from the synthesis grammar (``rsi.cache.baselines``); ``r<round>-p<i>``.
- ``hillclimb``: (1 + per_generation) hill climbing over the grammar; ``h<round>-p<i>``.

Each arm's choice is made on train as the headline makes every choice: the cheapest candidate of
the arm that matches the full cache on train (``rsi.cache.headline.TrainMatch``), else its most
accurate. The choice joins the run's archive as a comparator named after the arm (an expert entry,
outside the evolved front); it is scored on held-out with the other frozen picks
(``rsi.cache.protocol``), so ``headline.json`` pairs the evolved policy against it over held-out
tasks, and ``akv pool`` pools those rows across runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rsi.cache.archive import Archive, Candidate
from rsi.cache.config import SearchConfig
from rsi.cache.evaluations import Evaluations
from rsi.cache.headline import TrainMatch, choose_on_train
from rsi.loop import ARM, Track, run_arm, run_proposer_arm
from search_spaces import Episode, seed_source

ABLATION_FILE = "ablation.json"
TAGS = {ARM: "t", "random": "r", "hillclimb": "h"}
"""Arm -> the letter of its candidates' labels."""
PROGRAM_ARM_ROUNDS = 25
"""Rounds per generation a program-writing arm (random, hillclimb) may run to spend its budget: the
cascade prunes most of their programs at zero forwards, so they need more proposals than the
generations made to ask the model as often."""


@dataclass(frozen=True)
class ArmResult:
    """What an arm spent and chose (``choice``: ``None`` when nothing scored)."""

    arm: str
    budget: int
    spent: int
    rounds: int
    choice: Candidate | None
    candidates: tuple[Candidate, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "budget_train_evaluations": self.budget, "spent_train_evaluations": self.spent,
                "rounds": self.rounds, "choice": self.choice.to_dict() if self.choice else None,
                "candidates": [c.to_dict() for c in self.candidates]}


def run_arms(track: Track, config: SearchConfig, evals: Evaluations, smoke: Sequence[Episode],
             say: Callable[[str], None]) -> list[ArmResult]:
    """Run every arm of ``config.arms`` (module docstring) on ``track`` (the search: it tunes each
    program), counting in ``evals``' ledger; writes ``ablation.json``: the tuning-only arm's fields at
    the top level (as runs before the other arms wrote it) and ``arms``, one object per arm."""
    results = [run_arm_of(track, config, evals, smoke, say, arm) for arm in config.arms]
    first = next((r for r in results if r.arm == ARM), results[0])
    track.files.write(ABLATION_FILE, first.to_dict() | {"arms": [r.to_dict() for r in results]})
    return results


def _proposer(track: Track, smoke: Sequence[Episode], arm: str) -> Any:
    from rsi.cache.baselines import HillClimbProposer, RandomProposer

    if arm == "random":
        return RandomProposer(smoke)
    return HillClimbProposer(smoke, track.files.program)


def run_arm_of(track: Track, config: SearchConfig, evals: Evaluations, smoke: Sequence[Episode],
               say: Callable[[str], None], arm: str) -> ArmResult:
    """One arm (module docstring): its rounds on ``track`` (the phase ``arm`` of ``evals``' ledger),
    then its choice on train, which joins ``track``'s archive; ``smoke``: the episodes the
    program-writing arms fingerprint on."""
    cfg = config
    evals.phase = arm
    budget = evals.spent.get("generations", 0)
    archive = Archive([c for c in track.archive.candidates if c.generation == 0 and not c.expert])
    evals.progress.replan(budget)  # (the plan of a search does not count the arms' train evaluations)
    spent_of = lambda: evals.spent.get(arm, 0)  # noqa: E731
    if arm == ARM:
        rounds = run_arm(track, cfg.seeds, seed_source, archive, budget, spent_of)
    else:
        rounds = run_proposer_arm(track, _proposer(track, smoke, arm), arm, TAGS[arm], archive, budget, spent_of,
                                  max_rounds=PROGRAM_ARM_ROUNDS * max(1, cfg.generations))
    spent = spent_of()
    short = "" if spent >= budget else " (it ran out of rounds first)"
    say(f"{arm} arm: {spent} train evaluations in {rounds} rounds (the generations spent {budget}){short}")
    full = next((c for c in track.archive.candidates if c.expert and c.spec == "full" and c.train is not None), None)
    match = TrainMatch(evals.train_results, cfg.bootstrap_samples, cfg.seed)
    choice = None
    picked = choose_on_train(archive.scored(), full, match) if full is not None else None
    if picked is not None:
        c = picked[0]
        choice = Candidate(f"{arm}:{c.id}", c.program, arm, c.params, 0, (c.id,), arm, train=c.train,
                           expert=True, spec=c.spec, size=c.size,
                           reason=f"the {arm} arm's choice: {c.label} ("
                                  f"{'matched' if picked[1] else 'did not match'} the full cache on train), {spent} "
                                  f"train evaluations against the generations' {budget}")
        track.archive.add(choice)
        say(f"  {arm:14s} {c.label}: train pass {c.point[1]:.3f} cost {c.point[0]:.4f}c")
    return ArmResult(arm, budget, spent, rounds, choice, tuple(archive.candidates))
