"""The paired bootstrap against independent references: degenerate samples, the closed-form normal
interval on large samples, coverage over simulated samples; hostile inputs are refused by name."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evals.cache.scoring import Z95
from evals.paired import MIN_TASKS, PairedDelta, PairedTasks, PairingError, paired_bootstrap


def _tasks(cost_a, cost_b, passed_a, passed_b, probes_a=None, probes_b=None) -> PairedTasks:
    n = len(cost_a)
    probes_a = probes_a if probes_a is not None else [1] * n
    probes_b = probes_b if probes_b is not None else probes_a
    return PairedTasks(tuple(f"t{i}" for i in range(n)), tuple(map(float, cost_a)), tuple(map(float, cost_b)),
                       tuple(int(x) for x in passed_a), tuple(int(x) for x in passed_b),
                       tuple(int(x) for x in probes_a), tuple(int(x) for x in probes_b))


def test_point_estimates_are_the_difference_of_the_aggregates():
    t = _tasks([2, 3, 5], [4, 4, 4], [1, 2, 0], [2, 2, 1], [2, 3, 1], [2, 3, 1])
    d = paired_bootstrap(t, samples=200, seed=1)
    assert d.cost_delta_pct == pytest.approx(100 * (10 / 12 - 1))
    assert d.pass_delta == pytest.approx(3 / 6 - 5 / 6)
    assert d.n_tasks == 3 and d.samples == 200


def test_a_constant_paired_difference_gives_a_point_interval():
    rng = np.random.default_rng(0)
    b = rng.uniform(1, 10, size=25)
    probes = rng.integers(1, 5, size=25)
    # cost of a is 0.9 x cost of b on every task; pass of a equals pass of b on every task
    passed = [int(rng.integers(0, m + 1)) for m in probes]
    d = paired_bootstrap(_tasks(0.9 * b, b, passed, passed, probes), samples=500, seed=3)
    assert d.cost_delta_ci95 == pytest.approx((-10.0, -10.0), abs=1e-9)
    assert d.pass_delta_ci95 == pytest.approx((0.0, 0.0), abs=1e-12)
    assert d.significant  # the cost interval excludes 0, the pass interval's low end is 0 >= -0.05


def test_a_large_sample_matches_the_closed_form_normal_interval():
    """n = 4000 tasks, one probe each: pass delta is a mean of differences in {-1, 0, 1} (normal
    interval mean +- z sd / sqrt(n)); cost delta is a ratio of means (delta-method interval)."""
    rng = np.random.default_rng(7)
    n = 4000
    b = rng.gamma(4.0, 1.0, size=n)
    a = b * rng.normal(0.9, 0.2, size=n).clip(0.05)
    pa, pb = rng.random(n) < 0.7, rng.random(n) < 0.75
    d = paired_bootstrap(_tasks(a, b, pa, pb), samples=3000, seed=11)

    diff = pa.astype(float) - pb.astype(float)
    half = Z95 * diff.std(ddof=1) / math.sqrt(n)
    assert d.pass_delta == pytest.approx(diff.mean())
    assert d.pass_delta_ci95[0] == pytest.approx(diff.mean() - half, abs=0.1 * half)
    assert d.pass_delta_ci95[1] == pytest.approx(diff.mean() + half, abs=0.1 * half)

    r = a.sum() / b.sum()
    se = math.sqrt(np.var(a - r * b, ddof=1) / n) / b.mean()  # delta method for a ratio of means
    lo, hi = 100 * (r - Z95 * se - 1), 100 * (r + Z95 * se - 1)
    half_pct = 100 * Z95 * se
    assert d.cost_delta_ci95[0] == pytest.approx(lo, abs=0.1 * half_pct)
    assert d.cost_delta_ci95[1] == pytest.approx(hi, abs=0.1 * half_pct)


def test_coverage_is_about_95_percent():
    """300 simulated samples of 40 tasks with a known true pass delta of -0.1 and cost ratio 0.8: the
    interval covers the truth in 0.90-0.99 of them (a binomial(300, 0.95) lies in that range with
    probability > 0.999; percentile intervals undercover slightly at n = 40)."""
    rng = np.random.default_rng(2024)
    cover_pass = cover_cost = 0
    runs, n = 300, 40
    for i in range(runs):
        b = rng.gamma(3.0, 1.0, size=n)
        a = 0.8 * b * rng.uniform(0.5, 1.5, size=n)  # E[a] / E[b] = 0.8 exactly
        pb = rng.random(n) < 0.8
        pa = rng.random(n) < 0.7
        d = paired_bootstrap(_tasks(a, b, pa, pb), samples=400, seed=i)
        cover_pass += d.pass_delta_ci95[0] <= -0.1 <= d.pass_delta_ci95[1]
        cover_cost += d.cost_delta_ci95[0] <= -20.0 <= d.cost_delta_ci95[1]
    assert 0.90 <= cover_pass / runs <= 0.99, cover_pass / runs
    assert 0.90 <= cover_cost / runs <= 0.99, cover_cost / runs


def test_the_same_seed_gives_the_same_interval_and_another_seed_another():
    rng = np.random.default_rng(5)
    t = _tasks(rng.uniform(1, 2, 12), rng.uniform(1, 2, 12), rng.random(12) < 0.5, rng.random(12) < 0.5)
    assert paired_bootstrap(t, seed=9) == paired_bootstrap(t, seed=9)
    assert paired_bootstrap(t, seed=9).cost_delta_ci95 != paired_bootstrap(t, seed=10).cost_delta_ci95


@pytest.mark.parametrize(("cost", "pass_lo", "want"), [
    ((-12.0, -1.0), -0.05, True),    # cheaper, pass loss within the margin
    ((1.0, 4.0), 0.0, True),         # significantly more expensive (the interval excludes 0)
    ((-12.0, 0.5), 0.0, False),      # the cost interval holds 0
    ((-12.0, -1.0), -0.051, False),  # the pass interval allows more than a 5-point loss
])
def test_significance_rule(cost, pass_lo, want):
    assert PairedDelta(0.0, cost, 0.0, (pass_lo, 0.1), 10, 100).significant is want


def test_too_few_tasks_are_never_significant():
    one = paired_bootstrap(_tasks([1.0], [2.0], [1], [1]), samples=100)
    assert one.cost_delta_ci95 == (-50.0, -50.0) and not one.significant  # a point interval from one task
    assert PairedDelta(-50.0, (-60.0, -40.0), 0.0, (0.0, 0.0), MIN_TASKS, 100).significant
    assert not PairedDelta(-50.0, (-60.0, -40.0), 0.0, (0.0, 0.0), MIN_TASKS - 1, 100).significant


@pytest.mark.parametrize(("change", "field"), [
    ({"cost_a": (1.0, 0.0)}, "cost_a"),
    ({"cost_b": (1.0, float("nan"))}, "cost_b"),
    ({"passed_a": (2, 0)}, "passed_a"),
    ({"probes_b": (1, 0)}, "passed_b"),
    ({"task_ids": ("t0", "t0")}, "task_ids"),
    ({"cost_b": (1.0,)}, "cost_b"),
])
def test_hostile_inputs_are_refused_by_name(change, field):
    good = {"task_ids": ("t0", "t1"), "cost_a": (1.0, 2.0), "cost_b": (1.0, 2.0), "passed_a": (1, 0),
            "passed_b": (1, 1), "probes_a": (1, 1), "probes_b": (1, 1)}
    with pytest.raises(PairingError) as err:
        PairedTasks(**(good | change))
    assert err.value.field == field


def test_too_few_samples_are_refused():
    with pytest.raises(PairingError, match="samples"):
        paired_bootstrap(_tasks([1, 2], [1, 2], [1, 0], [1, 1]), samples=10)
