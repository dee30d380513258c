"""Shared fixtures: engines are loaded once per session and checked for integrity after every test."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest

import engine  # noqa: F401  (settings switch hub access off)

_ENGINES: dict[str, object] = {}


def get_engine(name: str, **kwargs):
    """A shared engine per (name, options); its tree persists across tests, like a server's."""
    from engine import Engine

    key = name + repr(sorted(kwargs.items()))
    if key not in _ENGINES:
        _ENGINES[key] = Engine.from_pretrained(name, **kwargs)
    return _ENGINES[key]


@pytest.fixture(autouse=True)
def _engines_stay_consistent():
    yield
    for eng in _ENGINES.values():
        eng.check_integrity()  # type: ignore[attr-defined]
        assert all(n.lock == 0 for n in eng.tree.nodes()), "a request left a lock behind"  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def tiny():
    return get_engine("tiny-random")


@pytest.fixture(scope="session")
def tiny_gemma():
    return get_engine("tiny-random-gemma3")


@pytest.fixture(scope="session")
def gemma():
    return get_engine("gemma-3-270m")
