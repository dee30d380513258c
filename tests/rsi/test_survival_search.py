"""Survival-policy search on the simulator: real Optuna studies over the families' own spaces."""

from __future__ import annotations

import json

import pytest

from evals.survival import SimConfig, generate_trace, save_trace, simulate
from rsi.cli import main
from rsi.survival.search import OBJECTIVE, run
from search_spaces.errors import UnknownPolicyError


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "memory-tight.jsonl"
    save_trace(generate_trace("memory-tight", 12, seed=1), path)
    return path


def test_tuned_family_is_never_worse_than_its_defaults_and_matches_a_rerun(trace, tmp_path):
    [ttl] = run(trace, ["ttl"], trials=6, out_dir=tmp_path / "a", seed=3)
    assert ttl.trials == 6 and ttl.best[OBJECTIVE] <= ttl.defaults[OBJECTIVE]
    # The recorded best is what the simulator gives for those parameters (independent rerun).
    again = simulate(trace, {"name": "ttl", "params": ttl.best_params}, SimConfig())
    assert again[OBJECTIVE] == pytest.approx(ttl.best[OBJECTIVE])
    lines = [json.loads(x) for x in (tmp_path / "a" / "trials.jsonl").read_text().splitlines()]
    assert len(lines) == 6 and lines[0]["trial"] == 0 and {x["family"] for x in lines} == {"ttl"}
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["families"][0]["best_params"] == ttl.best_params
    [same] = run(trace, ["ttl"], trials=6, out_dir=tmp_path / "b", seed=3)  # seeded: same search
    assert same.best_params == ttl.best_params


def test_command_line_and_bad_names(trace, tmp_path, capsys):
    assert main(["survival-search", str(trace), "--survival", "lru,min_waste", "--trials", "2",
                 "--out", str(tmp_path / "cli")]) == 0
    out = capsys.readouterr().out
    assert "lru" in out and "min_waste" in out and "p95 TTFT tuned" in out
    with pytest.raises(UnknownPolicyError, match="valid survival policies"):
        run(trace, ["nope"], trials=1, out_dir=tmp_path / "bad")
    with pytest.raises(ValueError, match="trials must be an integer >= 1, got 0"):
        run(trace, ["lru"], trials=0, out_dir=tmp_path / "bad")
    capsys.readouterr()
    for argv, message in ((["--trials", "-3"], "trials must be an integer >= 1, got -3"),
                          (["--seed", "-1"], r"seed must be an integer in [0, 2**32), got -1"),  # was numpy's traceback
                          (["--survival", ","], "no survival family to tune")):  # was a run of nothing
        assert main(["survival-search", str(trace), *argv, "--out", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
