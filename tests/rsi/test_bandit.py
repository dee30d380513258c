"""The operator bandit: UCB1 against its regret bound, cold start and ties as documented, rewards
rebuilt from the archive, and the mutation proposer following the record."""

from __future__ import annotations

import math
import random

import pytest

from rsi.archive import Status
from rsi.cache.archive import Archive, Candidate
from rsi.cache.metrics import Metrics
from rsi.proposers.bandit import UCB1, bandit_from_archive, offspring_rewards, operator_table, reward
from rsi.proposers.base import ParentView
from rsi.proposers.mutation import OPERATORS, MutationProposer
from search_spaces import Episode, default_token_counts, seed_source
from tests.search_spaces.trajectories import make_trajectory


def test_cold_start_pulls_every_arm_once_in_order() -> None:
    b = UCB1(("a", "b", "c"))
    order = []
    for _ in range(3):
        arm = b.choose()
        order.append(arm)
        b.update(arm, 0.0)
    assert order == ["a", "b", "c"]


def test_ties_go_to_the_arm_listed_first() -> None:
    b = UCB1(("x", "y"))
    b.update("x", 0.5)
    b.update("y", 0.5)
    assert b.choose() == "x"
    b2 = UCB1(("y", "x"), pulls=dict(b.pulls), total=dict(b.total))
    assert b2.choose() == "y"


def test_score_is_the_ucb1_formula() -> None:
    b = UCB1(("a", "b"), exploration=1.0)
    for r in (1.0, 0.0, 1.0):
        b.update("a", r)
    b.update("b", 0.25)
    assert b.score("a") == pytest.approx(2 / 3 + math.sqrt(2 * math.log(4) / 3))
    assert b.score("b") == pytest.approx(0.25 + math.sqrt(2 * math.log(4) / 1))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_clearly_better_operator_wins_within_the_regret_bound(seed: int) -> None:
    # Bernoulli arms: "good" pays with p=0.8, the others with p=0.2 (gap 0.6). Auer et al. (2002),
    # Theorem 1: E[pulls of a worse arm after n rounds] <= 8 ln n / gap^2 + 1 + pi^2 / 3.
    rng = random.Random(seed)
    p = {"bad1": 0.2, "good": 0.8, "bad2": 0.2}
    b = UCB1(tuple(p))
    n = 2000
    last = []
    for t in range(n):
        arm = b.choose()
        b.update(arm, 1.0 if rng.random() < p[arm] else 0.0)
        if t >= n - 200:
            last.append(arm)
    bound = 8 * math.log(n) / 0.6**2 + 1 + math.pi**2 / 3
    assert b.pulls["bad1"] <= bound and b.pulls["bad2"] <= bound
    assert b.pulls["good"] >= n - 2 * bound
    assert last.count("good") / len(last) >= 0.9


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="distinct arms"):
        UCB1(("a", "a"))
    with pytest.raises(ValueError, match="exploration"):
        UCB1(("a",), exploration=float("nan"))
    b = UCB1(("a",))
    with pytest.raises(ValueError, match="unknown arm 'z'"):
        b.update("z", 0.5)
    with pytest.raises(ValueError, match=r"\[0, 1\], got 1.5"):
        b.update("a", 1.5)


def _m(cost: float, pass_rate: float) -> Metrics:
    return Metrics(pass_rate, cost, 2, 10)


def _c(cid: str, g: int, op: str, cost: float | None, pass_rate: float | None, program: str | None = None) -> Candidate:
    if cost is None or pass_rate is None:
        return Candidate(cid, program or cid, cid, {}, g, proposer=f"mutation:{op}", status=Status.REFUSED,
                         reason="refused")
    return Candidate(cid, program or cid, cid, {}, g, proposer=f"mutation:{op}", train=_m(cost, pass_rate))


def _archive() -> Archive:
    a = Archive()
    a.add(Candidate("e", "full", "expert:full", {}, 0, proposer="expert", train=_m(1.0, 0.9), expert=True,
                    spec="full"))
    a.add(Candidate("s", "s", "seed", {}, 0, proposer="seed", train=_m(0.8, 0.5)))
    a.add(_c("g1a", 1, "constant", 0.9, 0.4))   # dominated by the seed
    a.add(_c("g1b", 1, "fragment", 0.6, 0.5))   # enters the front, gains hypervolume
    a.add(_c("g1c", 1, "compare", None, None))  # refused
    a.add(_c("g1d", 1, "fragment", 0.7, 0.45, program="g1b"))  # same program as g1b: counts once
    return a


def test_rewards_rebuilt_from_the_archive_match_the_formula() -> None:
    a = _archive()
    ref = 1.1
    out = {o.operator: o for o in offspring_rewards(a, ref)}
    assert len(offspring_rewards(a, ref)) == 3
    assert out["compare"].reward == 0.0 and not out["compare"].scored
    assert out["constant"].reward == pytest.approx(0.4) and not out["constant"].entered_front
    base = (1.1 - 0.8) * 0.5
    gain = ((1.1 - 0.6) * 0.5 - base) / base
    assert out["fragment"].hv_gain == pytest.approx(gain)
    assert out["fragment"].reward == pytest.approx(reward(True, True, gain)) == pytest.approx(1.0)
    b = bandit_from_archive(OPERATORS, a, ref)
    assert b.pulls == {"constant": 1, "fragment": 1, "compare": 1}
    rows = {r["operator"]: r for r in operator_table(a, ref)}
    assert rows["fragment"]["front_rate"] == 1.0 and rows["compare"]["valid_rate"] == 0.0


def test_reward_saturates_and_is_zero_without_a_score() -> None:
    assert reward(False, True, 1.0) == 0.0
    assert reward(True, False, 0.0) == pytest.approx(0.4)
    assert reward(True, True, 0.025) == pytest.approx(0.85)
    assert reward(True, True, 3.0) == pytest.approx(1.0)


def _parents(a: Archive) -> list[ParentView]:
    return [ParentView(a.get("s"), seed_source("rolling_drop"))]


def test_mutation_proposer_follows_the_record_and_is_deterministic() -> None:
    msgs = make_trajectory(10, seed=2)
    smoke = [Episode.of(msgs, default_token_counts(msgs))]
    a = _archive()
    # Every operator has a record; fragment's offspring all entered the front, the others failed.
    for i, op in enumerate(OPERATORS):
        for k in range(4):
            if op == "fragment":
                a.add(_c(f"f{i}{k}", 1, op, 0.5 - 0.01 * k, 0.5 + 0.01 * k))
            else:
                a.add(_c(f"x{i}{k}", 1, op, None, None))
    runs = []
    for _ in range(2):
        prop = MutationProposer(smoke)
        out = prop.propose(_parents(a), a, 3, random.Random(5), set())
        runs.append([(p.proposer, p.source) for p in out])
    assert runs[0] == runs[1]
    assert [p for p, _ in runs[0]] == ["mutation:fragment"] * 3
    assert prop.stats.operators["fragment"] == {"attempts": 3, "valid": 3}


def test_mutation_proposer_cold_start_tries_operators_in_order() -> None:
    msgs = make_trajectory(10, seed=2)
    smoke = [Episode.of(msgs, default_token_counts(msgs))]
    a = Archive()
    a.add(Candidate("s", "s", "seed", {}, 0, proposer="seed", train=_m(0.8, 0.5)))
    prop = MutationProposer(smoke)
    out = prop.propose(_parents(a), a, 2, random.Random(1), set())
    # rolling_drop has numbers to change and comparisons to flip: the first two arms apply.
    assert [p.proposer for p in out] == ["mutation:constant", "mutation:compare"]
