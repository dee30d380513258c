"""Shared fixtures for the evals tests: a small generated task set (no model, no tokenizer)."""

from __future__ import annotations

import os
from dataclasses import replace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest

from engine import Engine
from evals.tasks import SuiteSpec, Task, generate_split, load_suite

SPEC = SuiteSpec("unit", 1, {"train": 3, "heldout": 3}, 800, 4000)


@pytest.fixture(scope="session", params=["varied", "copyable"])
def split_tasks(request) -> dict[str, list[Task]]:
    """Three tasks per family and split (the held-out split also has the held-out-only family), per evidence style."""
    spec = replace(SPEC, evidence_style=request.param)
    return {s: generate_split(spec, s) for s in ("train", "heldout")}


@pytest.fixture(scope="session")
def all_tasks(split_tasks) -> list[Task]:
    return split_tasks["train"] + split_tasks["heldout"]


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    """The first three train tasks of the stored ``smoke`` suite."""
    return load_suite("smoke", "train")[:3]


@pytest.fixture(scope="module")
def eng() -> Engine:
    """The tiny random model under the plain template, with a radix tree of its own per test module."""
    from tests.conftest import get_engine

    base = get_engine("tiny-random")
    return Engine(base.model, base.tokenizer, "plain", name=base.name)


def short_bfcl_task(entry_id: str, turns: int) -> Task:
    """The first ``turns`` turns of BFCL's multi-turn base entry ``entry_id``, declaring only the
    functions its gold calls (a short prompt: seconds on CPU)."""
    from evals.bfcl.data import read_entries, to_task

    entry = next(e for e in read_entries("multi_turn_base") if e.id == entry_id)
    entry = replace(entry, turns=entry.turns[:turns], gold=entry.gold[:turns])
    used = {c.split("(")[0] for turn in entry.gold for c in turn}
    full = to_task(entry)
    unused = tuple(t["function"]["name"] for t in full.tools if t["function"]["name"] not in used)
    return to_task(replace(entry, excluded=entry.excluded + unused))


@pytest.fixture(scope="module")
def small_task() -> Task:
    """A real two-turn BFCL task declaring only the functions its gold calls (a short prompt: seconds on CPU)."""
    return short_bfcl_task("multi_turn_base_0", 2)
