"""A program's ``space`` can fail in every way without taking a search down.

Suggestions Optuna cannot hold (``suggest_int(k, 0, 10**400)``, infinite or NaN float bounds) used
to raise OverflowError/ValueError in the host, out of ``tune()``: ``akv search`` exited 1 and every
``--resume`` crashed at the same point. Each is now a failed trial with its reason, on every path a
program reaches ``tune()`` (generation 0 and ``seed_from`` here; proposals take the same ``_tune``).
"""

from __future__ import annotations

import json

import pytest

from rsi.archive import Status
from rsi.cache.archive import Archive
from rsi.cache.search import Search
from rsi.cache.tuning import tune
from rsi.tracking import Tracker
from tests.rsi.conftest import tiny_config

HEAD = "import math\n\n\ndef decide(request, params):\n    return request.plan()\n\n\ndef space(trial):\n"
SPACES = {
    "huge_int": "    return {'k': trial.suggest_int('k', 0, 10 ** 400)}\n",
    "inf_float": "    return {'k': trial.suggest_float('k', 0, math.inf)}\n",
    "nan_step": "    return {'k': trial.suggest_float('k', 0.0, 1.0, step=math.nan)}\n",
    "endless": "    i = 0\n    while True:\n        trial.suggest_int('k' + str(i), 0, 1)\n        i += 1\n",
    "raises": "    return {'k': 1 / 0}\n",
}


@pytest.mark.parametrize("name", list(SPACES))
def test_tune_records_a_failing_space_as_failed_trials(name):
    def evaluate(params, tasks):
        raise AssertionError("a failed space must not be evaluated")

    result = tune(HEAD + SPACES[name], "s", storage=None, sampler="tpe", seed=1,
                  n_trials=2, tasks=[], fidelity_tasks=0, evaluate=evaluate, reference=lambda tasks: [])
    assert result.failed and len(result.trials) == 2
    assert all(t.state == "failed" and t.reason.startswith("space(trial)") for t in result.trials), result.trials
    if name == "endless":
        assert "more than 256 parameters" in result.trials[0].reason


def test_a_search_survives_hostile_spaces_and_resumes(tmp_path):
    earlier = tmp_path / "earlier"
    (earlier / "programs").mkdir(parents=True)
    rows = []
    crashing = {k: v for k, v in SPACES.items() if k != "endless"}  # endless: slow on sqlite, tested above
    for name, body in crashing.items():
        sha = f"{name}0000"
        (earlier / "programs" / f"{sha}.py").write_text(HEAD + body)
        rows.append({"expert": False, "label": name, "program": sha})
    (earlier / "pareto.json").write_text(json.dumps(rows))
    config = tiny_config(seeds=[], experts=[], generations=0, seed_from=str(earlier),
                         data={"train_tasks": 1, "heldout_tasks": 1}, optuna={"trials": 1})
    run_dir = tmp_path / "run"
    for attempt in (1, 2):  # the second run resumes the first and meets the same programs again
        Search(config, run_dir, tracker=Tracker()).run()  # no evaluation runs: no engine is needed
        state = json.loads((run_dir / "state.json").read_text())
        assert state["status"] == "finished" and state["attempt"] == attempt
    failed = {c.label: c.reason for c in Archive.load(run_dir / "archive.json").candidates
              if c.status is Status.FAILED}
    assert set(failed) == {f"import:{name}" for name in crashing}, failed
    assert "high must be within +-2**53" in failed["import:huge_int"]
    assert "high must be a finite number" in failed["import:inf_float"]
    assert "ZeroDivisionError" in failed["import:raises"]


class _Units:
    """A track's Scoring by hand: each unit's result is the parameter ``x`` itself (cost ``x``, a fixed
    pass), so every stage's score is known in advance."""

    unit = "units"
    directions = ("minimize", "maximize")

    def __init__(self, units, first, front):
        self.units, self.first, self.front, self.calls = units, first, front, []

    def evaluate(self, params, start, stop):
        self.calls.append((params["x"], start, stop))
        return [params["x"]] * (stop - start)

    def score(self, results):
        return sum(results) / len(results)

    def refusal(self, results, score, whole):
        return "negative cost" if score < 0 else None

    def point(self, score):
        return score, 1.0

    values = point

    def reference(self, k):
        return self.front


def test_the_shared_study_runs_its_two_stages_as_written():
    """rsi.tuning.run_study with a hand-made Scoring: a failed draw, a refused score, a trial pruned
    after the first stage by the front there, and complete ones: each recorded with its reason, the
    first stage run on the first units only, the Pareto trials returned as best."""
    import optuna

    from rsi.tuning import CandidateFailure, run_study

    xs = iter([None, -1.0, 5.0, 2.0, 1.0])  # draw fails; refused; pruned (3.0 dominates 5.0); complete; complete

    def draw(trial):
        x = next(xs)
        if x is None:
            raise CandidateFailure("space(trial): boom")
        return {"x": x}

    scoring = _Units(units=4, first=1, front=[3.0])
    result = run_study(optuna.create_study(directions=list(scoring.directions)), 5, draw, scoring)
    assert [(o.state, o.reason) for o in result.trials] == [
        ("failed", "space(trial): boom"), ("failed", "negative cost"), ("pruned", "dominated after 1 units"),
        ("complete", ""), ("complete", "")]
    assert [o.params for o in result.trials] == [{}, {"x": -1.0}, {"x": 5.0}, {"x": 2.0}, {"x": 1.0}]
    assert scoring.calls == [(-1.0, 0, 1), (5.0, 0, 1), (2.0, 0, 1), (2.0, 1, 4), (1.0, 0, 1), (1.0, 1, 4)]
    assert [o.params["x"] for o in result.best] == [1.0]  # 1.0 costs less at the same pass: 2.0 is dominated
    assert result.trials[3].train == 2.0 and not result.failed
