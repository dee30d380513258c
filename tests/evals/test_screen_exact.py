"""The screen's fast path (:meth:`ProxyReplay.evaluate_many`: a program's episodes batched in its
pooled sandbox processes, decisions, checks and accounting remembered) gives exactly the results
of the reference (:meth:`ProxyReplay.evaluate_reference`: every request decided in a sandbox call
of its own, checked in full, accounted afresh), for seed programs, rule programs and a rule
program on a base seed, on tasks of two suites, cold and with everything remembered."""

from __future__ import annotations

from dataclasses import replace

import pytest

from evals.cache.evaluator import EvalConfig, PolicySpec, TaskResult
from evals.cache.fidelity import DryEngine, EvidenceTable, ProxyReplay
from evals.tasks import load_suite
from search_spaces.cache import rules
from search_spaces.cache.seeds import seed_source

BASED = {**rules.rolling(6), "base": {"seed": "rolling_drop", "params": {"keep_tool_responses": 3,
                                                                        "reposition": "calls"}}}
MENTIONED = {"rules": [{"action": "drop", "when": {"all": [{"f": "role", "is": "tool"},
                                                          {"f": "age_tools", "op": ">=", "param": "r_keep"},
                                                          {"not": {"f": "mentions", "op": ">=",
                                                                   "param": "r_ment"}}]}}],
             "reposition": None, "defaults": {"r_keep": 2, "r_ment": 1}}

PROGRAMS = [
    ("rolling_drop", seed_source("rolling_drop"), [
        {}, {"keep_tool_responses": 2}, {"keep_tool_responses": 2},  # the same set twice: remembered
        {"keep_tool_responses": 3, "target": "both_newest", "reposition": "calls", "reposition_every": 2},
        {"keep_tool_responses": 4, "trigger": "tokens", "trigger_tokens": 1024, "target_tokens": 600,
         "reposition": "tokens", "reposition_tokens": 900},
        {"keep_tool_responses": 1, "target": "both", "trigger": "calls", "every_calls": 2}]),
    ("scored_drop", seed_source("scored_drop"), [
        {"budget_tokens": 900, "protect_last": 2},
        {"budget_tokens": 1500, "targets": "any", "w_recency": -0.5, "reposition_tokens": 1200}]),
    ("thinking_drop", seed_source("thinking_drop"), [{"keep_turns": 0}, {"keep_turns": 2, "drop_batch": 3}]),
    ("rules", rules.render(rules.rolling(3)), [{}, {"r_keep": 5}]),
    ("rules-mentions", rules.render(MENTIONED), [{}, {"r_ment": 2}]),
    ("rules-based", rules.render(BASED), [{}, {"r_keep": 2}]),
]


@pytest.fixture(scope="module")
def suite_tasks():
    """The two shortest train tasks of ``horizon`` and of ``mixed``."""
    out = []
    for suite in ("horizon", "mixed"):
        out += sorted(load_suite(suite, "train"), key=lambda t: (len(t.messages), t.id))[:2]
    return out


@pytest.fixture(scope="module")
def dry(eng):
    return DryEngine.of(eng)


def _same(r: TaskResult) -> TaskResult:
    return replace(r, seconds=0.0)


@pytest.mark.parametrize("name, source, settings", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_the_fast_screen_equals_the_reference_field_by_field(dry, suite_tasks, name, source, settings):
    table = EvidenceTable.assumed(suite_tasks)
    fast, slow = (ProxyReplay(dry, table, EvalConfig(generate=False)) for _ in range(2))
    dropped_any = False
    for params in settings:
        spec = PolicySpec("program", params, source=source, label=name)
        reference = [_same(slow.evaluate_reference(spec, t)) for t in suite_tasks]
        assert all(r.ok for r in reference), [r.error for r in reference]
        for _ in range(2):  # cold, then with the decisions and the accounting remembered
            assert [_same(r) for r in fast.evaluate_many(spec, suite_tasks)] == reference
        dropped_any = dropped_any or any(r.requests[-1].usage["drop_skipped_tokens"] for r in reference)
    assert dropped_any  # the settings do drop something on these tasks


class _WordEmbedder:
    """Embeds a text as counts of a few words (intent relevance without the MiniLM model)."""

    name = "words"

    def embed(self, texts):
        return [(*(float(t.lower().count(w)) for w in ("order", "the", "error", "file", "page")), 1.0)
                for t in texts]


def test_a_program_on_intent_relevance_screens_as_the_reference(dry, suite_tasks, monkeypatch):
    """Episodes that carry relevance are other episodes (their own keys, their own decisions)."""
    import search_spaces.cache.policy as policy

    monkeypatch.setattr(policy, "default_embedder", _WordEmbedder)
    table = EvidenceTable.assumed(suite_tasks)
    fast, slow = (ProxyReplay(dry, table, EvalConfig(generate=False)) for _ in range(2))
    for params in ({"budget_tokens": 900, "w_intent": 1.5, "w_recency": 0.2}, {"budget_tokens": 900}):
        spec = PolicySpec("program", params, source=seed_source("scored_drop"), label="scored")
        reference = [_same(slow.evaluate_reference(spec, t)) for t in suite_tasks]
        assert all(r.ok for r in reference), [r.error for r in reference]
        for _ in range(2):
            assert [_same(r) for r in fast.evaluate_many(spec, suite_tasks)] == reference


SEVENTH = '''SEEN = []


def decide(request, params):
    SEEN.append(request.n)
    if request.messages[1].content == {content!r} and len(SEEN) == 7:
        raise ValueError("the seventh request")
    plan = request.plan()
    if request.n > 4:
        plan.drop(3, [1])
    return plan


def space(trial):
    return {{}}
'''


def test_a_program_failing_on_the_seventh_request_of_one_task_fails_every_task_as_before(dry, suite_tasks):
    """The reason is the one the screen gave before it batched, kept and remembered anything
    (the second task is the first episode of the second sandbox process), and a failure is never
    remembered as a result."""
    proxy = ProxyReplay(dry, EvidenceTable.assumed(suite_tasks), EvalConfig(generate=False))
    spec = PolicySpec("program", {}, source=SEVENTH.format(content=suite_tasks[1].messages[1]["content"]))
    reason = ("ProgramFailure: program failed: decide: ValueError (line 7): the seventh request "
              "[episode 0, request of 14 messages]")
    for _ in range(2):
        assert [(r.ok, r.error) for r in proxy.evaluate_many(spec, suite_tasks)] == [(False, reason)] * len(suite_tasks)
    assert proxy.results_reused == 0
