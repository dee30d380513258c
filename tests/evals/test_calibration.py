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
    assert data["dtype"] == "float32"
    # the same tasks in bfloat16, against the float32 calibration: every probe compared
    again = tmp_path / "cal-bf16.json"
    cli.main(["--suite", "smoke", "--split", "train", "--per-family", "1", "--model", "tiny-random",
              "--dtype", "bfloat16", "--against", str(out), "--out", str(again)])
    bf16 = json.loads(again.read_text())
    assert bf16["dtype"] == "bfloat16" and "against" in capsys.readouterr().out
    d = bf16["against"]
    assert d["probes"] == len(data["probes"]) == len(bf16["probes"]) and d["only_here"] == d["only_there"] == 0
    for flag in ("full_mc", "full_exact", "drop_mc", "drop_exact"):
        key = flag.replace("exact", "gen")
        assert d[flag]["there"] == round(data["total"][key] * d["probes"])
        assert d[flag]["here"] - d[flag]["there"] == d[flag]["gained"] - d[flag]["lost"]
    # the same tasks asked with other lead-ins: nothing to compare, but the calibration is still written
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data | {"probes": [p | {"lead_in": "elsewhere"} for p in data["probes"]]}))
    third = tmp_path / "cal-3.json"
    cli.main(["--suite", "smoke", "--split", "train", "--per-family", "1", "--model", "tiny-random",
              "--against", str(other), "--out", str(third)])
    assert "no probe in common" in capsys.readouterr().out
    kept = json.loads(third.read_text())
    assert len(kept["probes"]) == len(data["probes"]) and "no probe in common" in kept["against"]["error"]


_PROBE = {"task_id": "t", "lead_in": "x", "answer": "A", "full_mc": True, "full_exact": True, "drop_mc": False,
          "drop_exact": False}


@pytest.mark.parametrize("content, words", [
    ("{not json", "cannot read"), ('{"probes": 3}', "not a calibration"), ("[]", "not a calibration"),
    ('{"probes": [1]}', "probe 0 is not a calibration probe"),
    (json.dumps({"probes": [_PROBE, {"task_id": "t"}]}), "probe 1 is not a calibration probe.*missing lead_in"),
    (json.dumps({"probes": [_PROBE | {"answer": 3}]}), "a key is not a string"),
    (json.dumps({"probes": [_PROBE]}), "none of its probes is from the"),  # a calibration of other tasks
])
def test_against_refuses_what_is_not_a_calibration_before_calibrating(tmp_path, content, words):
    from evals.cache import probe_calibration_cli as cli

    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(SystemExit, match=words):
        cli.main(["--suite", "smoke", "--model", "no-such-model", "--against", str(bad)])


def test_compare_counts_gains_and_losses_per_flag():
    from dataclasses import asdict

    from evals.cache.probe_calibration import compare

    a, b, c = (ProbeOutcome(f"t{i}", "f", "fact", "A", f"lead {i}", 5, "A", " A", True, True, "B", " B", False, False)
               for i in range(3))
    theirs = [asdict(a) | {"full_mc": False}, asdict(b) | {"drop_exact": True},
              asdict(ProbeOutcome("t9", "f", "fact", "A", "x", 5, "A", "A", True, True, "B", "B", False, False))]
    d = compare([a, b, c], theirs)
    assert (d["probes"], d["only_here"], d["only_there"]) == (2, 1, 1)
    assert d["full_mc"] == {"there": 1, "here": 2, "gained": 1, "lost": 0}
    assert d["drop_exact"] == {"there": 1, "here": 0, "gained": 0, "lost": 1}
    assert d["full_exact"] == {"there": 2, "here": 2, "gained": 0, "lost": 0}
    with pytest.raises(ValueError, match="no probe in common"):
        compare([c], theirs[2:])


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
