"""``bench.rejudge`` judges a run's held-out tasks with the run's own settings: the evaluator
settings, template and dtype its search used (reference: ``SearchConfig.eval_config`` and the
config's ``model`` section, the one place a search sets them), or another model's own."""

from __future__ import annotations

import dataclasses

import pytest

from bench.rejudge import judge_settings
from evals.cache.probes import probe_format_for
from rsi.cache.config import load_config


@pytest.fixture
def run_config():
    """A run's config (a committed one, with a lead-in that is not the model's default so that a
    hand-built EvalConfig would differ)."""
    return load_config("experiments/mixed-arms1.yaml", {"eval.lead_in": "none"})


def test_the_runs_model_is_judged_with_the_runs_settings(run_config):
    cfg = load_config("experiments/mixed-arms1.yaml", {"eval.lead_in": "none"})
    judge = judge_settings(run_config, cfg.model.name)
    assert judge.eval == dataclasses.replace(cfg.eval_config(), generate=cfg.eval_config().generate or
                                             cfg.eval.scoring == "generate")
    assert judge.eval.probe.lead_in == "none" != probe_format_for(cfg.model.name).lead_in
    assert (judge.template, judge.dtype) == (cfg.model.template, cfg.dtype)
    assert judge_settings(run_config, cfg.model.name, "bfloat16").dtype == "bfloat16"
    assert judge_settings(run_config, cfg.model.name, both_scorings=True).eval.generate


def test_another_model_is_judged_with_its_own_probe_format_and_template(run_config):
    judge = judge_settings(run_config, "qwen2.5-coder-1.5b")
    assert judge.eval.probe == probe_format_for("qwen2.5-coder-1.5b")
    assert (judge.template, judge.dtype) == (None, "bfloat16")
    assert (judge.eval.rates, judge.eval.frame_guard) == (run_config.eval.rates, run_config.eval.frame_guard)
