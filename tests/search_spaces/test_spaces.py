"""Optuna parameter spaces: every family's space drives a real study; program spaces run sandboxed."""

from __future__ import annotations

import time

import optuna
import pytest

from search_spaces import FAMILIES, SandboxLimits, Status, estimate_tokens, get_policy, seed_source, suggest_params
from search_spaces.cache.program import ProgramPolicy
from search_spaces.sandbox import run_child
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
    if name not in ("full", "schedule"):  # (these two have nothing to tune)
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


# Bounds Optuna cannot hold used to raise OverflowError/ValueError/InvalidOperation in the host
# (out of tune(): `akv search` exited 1, and every --resume crashed at the same point).
@pytest.mark.parametrize(("call", "reason"), [
    ("trial.suggest_int('k', 0, 10 ** 400)", "high must be within +-2**53"),
    ("trial.suggest_int('k', -10 ** 400, 0)", "low must be within +-2**53"),
    ("trial.suggest_int('k', 0, 10, step=10 ** 400)", "step must be within +-2**53"),
    ("trial.suggest_int('k', 0, 10, step=0)", "step >= 1"),
    ("trial.suggest_float('k', 0, math.inf)", "high must be a finite number, got inf"),
    ("trial.suggest_float('k', -math.inf, math.inf)", "low must be a finite number"),
    ("trial.suggest_float('k', -1e308, 1e308)", "finite range"),
    ("trial.suggest_float('k', 0.0, 1.0, step=math.nan)", "step must be a finite number, got nan"),
    ("trial.suggest_float('k', 0.0, 1.0, step=-0.5)", "step must be positive"),
    ("trial.suggest_categorical('k', [1, 10 ** 400])", "a choice must be within +-2**53"),
    ("trial.suggest_categorical('k', [0.5, math.nan])", "a choice must be a finite number"),
    ("trial.suggest_categorical('k', list(range(5000)))", "choices must be a list of 1 to 1000"),
    ("trial.suggest_int('k' * 5000, 0, 1)", "a parameter name must be"),
])
def test_bounds_optuna_cannot_hold_are_invalid_not_a_crash(call, reason):
    source = "import math\n" + SPACE.format(f"    return {{'k': {call}}}")
    for trial in (optuna.create_study().ask(), optuna.trial.FixedTrial({"k": 0})):
        r = suggest_params(source, trial, SandboxLimits(cpu_seconds=2, wall_seconds=10))
        assert r.status is Status.INVALID and reason in r.reason and r.reason.startswith("space(trial)"), r.reason


def test_a_space_that_never_stops_suggesting_is_cut_at_the_parameter_limit():
    body = "    i = 0\n    while True:\n        trial.suggest_int('k' + str(i), 0, 1)\n        i += 1"
    start = time.monotonic()
    r = suggest_params(SPACE.format(body), optuna.create_study().ask(), SandboxLimits(max_params=50))
    assert r.status is Status.INVALID and "more than 50 parameters" in r.reason, r.reason
    assert time.monotonic() - start < 10  # not the 20 s CPU / 60 s wall limit


def _space_job(body: str) -> dict:
    """A ``space`` job whose program writes to the dialog itself (the checker is skipped on purpose)."""
    grab = ("    g = [c for c in ().__class__.__bases__[0].__subclasses__() if c.__name__ == '_wrap_close'][0]"
            ".__init__.__globals__\n")
    return {"mode": "space", "source": f"def space(trial):\n{grab}{body}\n    return {{}}\n"}


@pytest.mark.parametrize("line", ['{"ask": 5}', "[1]", "not json"])
def test_a_child_line_that_is_not_a_question_stops_the_child(line):
    body = f"    g['sys'].stdout.write({line!r} + '\\n')\n    g['sys'].stdout.flush()"
    out = run_child(_space_job(body), SandboxLimits(cpu_seconds=2, wall_seconds=10), answer=lambda spec: 1)
    assert out.status is Status.INVALID and out.reason.startswith("space(trial)"), out.reason
