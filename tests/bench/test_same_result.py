"""bench.same_result: a rerun's result against the committed one, wall clock and paths aside."""

from __future__ import annotations

import json
import math

import pytest

from bench.same_result import compare, differences, main


def _run(root, name, *, cost=0.62, frozen="2026-12-07T08:23:28Z", seconds=12.5):
    run = root / name
    run.mkdir(parents=True)
    (run / "headline.json").write_text(json.dumps({
        "run_dir": str(run), "comparisons": [{"versus": "full", "delta_pct": -47.0, "ci": [-51.6, -43.1]}],
        "seconds": seconds}))
    (run / "archive.json").write_text(json.dumps({"candidates": [
        {"id": "a", "train": {"cost_cents_mean": cost, "pass_rate": 0.917, "nan": math.nan}}]}))
    (run / "pick.json").write_text(json.dumps({"frozen_at": frozen, "picks": [{"id": "a", "program": "s" * 64}]}))
    (run / "evaluations.jsonl").write_text("\n".join(
        json.dumps({"key": k, "row": {"pass": 1, "seconds": seconds + k}, "sha256": f"{seconds + k}"})
        for k in range(3)) + "\n")
    return run


def test_a_rerun_that_differs_only_in_clock_and_path_is_the_same(tmp_path, capsys):
    a = _run(tmp_path / "x", "run")
    b = _run(tmp_path / "y", "rerun", frozen="2026-12-07T09:49:46Z", seconds=99.0)
    result = compare(a, b)
    assert result["same"], result
    assert {f["file"] for f in result["files"]} == {"headline.json", "archive.json", "pick.json", "evaluations.jsonl"}
    assert {".frozen_at", ".seconds", ".row.seconds"} <= set(result["skipped_clock_fields"])
    assert main([str(a), str(b), "--out", str(tmp_path / "same.json")]) == 0
    assert json.loads((tmp_path / "same.json").read_text())["same"] is True
    assert "SAME" in capsys.readouterr().out


def test_a_changed_metric_is_named_by_its_key_path(tmp_path, capsys):
    a, b = _run(tmp_path / "x", "run"), _run(tmp_path / "y", "run", cost=0.63)
    result = compare(a, b)
    assert not result["same"]
    archive = next(f for f in result["files"] if f["file"] == "archive.json")
    assert archive["differences"] == [".candidates[0].train.cost_cents_mean"]
    assert main([str(a), str(b)]) == 1
    assert "DIFFERENT" in capsys.readouterr().out


def test_a_missing_file_and_pooled_files_are_compared(tmp_path):
    a, b = _run(tmp_path / "x", "run"), _run(tmp_path / "y", "run")
    (b / "pareto.json").write_text("[]")
    result = compare(a, b)
    pareto = next(f for f in result["files"] if f["file"] == "pareto.json")
    assert not result["same"] and pareto["differences"] == ["only in the second"]
    pooled = {"runs": [str(a)], "comparisons": [{"runs": [{"run_dir": str(a)}], "delta": -0.2}]}
    first, second = tmp_path / "p1.json", tmp_path / "p2.json"
    first.write_text(json.dumps(pooled))
    second.write_text(json.dumps(pooled).replace(str(a), str(b)))
    assert compare(first, second)["same"]
    second.write_text(json.dumps({**pooled, "comparisons": [{"runs": [{"run_dir": str(b)}], "delta": -0.3}]}))
    assert [f["differences"] for f in compare(first, second)["files"]] == [[".comparisons[0].delta"]]


def test_differences_by_hand():
    assert list(differences({"a": [1, 2]}, {"a": [1, 3]})) == [".a[1]"]
    assert list(differences({"a": 1}, {"b": 1})) == [".a (only in the first)", ".b (only in the second)"]
    assert list(differences([1], [1, 2])) == [" (1 vs 2 items)"]
    assert not list(differences({"x": math.nan}, {"x": math.nan}))


def test_a_directory_and_a_file_are_refused(tmp_path):
    run = _run(tmp_path, "run")
    with pytest.raises(SystemExit, match="two run directories or two files"):
        compare(run, run / "headline.json")
    with pytest.raises(SystemExit, match=r"no such run directory or file: .*gone"):
        compare(run, tmp_path / "gone")
    other = _run(tmp_path / "y", "run")
    (other / "headline.json").write_text("not json {")
    with pytest.raises(SystemExit, match=r"headline.json: not JSON \(Expecting value"):
        compare(run, other)
    (other / "headline.json").write_bytes(b"\xff\xfe")
    with pytest.raises(SystemExit, match=r"headline.json: cannot be read \(UnicodeDecodeError"):
        compare(run, other)
