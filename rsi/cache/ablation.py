"""The tuning-only arm of a search (``ablation: true``): does the proposer add anything beyond tuning?

After the generations, the same search tunes its seed programs again, in new Optuna studies (the
proposer ``none``, ``rsi.proposers.tuning``), until this arm has asked the model for as many train
policy-task evaluations as the generations did (``Search.spent``: stored results count, since a
fresh run pays for them). It starts from generation 0 (the seeds as the search tuned them) and
keeps its candidates in an archive of its own (``ablation.json``), so nothing it finds enters the
evolved front. Same seed, same tasks, same cascade, same model budget.

Its choice is made on train as the headline makes every choice: the cheapest candidate of the arm
that matches the full cache on train (``rsi.cache.headline.TrainMatch``), else its most accurate. The
choice is evaluated on held-out and joins the run's archive as the comparator ``tuning-only``
(an expert entry, outside the evolved front), so ``headline.json`` pairs the evolved policy chosen
against it over held-out tasks, and ``akv pool`` pools those rows across runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rsi.archive import Archive, Candidate
from rsi.cache.headline import TrainMatch, choose_on_train, heldout_targets
from rsi.loop import ARM, run_arm
from rsi.metrics import aggregate
from search_spaces import seed_source

if TYPE_CHECKING:
    from rsi.cache.search import Search

ABLATION_FILE = "ablation.json"


@dataclass(frozen=True)
class ArmResult:
    """What the arm spent and chose (``choice``: ``None`` when nothing scored)."""

    budget: int
    spent: int
    rounds: int
    choice: Candidate | None

    def to_dict(self) -> dict[str, Any]:
        return {"budget_train_evaluations": self.budget, "spent_train_evaluations": self.spent,
                "rounds": self.rounds, "choice": self.choice.to_dict() if self.choice else None}


def run_tuning_arm(search: Search) -> ArmResult:
    """Run the arm on ``search`` (module docstring); writes ``ablation.json``."""
    cfg = search.config
    budget = search.spent.get("generations", 0)
    arm = Archive([c for c in search.archive.candidates if c.generation == 0 and not c.expert])
    search.progress.replan(budget + len(search.heldout))  # (the plan of a search does not count the arm)
    rounds = run_arm(search, cfg.seeds, seed_source, arm, budget, lambda: search.spent.get(ARM, 0))
    spent = search.spent.get(ARM, 0)
    search._say(f"tuning-only arm: {spent} train evaluations in {rounds} rounds (the generations spent {budget})")
    full = next((c for c in search.archive.candidates if c.expert and c.spec == "full" and c.train is not None), None)
    match = TrainMatch(search._train_results, cfg.bootstrap_samples, cfg.seed)
    choice = None
    picked = choose_on_train(arm.scored(), full, match) if full is not None else None
    if picked is not None:
        c = picked[0]
        held = aggregate(search.evaluate(search._spec(c), search.heldout))
        choice = Candidate(f"{ARM}:{c.id}", c.program, ARM, c.params, 0, (c.id,), ARM, train=c.train, heldout=held,
                           expert=True, spec=c.spec,
                           reason=f"the tuning-only arm's choice: {c.label} ("
                                  f"{'matched' if picked[1] else 'did not match'} the full cache on train), {spent} "
                                  f"train evaluations against the generations' {budget}")
        search.archive.add(choice)
        for e in heldout_targets(search.archive.front(), [choice], 0, match):  # its match among the evolved
            if e.heldout is None:
                search.archive.with_heldout(e.id, aggregate(search.evaluate(search._spec(e), search.heldout)))
        search._say(f"  {ARM:14s} {c.label}: train pass {c.point[1]:.3f} cost {c.point[0]:.4f}c | held-out pass "
                    f"{held.pass_rate:.3f} cost {held.cost_cents_mean:.4f}c")
    result = ArmResult(budget, spent, rounds, choice)
    search.files.write(ABLATION_FILE, result.to_dict() | {"candidates": [c.to_dict() for c in arm.candidates]})
    return result
