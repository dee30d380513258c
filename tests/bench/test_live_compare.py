"""``bench.live_compare`` against hand-computed figures: the point estimates are ratios of sums over
the paired tasks (``evals.paired``'s definition), the Wilson interval is the closed form."""

from __future__ import annotations

import json
import math

import pytest

from bench.live_compare import main


def write_run(path, policy, rows):
    path.mkdir(parents=True)
    episodes = [{"task_id": t, "probe": 0, "exact": ok, "answer": ans, "gold": "G", "tool_calls": ["read_page"] * 3,
                 "invalid_calls": 0, "steps": 4, "cost_cents": cost, "error": None} for t, ok, ans, cost in rows]
    (path / "live.json").write_text(json.dumps({"policy": policy, "summary": {}, "episodes": episodes}))


def test_rows_pair_with_the_reference_and_name_the_tasks_whose_verdict_changed(tmp_path, capsys):
    write_run(tmp_path / "full", "full", [("t1", True, "G", 2.0), ("t2", True, "G", 2.0), ("t3", True, "G", 4.0),
                                           ("t4", False, "x", 2.0)])
    write_run(tmp_path / "k4", "keep4", [("t1", False, "y", 1.0), ("t2", True, "G", 1.0), ("t3", True, "G", 2.0),
                                         ("t4", False, "x", 1.0)])
    out = tmp_path / "cmp.json"
    assert main([str(tmp_path / "full"), str(tmp_path / "k4"), "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["policies"]
    ref, k4 = rows
    assert "versus" not in ref and ref["pass_rate"] == 0.75
    z = 1.959963984540054  # Wilson interval of 3 of 4, closed form
    centre, half = (0.75 + z * z / 8) / (1 + z * z / 4), z / (1 + z * z / 4) * math.sqrt(0.75 * 0.25 / 4 + z * z / 64)
    assert ref["pass_ci95"] == pytest.approx([centre - half, centre + half], abs=1e-9)
    assert k4["cost_delta_pct"] == pytest.approx(100 * (5.0 / 10.0 - 1))
    assert k4["pass_delta"] == pytest.approx(-0.25)
    assert len(k4["verdicts_differ"]) == 1 and k4["verdicts_differ"][0].startswith("t1 (this 'y'")
    assert "differs: t1" in capsys.readouterr().out


def test_a_missing_run_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match=r"bench\.live_compare: .*live\.json"):
        main([str(tmp_path / "nope")])
