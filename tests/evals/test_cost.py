"""The cost model on hand-computed cases, and the rate tables."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest

from engine.cache.plan import TokenUsage
from engine.server.served import usage_json
from evals import CostBreakdown, Rates, available_rates, load_rates, request_cost, sum_costs, task_cost
from evals.errors import CostError

RATES = Rates("test", input=2.0, cached_input=0.5, output=8.0)
USAGE = TokenUsage(prompt_tokens=1000, prefill_tokens=300, cached_tokens=600, drop_skipped_tokens=100,
                   repos_tokens=50, completion_tokens=20)


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)


def test_request_cost_by_hand():
    c = request_cost(USAGE, RATES)
    # 300 x $2/M, 600 x $0.5/M, 50 repos x $0.5/M, 20 x $8/M; the 100 dropped tokens cost nothing
    assert close(c.input, 0.0006) and close(c.cached, 0.0003) and close(c.repos, 0.000025)
    assert close(c.output, 0.00016) and c.summary == 0
    assert close(c.total, 0.001085) and close(c.cents, 0.1085)


def test_dropping_saves_exactly_the_cached_read():
    dropped = TokenUsage(1000, 300, 400, 300, 50, 20)  # 200 more tokens dropped instead of read
    saving = request_cost(USAGE, RATES).total - request_cost(dropped, RATES).total
    assert close(saving, 200 * 0.5 / 1e6)


def test_summary_calls_are_priced_like_requests():
    summary = TokenUsage(2000, 2000, 0, 0, 0, 100)
    c = request_cost(USAGE, RATES, summary=summary)
    assert close(c.summary, 2000 * 2 / 1e6 + 100 * 8 / 1e6)
    two = request_cost(USAGE, RATES, summary=[summary, summary])
    assert close(two.summary, 2 * c.summary) and close(two.total - two.summary, c.total - c.summary)


def test_task_cost_and_sums():
    t = task_cost([USAGE, USAGE], RATES, summaries=[TokenUsage(10, 10, 0, 0, 0, 0)])
    assert close(t.total, 2 * 0.001085 + 10 * 2 / 1e6) and close(t.summary, 2e-5)
    assert sum_costs([]) == CostBreakdown() and sum_costs([request_cost(USAGE, RATES)] * 3).output == pytest.approx(
        3 * 0.00016)


def test_usage_shapes_agree():
    flat = USAGE.as_dict()
    openai = {"prompt_tokens": 1000, "completion_tokens": 20,
              "prompt_tokens_details": {"cached_tokens": 600, "drop_skipped_tokens": 100, "repos_tokens": 50}}
    expected = request_cost(USAGE, RATES)
    served = usage_json(USAGE)  # what akv serve answers: prefill_tokens at the top, the rest in the details
    for usage in (flat, openai, served, SimpleNamespace(**flat)):
        assert request_cost(usage, RATES) == expected
    with pytest.raises(CostError, match="does not partition"):  # a served usage whose prefill disagrees
        request_cost({**served, "prefill_tokens": served["prefill_tokens"] + 1}, RATES)


@pytest.mark.parametrize(("usage", "match"), [
    (TokenUsage(1000, 300, 600, 50, 0, 0), "does not partition"),
    ({**USAGE.as_dict(), "cached_tokens": -1}, "non-negative"),
    ({"prefill_tokens": 3}, "lacks"),
    (SimpleNamespace(prompt_tokens=1.5, prefill_tokens=1.5, cached_tokens=0, drop_skipped_tokens=0, repos_tokens=0),
     "integer"),
])
def test_bad_usage(usage, match):
    with pytest.raises(CostError, match=match):
        request_cost(usage, RATES)


def test_rate_tables(tmp_path):
    names = available_rates()
    assert names == ("gpt-oss-120b", "minimax-m2.7", "qwen3-30b-a3b", "custom")
    for name in names:
        r = load_rates(name)
        assert r.name == name and 0 < r.cached_input <= r.input < r.output and r.source
        if name != "custom":
            assert not r.confirmed and "unconfirmed, from memory" in r.note
    with pytest.raises(CostError, match=re.escape("valid: gpt-oss-120b, minimax-m2.7, qwen3-30b-a3b, custom")):
        load_rates("gpt-5")
    mine = tmp_path / "rates.yaml"
    mine.write_text("cheap: {input: 0.1, cached_input: 0.01, output: 0.4, confirmed: true}\n"
                    "broken: {input: -1, cached_input: 0, output: 0}\n")
    assert load_rates("cheap", mine) == Rates("cheap", 0.1, 0.01, 0.4, confirmed=True)
    with pytest.raises(CostError, match="non-negative"):
        load_rates("broken", mine)
