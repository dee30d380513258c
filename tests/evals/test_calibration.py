"""Probe calibration: task sampling, aggregation, the report, and the command line (tiny random model)."""

from __future__ import annotations

import json

import pytest

from evals.cache.evaluator import EvalConfig
from evals.cache.probe_calibration import Calibration, FamilyRow, ProbeOutcome, Targets, calibrate, sample_tasks
from evals.cache.probes import ProbeFormat
from evals.tasks import load_suite


@pytest.fixture(scope="module")
def smoke():
    return load_suite("smoke", "heldout")


@pytest.fixture(scope="module")
def eng():
    from tests.conftest import get_engine

    return get_engine("tiny-random", template="plain")


def outcome(family: str, full: bool, drop: bool, n: int = 5) -> ProbeOutcome:
    return ProbeOutcome("t/" + family, family, "fact", "A", "lead ", n, "A", " A", full, full, "B", " B", drop, drop)


def test_sample_spreads_over_each_family(smoke):
    picked = sample_tasks(smoke, 1)
    assert sorted(t.family for t in picked) == sorted({t.family for t in smoke})
    assert len(sample_tasks(smoke, 5)) == len(smoke)  # never more than a family has


def test_targets_and_table():
    rows = (FamilyRow("a", 4, 8, 0.2, 0.875, 0.75, 0.25, 0.0), FamilyRow("b", 4, 8, 0.2, 0.75, 0.9, 0.375, 0.5))
    outcomes = tuple([outcome("a", True, False)] * 7 + [outcome("a", False, True)])
    cal = Calibration("heldout", "plain", "m", ProbeFormat().as_dict(), rows, outcomes, (), 1.0)
    assert rows[0].meets(Targets()) == {"full_mc": True, "drop_mc": True, "full_gen": False, "drop_gen": True}
    assert rows[1].meets(Targets()) == {"full_mc": False, "drop_mc": False, "full_gen": True, "drop_gen": False}
    assert not cal.ok
    assert cal.total.full_mc == 7 / 8 and cal.total.chance == pytest.approx(0.2)
    table = cal.table()
    assert "0.75*" in table and "0.88 " in table and table.count("\n") == len(rows) + 3


def test_calibrate_runs_both_conditions(smoke, eng, tmp_path):
    tasks = sample_tasks(smoke, 1)[:2]
    cal = calibrate(eng, tasks, EvalConfig(probe=ProbeFormat(max_tokens=2)), split="heldout")
    assert cal.failures == ()
    assert [r.family for r in cal.rows] == [t.family for t in tasks]
    assert len(cal.outcomes) == sum(len(t.probes) for t in tasks)
    assert all(o.lead_in and o.n_candidates >= 5 for o in cal.outcomes)
    data = json.loads(cal.write(tmp_path / "c.json").read_text())
    assert data["template"] == "plain" and len(data["families"]) == 2 and len(data["probes"]) == len(cal.outcomes)


def test_command_line(tmp_path, monkeypatch, capsys):
    from evals.cache import probe_calibration_cli as cli

    out = tmp_path / "cal.json"
    code = cli.main(["--suite", "smoke", "--split", "train", "--per-family", "1", "--model", "tiny-random",
                     "--out", str(out)])
    printed = capsys.readouterr().out
    assert code in (0, 1) and "full mc" in printed and "evidence-restated" in printed
    data = json.loads(out.read_text())
    assert data["split"] == "train" and data["suite"] == "smoke" and data["probe_format"] == ProbeFormat().as_dict()


def test_index_range_keeps_each_familys_tasks_a_to_b():
    import pytest

    from evals.cache.probe_calibration_cli import index_range
    from evals.tasks import Probe, Task

    def task(fam: str, k: int) -> Task:
        return Task(f"{fam}/{k}", ({"role": "user", "content": "x"},), (Probe(0, "q", "x"),), family=fam)

    tasks = [task(f, k) for k in range(5) for f in ("a", "b")]
    assert [t.id for t in index_range(tasks, "1:3")] == ["a/1", "b/1", "a/2", "b/2"]
    assert index_range(tasks, None) == tasks
    for bad in ("3:1", "x:2", "2", "-1:3"):
        with pytest.raises(SystemExit, match="--index-range"):
            index_range(tasks, bad)
