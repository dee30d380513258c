"""Shared fixtures for the evals tests: a small generated task set (no model, no tokenizer)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest

from evals.tasks import SuiteSpec, Task, generate_split

SPEC = SuiteSpec("unit", 1, {"train": 3, "heldout": 3}, 800, 4000)


@pytest.fixture(scope="session")
def split_tasks() -> dict[str, list[Task]]:
    """Three tasks per family and split (the held-out split also has the held-out-only family)."""
    return {s: generate_split(SPEC, s) for s in ("train", "heldout")}


@pytest.fixture(scope="session")
def all_tasks(split_tasks) -> list[Task]:
    return split_tasks["train"] + split_tasks["heldout"]
