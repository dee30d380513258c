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
