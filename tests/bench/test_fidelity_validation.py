"""``bench.fidelity_validation``'s suite mode and its statistics: the rank statistics against closed forms
(monotone data gives 1, reversed data -1, one tied side 2/sqrt(5)), the tie shares of a known array,
the pooled report over suites, and the mode end to end on the tiny random model (no run directory)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from bench.fidelity_stats import STATISTICS, extent, rank_correlations, ties
from bench.fidelity_suites import SuiteEvaluation, report
from bench.fidelity_validation import main


def _monotone(n_policies: int = 4, n_tasks: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Policy ``p`` passes ``p`` of 3 probes and has statistic ``p`` on every task."""
    p = np.repeat(np.arange(n_policies, dtype=float)[:, None], n_tasks, axis=1)
    return p, np.full_like(p, 3.0), p


def test_monotone_data_ranks_at_one_and_reversed_data_at_minus_one():
    passed, probes, stat = _monotone()
    up = rank_correlations(passed, probes, {"s": stat}, samples=200, seed=0)["s"]
    down = rank_correlations(passed, probes, {"s": -stat}, samples=200, seed=0)["s"]
    assert (up.spearman, up.kendall_tau_b, *up.ci95, *up.kendall_ci95) == pytest.approx((1,) * 6)
    assert (down.spearman, down.kendall_tau_b, *down.ci95) == pytest.approx((-1,) * 4)
    assert up.spearman_cells == pytest.approx(1.0) and up.draws == 200


def test_spearman_with_a_tied_side_is_pearson_of_average_ranks():
    """Statistic 1..4 against pass rates (0, 0, 1, 1): ranks (1.5, 1.5, 3.5, 3.5), r = 4 / sqrt(5 * 4)."""
    stat = np.array([[1.0], [2.0], [3.0], [4.0]])
    passed = np.array([[0.0], [0.0], [1.0], [1.0]])
    r = rank_correlations(passed, np.ones_like(passed), {"s": stat}, samples=100, seed=0)["s"]
    assert r.spearman == pytest.approx(2 / math.sqrt(5))
    assert r.kendall_tau_b == pytest.approx(4 / math.sqrt(6 * 4))  # 4 concordant pairs, 2 tied in y


def test_tie_shares_and_ranges_of_a_known_array():
    t = ties([1.0, 1.0, 1.0, 0.5, 0.5, 0.0])
    assert (t.policies, t.distinct, t.at_top) == (6, 3, 0.5)
    assert t.pairs_tied == pytest.approx((3 + 1) / 15)
    e = extent(["a", "b", "c", "d"], [0.2, -0.1, 0.2, -0.1])
    assert (e.low, e.low_policies, e.high, e.high_policies) == (-0.1, ("b", "d"), 0.2, ("a", "c"))
    with pytest.raises(ValueError):
        ties([1.0])
    with pytest.raises(ValueError):
        rank_correlations(*_monotone()[:2], {"s": np.zeros((4, 2))}, samples=100, seed=0)


def _evaluation(suite: str, labels: tuple[str, ...], n_tasks: int) -> SuiteEvaluation:
    passed, probes, stat = _monotone(len(labels), n_tasks)
    return SuiteEvaluation(suite, tuple(f"{suite}/{j}" for j in range(n_tasks)), labels, passed, probes,
                           {k: stat for k in STATISTICS}, np.ones_like(stat), (),
                           {"probes": 1.0, "fidelity": 2.0})


def test_pooled_report_joins_the_suites_over_the_policies_they_share():
    a = _evaluation("a", ("expert:full", "p1", "p2", "p3"), 2)
    b = _evaluation("b", ("expert:full", "p1", "p3", "p2"), 3)
    out = report([a, b], 0.5, samples=100, seed=0)
    assert list(out) == ["a", "b", "pooled"]
    pooled = out["pooled"]
    assert pooled["tasks"] == ["a/0", "a/1", "b/0", "b/1", "b/2"] and pooled["policies"] == 4
    assert [r["policy"] for r in pooled["rows"]] == ["expert:full", "p1", "p2", "p3"]
    p2 = next(r for r in pooled["rows"] if r["policy"] == "p2")  # row 2 of a (2 tasks), row 3 of b (3 tasks)
    assert p2["probe_pass"] == pytest.approx((2 * 2 + 3 * 3) / (3 * 5))
    assert p2["mean_delta"] == pytest.approx((2 * 2 + 3 * 3) / 5)
    assert out["a"]["correlations"]["mean_delta"]["spearman"] == pytest.approx(1.0)
    assert pooled["ranges"]["probe_pass"]["min_policies"] == ["expert:full"]
    assert out["a"]["ties"]["probe_pass"]["pairs_tied"] == 0.0


def test_suite_mode_end_to_end_on_the_tiny_model(tmp_path, tiny, monkeypatch):
    monkeypatch.setattr("bench.fidelity_validation.Engine.from_pretrained", lambda *a, **k: tiny)  # the shared load
    out = tmp_path / "fv.json"
    policies = "full;rolling_drop:keep_tool_responses=1;read_drop:min_tokens=8"
    assert main(["--suites", "smoke", "--tasks", "1", "--model", "tiny-random", "--dtype", "float32",
                 "--policies", policies, "--samples", "100", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert (data["mode"], data["runs"], data["suites"], data["eval"]["frame_guard"]) == ("suites", [], ["smoke"], True)
    group = data["groups"]["smoke"]
    assert set(data["groups"]) == {"smoke"} and group["policies"] == 3 and len(group["tasks"]) == 1
    assert set(group["correlations"]) == set(STATISTICS) and set(group["ranges"]) >= {"probe_pass", *STATISTICS}
    rows = {r["policy"]: r for r in group["rows"]}
    assert rows["expert:full"]["mean_delta"] == 0.0 and rows["expert:full"]["worst_delta"] == 0.0
    assert all(0.0 <= r["probe_pass"] <= 1.0 and r["probes"] > 0 for r in rows.values())
    assert "provenance" in data


def test_a_mode_must_be_chosen():
    with pytest.raises(SystemExit):
        main([])
    with pytest.raises(SystemExit):
        main(["--suites", "smoke", "--policies", "full;read_drop"])  # fewer than 3 policies
