"""Baseline proposers over the synthesis grammar: does the search beat random programs and hill climbing?

Both write programs in the rule grammar of ``search_spaces.cache.rules`` (the same predicates,
actions and composition as ``rsi.cache.synthesis``), and every proposal is tuned by Optuna and
scored by the search like any other candidate. Neither reads hindsight, the screen or any other
feedback beyond what its rule says:

- ``random`` (:class:`RandomProposer`): independent structures, no parent. Each has one to
  :data:`MAX_RANDOM_RULES` rules; a rule is ``drop`` (or, one time in four, ``keep``) when a role or
  tool test and one or two other tests hold (a numeric feature against a threshold that Optuna
  tunes, a flag, or a negation of either). Drawn until a structure renders, passes the checker and
  runs on the smoke episodes, at most :data:`MAX_DRAWS` draws a proposal.
- ``hillclimb`` (:class:`HillClimbProposer`): (1 + lambda) hill climbing, lambda the proposals per
  generation (1: the classic (1+1)). The parent is the incumbent: the best candidate so far on train
  among the seeds and the climb's own children (highest train pass rate, then lowest cost, then
  the earlier one: a child replaces its parent only when it is better). Each child is one random
  edit of the incumbent's structure (add a drop rule, add a keep rule, change a condition, remove a
  rule or a part of one), with the synthesis operators run without hindsight or screen.

Tool names for tool tests come from the smoke episodes' messages (the vocabulary of the tasks, as
for the synthesis proposer), never from their probes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, TypeVar

from rsi.archive import ArchiveView, Record
from rsi.proposers.base import ParentView, Proposal, Proposer
from rsi.proposers.mutation import source_hash
from search_spaces import Episode, check_program, run_program
from search_spaces.cache import rules

MAX_RANDOM_RULES = 3
MAX_DRAWS = 50
FLAG_NAMES = tuple(rules.FLAGS)
TARGET_ROLES = ("tool", "assistant")
HILLCLIMB_EDITS = ("grow", "protect", "mutate", "prune")
"""The synthesis operators a hill-climbing child is made with (no hindsight, no screen)."""
CLIMBERS = ("seed", "hillclimb")
"""Proposers whose candidates can be the climb's incumbent."""
R = TypeVar("R", bound=Record[Any])


def tool_names(episodes: Sequence[Episode]) -> list[str]:
    """The tool names in ``episodes``' tool messages, most tokens first."""
    weight: dict[str, int] = {}
    for ep in episodes:
        for m, n in zip(ep.messages, ep.token_counts):
            name = m.get("name") if m.get("role") == "tool" else None
            if name:
                weight[str(name)] = weight.get(str(name), 0) + int(n)
    return [t for t, _ in sorted(weight.items(), key=lambda x: (-x[1], x[0]))]


def _test(rng: random.Random, name: str) -> dict[str, Any]:
    """One non-target test: a numeric feature against threshold ``name``, a flag, maybe negated."""
    if rng.random() < 0.75:
        feature = rng.choice(list(rules.NUMERIC))
        test: dict[str, Any] = {"f": feature, "op": rng.choice((">=", "<")), "param": f"{name}_{feature}"}
    else:
        test = {"f": rng.choice(FLAG_NAMES)}
    return {"not": test} if rng.random() < 0.15 else test


def random_rule(rng: random.Random, tools: Sequence[str], k: int) -> dict[str, Any]:
    """Rule number ``k`` of a random structure: a target (role or tool) and one or two tests."""
    if tools and rng.random() < 0.4:
        names = rng.sample(list(tools), min(len(tools), rng.randint(1, 2)))
        target: dict[str, Any] = {"f": "tool", "in": sorted(names)}
    else:
        target = {"f": "role", "is": rng.choice(TARGET_ROLES)}
    tests = [_test(rng, f"q{k}{j}") for j in range(rng.randint(1, 2))]
    return {"action": "keep" if rng.random() < 0.25 else "drop", "when": {"all": [target, *tests]}}


def random_structure(rng: random.Random, tools: Sequence[str]) -> dict[str, Any]:
    """A structure drawn from the grammar with no parent (module docstring); thresholds at their defaults."""
    made = [random_rule(rng, tools, k) for k in range(rng.randint(1, MAX_RANDOM_RULES))]
    made.sort(key=lambda r: r["action"] != "keep")  # (a keep rule after a drop rule of the same target is dead)
    return {"rules": made, "reposition": None, "defaults": {}}


def _runs(source: str, smoke: Sequence[Episode]) -> bool:
    return check_program(source).ok and (not smoke or run_program(source, {}, list(smoke)).ok)


class RandomProposer(Proposer):
    """Independent random programs from the grammar (module docstring)."""

    name = "random"

    def __init__(self, smoke: Sequence[Episode]) -> None:
        super().__init__()
        self.smoke = list(smoke)
        self.tools = tool_names(self.smoke)

    def propose(self, parents: Sequence[ParentView], archive: ArchiveView[Record[Any]], n: int,
                rng: random.Random, seen: set[str]) -> list[Proposal]:
        out: list[Proposal] = []
        for _ in range(n):
            for _draw in range(MAX_DRAWS):
                structure = random_structure(rng, self.tools)
                self.stats.attempts += 1
                try:
                    source = rules.render(structure)
                except rules.RuleError:
                    continue
                if source_hash(source) in seen or not _runs(source, self.smoke):
                    continue
                self.stats.valid += 1
                seen.add(source_hash(source))
                out.append(Proposal(source, (), self.name, rules.describe(structure)[:400]))
                break
        return out


def incumbent(archive: ArchiveView[R]) -> R | None:
    """The climb's parent: the best on train among seeds and climbers (module docstring)."""
    pool = [c for c in archive.scored() if c.proposer in CLIMBERS or c.proposer.startswith("hillclimb")]
    if not pool:
        return None
    order = {c.id: k for k, c in enumerate(archive.candidates)}
    return min(pool, key=lambda c: (-c.point[1], c.point[0], order[c.id]))


class HillClimbProposer(Proposer):
    """(1 + lambda) hill climbing over the grammar (module docstring).

    Args:
        smoke: episodes a child must run on.
        source_of: a candidate's program source (by its program hash).
    """

    name = "hillclimb"

    def __init__(self, smoke: Sequence[Episode], source_of: Any) -> None:
        super().__init__()
        from rsi.cache.synthesis import SynthesisProposer

        self.smoke = list(smoke)
        self.source_of = source_of
        self.edits = SynthesisProposer(self.smoke, hindsight=None, screen=None, candidates=1,
                                       tools=tool_names(self.smoke))

    def propose(self, parents: Sequence[ParentView], archive: ArchiveView[Record[Any]], n: int,
                rng: random.Random, seen: set[str]) -> list[Proposal]:
        best = incumbent(archive)
        if best is None:
            return []
        parent = ParentView(best, self.source_of(best.program), {})
        out: list[Proposal] = []
        for _ in range(n):
            for _try in range(4 * len(HILLCLIMB_EDITS)):
                op = rng.choice(HILLCLIMB_EDITS)
                made = self.edits.edit(op, parent, rng, seen)
                self.stats.attempts += 1
                if made is None:
                    continue
                self.stats.valid += 1
                seen.add(source_hash(made[0]))
                out.append(Proposal(made[0], (best.id,), self.name, f"{op}: {made[1]}"[:400]))
                break
        return out
