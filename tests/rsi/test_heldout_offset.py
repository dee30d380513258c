"""``data.heldout_offset``: a search judged on held-out tasks an earlier run never saw, and the
refusals of bad values."""

from __future__ import annotations

import pytest

from evals.tasks import load_suite, select_tasks
from rsi.cache.task_sets import heldout_tasks
from rsi.config import ConfigError
from tests.rsi.conftest import tiny_config


@pytest.mark.parametrize("value", [-1, True, "3", 1.5])
def test_bad_heldout_offsets_are_refused_naming_the_value(value):
    with pytest.raises(ConfigError, match=r"data\.heldout_offset must be an integer >= 0, got"):
        tiny_config(data={"heldout_offset": value})


def test_the_search_takes_its_held_out_tasks_after_the_offset():
    pool = load_suite("smoke", "heldout")
    assert [t.id for t in heldout_tasks(tiny_config(data={"heldout_tasks": 1, "heldout_offset": 1}))] == [
        t.id for t in select_tasks(pool, 2)[1:]]
    with pytest.raises(ConfigError, match=f"data.heldout_offset: offset must be below the {len(pool)} tasks"):
        heldout_tasks(tiny_config(data={"heldout_offset": len(pool)}))
