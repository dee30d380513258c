"""The paired bootstrap against independent references: degenerate samples, the closed-form normal
interval on large samples, coverage over simulated samples; hostile inputs are refused by name.
The pooled (stratified) bootstrap against the paired one, closed forms and an exact enumeration."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evals.cache.scoring import Z95
from evals.paired import MIN_TASKS, PairedDelta, PairedTasks, PairingError, paired_bootstrap, pooled_bootstrap


def _tasks(cost_a, cost_b, passed_a, passed_b, probes_a=None, probes_b=None, name="t") -> PairedTasks:
    n = len(cost_a)
    probes_a = probes_a if probes_a is not None else [1] * n
    probes_b = probes_b if probes_b is not None else probes_a
    return PairedTasks(tuple(f"{name}{i}" for i in range(n)), tuple(map(float, cost_a)), tuple(map(float, cost_b)),
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


# ----------------------------------------------------------------- pooled over independent comparisons


def _random_group(rng, n, name, probes=2):
    b = rng.uniform(1, 3, size=n)
    return _tasks(b * rng.uniform(0.6, 1.2, size=n), b, rng.integers(0, probes + 1, size=n),
                  rng.integers(0, probes + 1, size=n), [probes] * n, name=name)


def test_one_group_pools_to_the_paired_bootstrap_itself():
    t = _random_group(np.random.default_rng(1), 9, "a")
    assert pooled_bootstrap([t], samples=700, seed=4) == paired_bootstrap(t, samples=700, seed=4)


def test_the_pooled_point_is_the_ratio_of_sums_over_every_task():
    a = _tasks([2, 3], [4, 4], [1, 2], [2, 2], [2, 3], [2, 3], name="a")
    b = _tasks([5, 1, 1], [5, 2, 2], [0, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1], name="b")
    d = pooled_bootstrap([a, b], samples=200, seed=0)
    assert d.cost_delta_pct == pytest.approx(100 * ((2 + 3 + 5 + 1 + 1) / (4 + 4 + 5 + 2 + 2) - 1))
    assert d.pass_delta == pytest.approx((1 + 2 + 0 + 1 + 1) / 8 - (2 + 2 + 1 + 1 + 0) / 8)
    assert d.n_tasks == 5


def test_every_resample_keeps_each_groups_size():
    """Group a: every task costs 1 against 2, both pass. Group b: 2 against 2, a fails where b
    passes. A resample that keeps 5 tasks of a and 3 of b always sums to 11 against 16 cents and
    5 of 8 against 8 of 8 passed probes: a point interval. Resampling the 8 tasks together would
    mix the groups and give a wide one."""
    a = _tasks([1] * 5, [2] * 5, [1] * 5, [1] * 5, name="a")
    b = _tasks([2] * 3, [2] * 3, [0] * 3, [1] * 3, name="b")
    d = pooled_bootstrap([a, b], samples=500, seed=2)
    assert d.cost_delta_ci95 == pytest.approx((100 * (11 / 16 - 1),) * 2, abs=1e-9)
    assert d.pass_delta_ci95 == pytest.approx((-3 / 8, -3 / 8), abs=1e-12)
    together = paired_bootstrap(_tasks([1] * 5 + [2] * 3, [2] * 8, [1] * 5 + [0] * 3, [1] * 8), samples=500, seed=2)
    assert together.cost_delta_ci95[1] - together.cost_delta_ci95[0] > 10


def test_the_pooled_interval_matches_the_exact_bootstrap_distribution():
    """Groups of 3 and 4 tasks have 3**3 * 4**4 = 6,912 equally likely stratified resamples:
    enumerated, they give the exact bootstrap distribution; 20,000 random resamples must put each
    interval end between the exact 1.5% and 3.5% (96.5% and 98.5%) quantiles."""
    import itertools

    rng = np.random.default_rng(8)
    groups = [_random_group(rng, 3, "a"), _random_group(rng, 4, "b")]
    cols = ("cost_a", "cost_b", "passed_a", "passed_b", "probes_a", "probes_b")
    cost, passed = [], []
    for ia in itertools.product(range(3), repeat=3):
        for ib in itertools.product(range(4), repeat=4):
            picked = [(groups[0], i) for i in ia] + [(groups[1], i) for i in ib]
            sums = {c: sum(getattr(g, c)[i] for g, i in picked) for c in cols}
            cost.append(100 * (sums["cost_a"] / sums["cost_b"] - 1))
            passed.append(sums["passed_a"] / sums["probes_a"] - sums["passed_b"] / sums["probes_b"])
    d = pooled_bootstrap(groups, samples=20_000, seed=5)
    for exact, (low, high) in ((cost, d.cost_delta_ci95), (passed, d.pass_delta_ci95)):
        q = np.quantile(exact, [0.015, 0.035, 0.965, 0.985])
        assert q[0] <= low <= q[1] and q[2] <= high <= q[3], (q, low, high)


def test_pooling_refuses_a_task_counted_twice_and_nothing_to_pool():
    a = _tasks([1, 2], [2, 2], [1, 1], [1, 0], name="a")
    other = PairedTasks(("c0", "a1"), (1.0, 1.0), (1.0, 1.0), (1, 1), (1, 1), (1, 1), (1, 1))
    with pytest.raises(PairingError, match="task 'a1' is in comparisons 0 and 2") as err:
        pooled_bootstrap([a, _tasks([1], [1], [1], [1], name="x"), other])
    assert err.value.field == "task_ids"
    with pytest.raises(PairingError, match="task 'a0' is in comparisons 0 and 1"):
        pooled_bootstrap([a, a])
    with pytest.raises(PairingError, match="no comparisons to pool"):
        pooled_bootstrap([])
    with pytest.raises(PairingError, match="samples"):
        pooled_bootstrap([a], samples=99)


def test_the_intervals_are_scipys_paired_percentile_bootstrap():
    """scipy's ``stats.bootstrap`` (paired resampling, percentile method) on the same statistics
    gives the same intervals up to resampling noise (20,000 resamples each; measured 0.05 points of
    cost change and 0.004 of pass rate apart; tolerance 0.3 and 0.012). scipy's BCa interval lies
    0.5-0.8 points away on the same data, beyond the tolerance: these are percentile intervals.
    ``evals.paired`` keeps its own draw because pooling needs a stratified resample (each run's
    tasks drawn from that run), which ``stats.bootstrap`` does not do."""
    from scipy import stats

    rng = np.random.default_rng(11)
    n = 30
    cost_b = rng.uniform(0.5, 2.0, n)
    cost_a = cost_b * rng.uniform(0.3, 1.1, n)
    probes = rng.integers(1, 4, n)
    passed_b = rng.binomial(probes, 0.8)
    passed_a = np.minimum(probes, rng.binomial(probes, 0.75))
    ours = paired_bootstrap(PairedTasks(tuple(f"t{i}" for i in range(n)), tuple(cost_a), tuple(cost_b),
                                        tuple(int(x) for x in passed_a), tuple(int(x) for x in passed_b),
                                        tuple(int(x) for x in probes), tuple(int(x) for x in probes)), samples=20_000)

    def cost(a, b, axis=-1):
        return 100.0 * (a.sum(axis) / b.sum(axis) - 1.0)

    def passing(pa, pb, m, axis=-1):
        return (pa.sum(axis) - pb.sum(axis)) / m.sum(axis)

    for stat, data, got, tol in ((cost, (cost_a, cost_b), ours.cost_delta_ci95, 0.3),
                                 (passing, (passed_a, passed_b, probes), ours.pass_delta_ci95, 0.012)):
        ref = stats.bootstrap(data, stat, paired=True, vectorized=True, n_resamples=20_000, method="percentile",
                              random_state=np.random.default_rng(5)).confidence_interval
        assert got == pytest.approx((ref.low, ref.high), abs=tol)
