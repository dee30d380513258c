"""Fixtures for search tests: a tiny config and a plain-template tiny engine."""

from __future__ import annotations

import pytest

from engine import Engine
from rsi.cache.config import config_from_dict

TINY = {
    "name": "tiny-test",
    "seed": 3,
    "generations": 1,
    "seeds": ["rolling_drop"],
    "experts": ["full", "rolling_drop:keep_tool_responses=1"],
    "model": {"name": "tiny-random", "template": "plain", "pool_gb": 0.25},
    "data": {"suite": "smoke", "train_tasks": 2, "heldout_tasks": 1},
    "eval": {"scoring": "loglik", "generate": False},
    "proposer": {"kind": "mutation", "per_generation": 2, "parents": 2},
    "optuna": {"sampler": "tpe", "trials": 2, "fidelity_tasks": 1},
    "heldout_front": 1,
}


def tiny_config(**changes):
    raw = {**TINY}
    for k, v in changes.items():
        if isinstance(v, dict):
            raw[k] = {**raw.get(k, {}), **v}
        else:
            raw[k] = v
    return config_from_dict(raw)


@pytest.fixture(scope="session")
def tiny_plain():
    from tests.conftest import get_engine

    base = get_engine("tiny-random")
    return Engine(base.model, base.tokenizer, "plain", pool_bytes=256 << 20, name=base.name)


@pytest.fixture(scope="session")
def finished(tmp_path_factory, tiny_plain):
    """A finished tiny search (shared by the search, report and browser tests)."""
    from rsi.cache.search import Search

    run_dir = tmp_path_factory.mktemp("search") / "run"
    Search(tiny_config(), run_dir, engine=tiny_plain).run()
    return run_dir
