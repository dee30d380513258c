"""Every input that ever crashed a parser under ``bench.fuzz`` is now refused cleanly (or accepted
with its invariants), and the targets themselves report what they should.

The corpus is ``tests/fuzz/<target>/``; the fuzzer adds to it, a fix makes its replay pass.
"""

from __future__ import annotations

import pytest

from bench import fuzz_targets
from bench.fuzz_targets import TARGETS, Broken, corpus, run, seeds, tree_state

CASES = [(t, p) for t in TARGETS for p in corpus(t)]


@pytest.mark.parametrize(("target", "path"), CASES, ids=[f"{t}/{p.name}" for t, p in CASES])
def test_every_input_that_once_crashed_is_now_handled(tiny, target, path):
    run(target, path.read_bytes(), engine=tiny)


@pytest.mark.parametrize("target", TARGETS)
def test_the_seeds_run_and_a_byte_soup_is_refused(tiny, target):
    for data in seeds(target, tiny):
        run(target, data, engine=tiny)
    for junk in (b"", b"\x00\xff" * 64, b"{" * 5000, b'{"messages": [{"role": {}}]}', b"[]"):
        run(target, junk, engine=tiny)


def test_a_crash_inside_a_parser_is_not_swallowed(tiny, monkeypatch):
    """The targets catch only the parsers' own refusals: an unexpected exception propagates (the fuzzer
    records it). Planted here in the template's message check, which both the body and log targets use."""
    import engine.template

    def broken(message, index):
        raise KeyError("planted")

    monkeypatch.setattr(engine.template, "normalize_message", broken)
    import evals.tasks.logs
    monkeypatch.setattr(evals.tasks.logs, "normalize_message", broken)
    with pytest.raises(KeyError, match="planted"):
        run("openai", seeds("openai", tiny)[0], engine=tiny)


def test_a_refused_snapshot_that_changed_the_tree_is_a_crash(tiny, monkeypatch):
    """The snapshot target's oracle: a refusal must leave the tree as it was."""
    from engine import SnapshotError

    def half_done(eng, data, label):
        eng.tree.pool_used += 1  # what a loader that wrote before validating would leave behind
        raise SnapshotError("refused late", field="path", value=label)

    seed = seeds("snapshot", tiny)[0]  # before the state is taken: building a seed prefills into the tree
    monkeypatch.setattr("engine.snapshot.warm", half_done)
    before = tree_state(tiny)
    try:
        with pytest.raises(Broken, match="changed the engine's tree"):
            run("snapshot", seed, engine=tiny)
    finally:
        tiny.tree.pool_used = before[1]
    assert fuzz_targets.tree_state(tiny) == before
