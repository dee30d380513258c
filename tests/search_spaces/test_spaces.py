"""Optuna parameter spaces: every family's space drives a real study; program spaces run sandboxed."""

from __future__ import annotations

import optuna
import pytest

from search_spaces import FAMILIES, SandboxLimits, Status, estimate_tokens, get_policy, seed_source, suggest_params
from search_spaces.program import ProgramPolicy
from tests.search_spaces.trajectories import recorded

optuna.logging.set_verbosity(optuna.logging.WARNING)
MSGS = recorded()[1]
COUNTS = [3 * c for c in estimate_tokens(MSGS)]
RELEVANCE = [0.5] * len(MSGS)


def _live_tokens(policy) -> float:
    """A cost-like objective: tokens the model attends to at the last request."""
    d = policy.decide(MSGS, token_counts=COUNTS, relevance=RELEVANCE)
    if policy.kind == "text":
        return float(sum(estimate_tokens(d["messages"])))
    dropped = {i for ids in d.get("drop_message", {}).values() for i in ids}
    return float(sum(c for i, c in enumerate(COUNTS) if i not in dropped))


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_space_drives_a_real_study(name):
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=3))
    seen = []

    def objective(trial: optuna.Trial) -> float:
        params = FAMILIES[name].space(trial)
        policy = get_policy(name, **params)  # every drawn point is a valid parameter set
        seen.append(policy.params)
        return _live_tokens(policy)

    study.optimize(objective, n_trials=8)
    assert len(study.trials) == 8 and all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    if name != "full":
        assert len({tuple(sorted(p.items())) for p in seen}) > 1  # the space is explored
        assert study.best_value <= _live_tokens(get_policy("full"))


def test_program_space_runs_in_the_sandbox_with_a_real_study():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=5))
    policy = ProgramPolicy(seed_source("rolling_drop"), {})
    for _ in range(3):
        trial = study.ask()
        params = policy.space(trial)
        # only the parameters the branch reached were drawn, plus the space-only ratio
        assert set(trial.params) - set(params) <= {"target_ratio"}
        value = _live_tokens(ProgramPolicy(seed_source("rolling_drop"), params))
        study.tell(trial, value)
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)


SPACE = "def decide(request, params):\n    return request.plan()\n\n\ndef space(trial):\n{}\n"


@pytest.mark.parametrize(("body", "status", "reason"), [
    ("    return {'k': trial.suggest_int('k', 5, 1)}", Status.ERROR, "low <= high"),
    ("    return {'k': trial.suggest_float('k', 0.0, 1.0, log=True)}", Status.INVALID, "'k'"),
    ("    a = trial.suggest_int('k', 1, 2)\n    return {'k': trial.suggest_int('k', 1, 2)}", Status.ERROR, "distinct"),
    ("    while True:\n        pass", Status.TIMEOUT, "CPU time limit"),
    ("    return [1]", Status.ERROR, "must return a dict"),
    ("    import os\n    return {}", Status.REFUSED, "import of 'os'"),
])
def test_bad_spaces_are_recorded_failures(body, status, reason):
    trial = optuna.create_study().ask()
    r = suggest_params(SPACE.format(body), trial, SandboxLimits(cpu_seconds=1, wall_seconds=10))
    assert r.status is status and reason in r.reason, r.reason
    assert r.reason.startswith("space(trial)") or status is Status.REFUSED
