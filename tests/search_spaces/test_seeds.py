"""Seed programs: every built-in cache family as program source, with the same decisions and space."""

from __future__ import annotations

import optuna
import pytest

from search_spaces import (
    FAMILIES,
    SEEDS,
    Episode,
    Policy,
    UnknownPolicyError,
    check_program,
    estimate_tokens,
    get_policy,
    run_program,
    seed_source,
    suggest_params,
)
from tests.search_spaces.trajectories import make_trajectory, recorded

CACHE_FAMILIES = [name for name, f in FAMILIES.items() if f.kind == "cache" and f.seed is not None]
# (``schedule`` replays a given schedule: it has no program form and nothing to tune)


def _episodes() -> list[Episode]:
    trajs = [*recorded(), make_trajectory(10, 7, 5), make_trajectory(16, 8, 3)]
    out = []
    for k, msgs in enumerate(trajs):
        counts = [c * (1 + (i + k) % 3) for i, c in enumerate(estimate_tokens(msgs))]
        relevance = [round(((i * 37 + k) % 100) / 100, 2) for i in range(len(msgs))]
        out.append(Episode.of(msgs, counts, relevance=relevance))
    return out


EPISODES = _episodes()


def test_every_cache_family_has_a_checked_seed():
    assert {FAMILIES[n].seed for n in CACHE_FAMILIES} == set(SEEDS)
    for name in SEEDS:
        r = check_program(seed_source(name))
        assert r.ok, (name, r.reason)
        assert dict(r.defaults or {}) == get_policy(name).params  # same parameters, same defaults
    with pytest.raises(UnknownPolicyError, match="rolling_drop"):
        seed_source("rolling")


def _sampled_params(name: str, n: int) -> list[dict]:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=11))
    out = [get_policy(name).params]
    for _ in range(n):
        trial = study.ask()
        params = FAMILIES[name].space(trial)
        # the seed's own space, run in the sandbox, draws the same parameters from the same answers
        seed = suggest_params(seed_source(name), optuna.trial.FixedTrial(trial.params))
        assert seed.ok, seed.reason
        assert dict(seed.params or {}) == params
        study.tell(trial, 0.0)
        out.append(params)
    return out


@pytest.mark.parametrize("name", CACHE_FAMILIES)
def test_seed_decides_like_the_builtin_family(name):
    n_params = {"full": 0, "thinking_drop": 3}.get(name, 5)
    budgets = {"budget_tokens": 300} if name == "scored_drop" else {}
    for params in _sampled_params(name, n_params) + ([{**get_policy(name).params, **budgets}] if budgets else []):
        builtin = get_policy(name, **params).run_episodes(EPISODES)
        seeded = run_program(seed_source(name), params, EPISODES)
        assert seeded.ok, seeded.reason
        assert [[d.wire for d in ep] for ep in seeded.decisions] == [[d.wire for d in ep] for ep in builtin]


def test_seed_and_builtin_policies_are_interchangeable():
    params = {"keep_tool_responses": 3, "trigger": "calls", "every_calls": 2}
    builtin = get_policy("rolling_drop", **params)
    program = Policy.from_program(seed_source("rolling_drop"), params)
    via_registry = get_policy("program", source=seed_source("rolling_drop"), **params)
    msgs = recorded()[0]
    counts = estimate_tokens(msgs)
    assert program.kind == builtin.kind == "cache"
    assert program.params == via_registry.params == builtin.params
    assert program.decide(msgs, token_counts=counts) == builtin.decide(msgs, token_counts=counts)
    assert via_registry.decide(msgs, token_counts=counts) == builtin.decide(msgs, token_counts=counts)
    assert [d.wire for d in program.run_episode(msgs, token_counts=counts)] == [
        d.wire for d in builtin.run_episode(msgs, token_counts=counts)]
