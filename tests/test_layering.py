"""Imports go one way: engine <- search_spaces <- evals <- rsi <- bench (checked on the source,
statically; ``make lint`` checks the same layers with import-linter)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"engine": ("search_spaces", "evals", "rsi", "bench"), "search_spaces": ("evals", "rsi", "bench"),
             "evals": ("rsi", "bench"), "rsi": ("bench",)}


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append((node.lineno, node.module))
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_package_imports_no_package_above_it(package):
    bad = [f"{path.relative_to(ROOT)}:{line} imports {name}"
           for path in sorted((ROOT / package).rglob("*.py"))
           for line, name in _imports(path) if name.split(".")[0] in FORBIDDEN[package]]
    assert not bad, "\n".join(bad)


def test_each_package_offers_its_names_through_its_init():
    """``evals`` exports the evaluators lazily (PEP 562): the same objects as their modules, and an
    unknown name is still an AttributeError (so ``hasattr`` and ``from evals import X`` behave)."""
    import evals
    from evals.cache.evaluator import EvalConfig, PolicySpec, Replay
    from evals.cache.fidelity import ProxyReplay

    assert (evals.Replay, evals.EvalConfig, evals.PolicySpec, evals.ProxyReplay) == (
        Replay, EvalConfig, PolicySpec, ProxyReplay)
    assert set(evals.__all__) >= {"Replay", "EvalConfig", "PolicySpec", "ProxyReplay", "TaskResult"}
    assert not hasattr(evals, "NoSuchThing")
