"""Answer matching, Wilson intervals and per-family pass rates on hand-checked values."""

from __future__ import annotations

import math

import pytest

from evals import PassRate, contains_match, exact_match, normalize_answer, pass_rate, per_family, wilson_interval


@pytest.mark.parametrize(("text", "norm"), [
    ("The  Kestrel warehouse.", "kestrel warehouse"),
    ("An on-hold order!", "onhold order"),
    ("  CHG-5939 ", "chg5939"),
    ("a theme", "theme"),
    ("Tromsø — “north”", "tromsø north"),
])
def test_normalize_answer(text, norm):
    assert normalize_answer(text) == norm


def test_matching():
    assert exact_match("the Kestrel.", "Kestrel") and not exact_match("Kestrel warehouse", "Kestrel")
    assert contains_match("It ships from warehouse Kestrel.", "Kestrel")
    assert contains_match("status: on hold", "On hold") and not contains_match("Kestrels", "Kestrel")
    assert not contains_match("anything", "the")  # empty after normalisation


def test_wilson_interval_known_values():
    ci = wilson_interval(8, 10)
    assert ci.low == pytest.approx(0.4902, abs=1e-4) and ci.high == pytest.approx(0.9433, abs=1e-4)
    assert wilson_interval(0, 10).low == 0 and wilson_interval(0, 10).high == pytest.approx(0.2775, abs=1e-4)
    assert wilson_interval(10, 10).high == 1 and wilson_interval(10, 10).low == pytest.approx(0.7225, abs=1e-4)
    assert wilson_interval(0, 0) == wilson_interval(0, 0).__class__(0.0, 1.0)
    with pytest.raises(ValueError, match="passed=3, total=2"):
        wilson_interval(3, 2)


def test_pass_rates_and_families():
    r = pass_rate([True, False, True])
    assert (r.passed, r.total) == (2, 3) and r.rate == pytest.approx(2 / 3)
    assert "2/3 = 0.667" in str(r)
    assert math.isnan(PassRate(0, 0).rate) and PassRate(0, 0).interval.high == 1.0
    fams = per_family([("b", True), ("a", False), ("b", False), ("b", True)])
    assert list(fams) == ["b", "a"] and fams["b"] == PassRate(2, 3) and fams["a"] == PassRate(0, 1)
    with pytest.raises(ValueError):
        PassRate(2, 1)
