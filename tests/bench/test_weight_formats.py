"""bench.weight_formats' measures: the agreement of two next-token distributions against closed
forms, and its int8 forms against float32 within their quantization error (tiny random model)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bench.weight_formats import _int8_model, _Int8PerRow, _Int8PerTensor, _prefill, agreement


def test_agreement_against_closed_forms():
    ref = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]))
    same = agreement(ref, ref.clone(), torch.tensor([0]))
    assert same["top1_agreement"] == 1.0 and same["kl"] == pytest.approx(0.0, abs=1e-7)
    other = torch.log(torch.tensor([[0.25, 0.5, 0.25], [0.1, 0.8, 0.1]]))
    got = agreement(ref, other, torch.tensor([0]))
    kl_first = 0.5 * math.log(0.5 / 0.25) + 0.25 * math.log(0.25 / 0.5)  # the second row agrees exactly
    assert got["top1_agreement"] == 0.5
    assert got["kl"] == pytest.approx(kl_first / 2, rel=1e-6)
    assert got["nll_reference"] == pytest.approx(-math.log(0.5)) and got["nll"] == pytest.approx(-math.log(0.25))


@pytest.mark.parametrize("kind", [_Int8PerTensor, _Int8PerRow])
def test_int8_projections_are_float32_within_their_rounding(kind):
    """Each output is a sum of 64 products whose factors are rounded to 1/254 of their row's (or
    tensor's) largest magnitude: within 1% of the output's scale here, and far from exact."""
    gen = torch.Generator().manual_seed(0)
    w, x = torch.randn(32, 64, generator=gen), torch.randn(5, 64, generator=gen)
    want, got = F.linear(x, w), kind(w)(x)
    err = (got - want).abs().max() / want.abs().max()
    assert 1e-5 < float(err) < 0.03


def test_an_int8_model_keeps_the_float32_one_and_stays_close():
    from tests.conftest import get_engine

    eng = get_engine("tiny-random")
    ids = list(range(100, 140))
    rows = list(range(30, 40))
    before = _prefill(eng.model, ids, rows)()
    q = _int8_model(eng.model, _Int8PerRow)
    assert q._layers is not eng.model._layers and q.layers is eng.model.layers
    after = _prefill(eng.model, ids, rows)()
    assert torch.equal(before, after)  # the float32 model is untouched
    quant = _prefill(q, ids, rows)()
    assert np.isfinite(quant.numpy()).all() and not torch.equal(quant, before)
    assert agreement(before, quant, torch.tensor(ids[31:41]))["kl"] < 0.05


def test_the_evaluation_pairs_each_policy_over_tasks():
    """Two formats of the tiny model on two smoke tasks: costs count tokens, so the paired cost
    change is exactly 0; every probe is counted once per policy and format, and the flips are the
    probes whose pass differs (here checked against the rows themselves)."""
    from bench.weight_formats import evaluation
    from engine.engine import Engine
    from evals.tasks import load_suite
    from tests.conftest import get_engine

    tasks = load_suite("smoke", "heldout")[:2]
    engines = {"float32": get_engine("tiny-random"), "bfloat16": Engine.from_pretrained("tiny-random",
                                                                                        dtype=torch.bfloat16)}
    ev = evaluation(engines, tasks)
    assert ev["probes"] == 2 * sum(len(t.probes) for t in tasks)
    assert ev["probes_flipped"] == ev["probes_lost"] + ev["probes_gained"] <= ev["probes"]
    gained = ev["pass_rate"]["bfloat16"] - ev["pass_rate"]["float32"]
    assert gained == pytest.approx((ev["probes_gained"] - ev["probes_lost"]) / ev["probes"])
    paired = ev["paired_bfloat16_vs_float32"]
    assert set(paired) == set(ev["policies"])
    for d in paired.values():
        assert d["tasks"] == 2 and d["cost_delta_pct"] == pytest.approx(0.0, abs=1e-9)
        assert d["pass_delta_ci95"][0] <= d["pass_delta"] <= d["pass_delta_ci95"][1]
