"""The zero-forward fidelity: exact cost, predicted pass from the model's own control outcomes,
no forward, one policy run for many tasks; Spearman against its closed form."""

from __future__ import annotations

import random
import re

import pytest

from evals.cache.evaluator import DIAGNOSTIC, EvalConfig, PolicySpec, Replay, request_cuts
from evals.cache.fidelity import DryEngine, EvidenceTable, ProxyReplay, check_fidelity, spearman
from search_spaces.cache.seeds import seed_source


@pytest.fixture(scope="module")
def controls(eng, tasks):
    replay = Replay(eng, EvalConfig(generate=False))
    full = [replay.evaluate(PolicySpec("full"), t) for t in tasks]
    dropped = [replay.evaluate(PolicySpec(DIAGNOSTIC), t) for t in tasks]
    return replay, full, dropped


POLICIES = [PolicySpec("full"), PolicySpec("rolling_drop", {"keep_tool_responses": 1}),
            PolicySpec("rolling_drop", {"keep_tool_responses": 3}),
            PolicySpec("program", {"keep_tool_responses": 2}, source=seed_source("rolling_drop"), label="seed"),
            PolicySpec("standard", {"window": 512})]


@pytest.mark.parametrize("spec", POLICIES, ids=lambda s: s.display)
def test_proxy_costs_equal_the_model_replay_and_passes_follow_the_controls(eng, tasks, controls, spec):
    """Cost and tokens are the model replay's exactly; each predicted pass is the model's own
    outcome on that probe with its evidence kept (full) or dropped (drop_evidence), chosen by
    whether the model replay of the same policy saw the evidence dropped."""
    replay, full, dropped = controls
    proxy = ProxyReplay(eng, EvidenceTable.fit(full, dropped), EvalConfig(generate=False))
    before = eng.stats.requests, eng.stats.prefill_tokens
    predicted = proxy.evaluate_many(spec, tasks)
    assert (eng.stats.requests, eng.stats.prefill_tokens) == before  # no forward at all
    summarized = 0
    for task, p, f, d in zip(tasks, predicted, full, dropped):
        m = replay.evaluate(spec, task)
        assert p.ok and m.ok and p.fidelity == "proxy" and m.fidelity == "model"
        assert p.cost == m.cost and [r.usage for r in p.requests] == [r.usage for r in m.requests]
        runs = spec.build().run_episode(list(task.messages), token_counts=replay.token_counts(task),
                                        cuts=request_cuts(task)) if spec.name == "standard" else ()
        at = dict(zip(request_cuts(task), runs))
        for probe, pp, mp, fp, dp in zip(task.probes, p.probes, m.probes, f.probes, d.probes):
            assert pp.evidence_dropped == mp.evidence_dropped
            copies = {e for e in probe.evidence_ids if _says(task.messages[e], probe.answer)}
            gone = set(mp.evidence_dropped)
            decision = at.get(probe.after_message + 1)
            summary = decision.meta.get("summary") if decision is not None else None
            in_summary = bool(summary) and _says({"content": summary}, probe.answer)
            summarized += in_summary
            attended = not (set(probe.evidence_ids) - copies) & gone and (not copies or bool(copies - gone)
                                                                          or in_summary)
            assert pp.passed == (fp.passed if attended else dp.passed)
    assert spec.name != "standard" or summarized  # the fixture's tasks do exercise a summary that keeps a fact


def _says(message: dict, answer: str) -> bool:
    """The message's content, reasoning or tool-call arguments contain ``answer`` as a whole phrase."""
    calls = " ".join(str((c.get("function") or c).get("arguments", "")) for c in message.get("tool_calls") or ())
    text = f"{message.get('content') or ''} {message.get('reasoning_content') or ''} {calls}".lower()
    return re.search(r"(?<!\w)" + re.escape(answer.lower()) + r"(?!\w)", text) is not None


def test_one_attended_copy_of_the_answer_is_enough_but_every_hop_is_needed():
    """By hand: probe 0's answer is in a tool response (1) and restated in reasoning (2); probe 1
    is multi-hop (3 leads to 4, which holds the answer)."""
    from types import SimpleNamespace

    from evals.cache.fidelity import ProbeOutcome
    from evals.tasks.schema import Probe

    messages = [{"role": "user", "content": "track order 7"},
                {"role": "tool", "content": "order 7: carrier Norvale, status held"},
                {"role": "assistant", "content": "", "reasoning_content": "The carrier is Norvale."},
                {"role": "tool", "content": "ticket 12 belongs to order 7"},
                {"role": "tool", "content": "order 7 ships from Dock B"}]
    probes = (Probe(4, "carrier?", "Norvale", evidence_ids=(1, 2)), Probe(4, "dock of ticket 12?", "Dock B",
                                                                          evidence_ids=(3, 4), kind="multi_hop"))
    task = SimpleNamespace(id="t", probes=probes, messages=messages)
    table = EvidenceTable({("t", 0): ProbeOutcome(True, False), ("t", 1): ProbeOutcome(True, False)})
    assert table.evidence(task, 0) == ({1, 2}, set()) and table.evidence(task, 1) == ({4}, {3})
    assert [table.predict(task, 0, d) for d in (set(), {1}, {2}, {1, 2})] == [True, True, True, False]
    assert [table.predict(task, 1, d) for d in (set(), {3}, {4}, {0})] == [True, False, False, True]
    # A summary in place of folded messages is one more copy when it mentions the answer; never a hop.
    assert table.predict(task, 0, {1, 2}, "order 7 (carrier Norvale) is held") is True
    assert table.predict(task, 0, {1, 2}, "order 7 is held") is False
    assert table.predict(task, 1, {3}, "ticket 12: order 7 ships from Dock B") is False


def test_the_controls_reproduce_themselves(eng, tasks, controls):
    _, full, dropped = controls
    proxy = ProxyReplay(eng, EvidenceTable.fit(full, dropped))
    assert [p.passed for r in proxy.evaluate_many(PolicySpec("full"), tasks) for p in r.probes] == \
        [p.passed for r in full for p in r.probes]
    assert [p.passed for r in proxy.evaluate_many(PolicySpec(DIAGNOSTIC), tasks) for p in r.probes] == \
        [p.passed for r in dropped for p in r.probes]


def test_unknown_tasks_and_broken_programs_are_failed_results(eng, tasks, controls):
    _, full, dropped = controls
    proxy = ProxyReplay(eng, EvidenceTable.fit(full[:1], dropped[:1]))
    out = proxy.evaluate_many(PolicySpec("full"), tasks)
    assert out[0].ok and not out[1].ok and tasks[1].id in (out[1].error or "")
    source = "def space(trial):\n    return {}\n\n\ndef decide(request, params):\n    return 1 / 0\n"
    bad = PolicySpec("program", {}, source=source, label="bad")
    assert all(not r.ok and "ZeroDivisionError" in (r.error or "") for r in proxy.evaluate_many(bad, tasks[:1]))
    with pytest.raises(Exception, match="different tasks"):
        EvidenceTable.fit(full[:2], dropped[:1])


def test_spearman_equals_the_closed_form_without_ties():
    rng = random.Random(3)
    for n in (3, 5, 12, 40):
        xs = rng.sample(range(1000), n)
        ys = rng.sample(range(1000), n)
        rx = {v: i for i, v in enumerate(sorted(xs))}
        ry = {v: i for i, v in enumerate(sorted(ys))}
        d2 = sum((rx[x] - ry[y]) ** 2 for x, y in zip(xs, ys))
        assert spearman(xs, ys) == pytest.approx(1 - 6 * d2 / (n * (n * n - 1)), abs=1e-12)


def test_spearman_with_ties_and_degenerate_inputs():
    # ranks with ties averaged: x -> [1, 2.5, 2.5, 4], y -> [1, 2, 3, 4]; Pearson of those is 0.9486833
    assert spearman([1, 2, 2, 3], [10, 20, 30, 40]) == pytest.approx(0.9486832980505138)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) != spearman([1, 1, 1], [1, 2, 3])  # nan: a constant side
    with pytest.raises(ValueError, match="pairs"):
        spearman([1, 2], [1])
    check = check_fidelity({"a": (0.1, 0.2), "b": (0.5, 0.4), "c": (0.9, 0.8)})
    assert check.spearman == pytest.approx(1.0) and not check.enough and "30 are needed" in check.summary()
    flat = check_fidelity({"a": (1.0, 1.0), "b": (1.0, 0.5), "c": (1.0, 0.0)})  # the proxy passes everything
    assert "no rank correlation" in flat.summary() and "nan" not in flat.summary() and "misses" not in flat.summary()


def test_a_dry_engine_screens_exactly_as_the_loaded_engine(eng, tasks, controls):
    """Without weights (renderer + KV size only) the proxy gives the same results."""
    _, full, dropped = controls
    table = EvidenceTable.fit(full, dropped)
    spec = PolicySpec("rolling_drop", {"keep_tool_responses": 1})
    a = ProxyReplay(eng, table).evaluate_many(spec, tasks)
    b = ProxyReplay(DryEngine.of(eng), table).evaluate_many(spec, tasks)
    assert [(r.cost, [p.passed for p in r.probes]) for r in a] == [(r.cost, [p.passed for p in r.probes]) for r in b]


def test_remembered_accounting_equals_accounting_afresh(eng, tasks, controls):
    """Two settings that decide alike on a task (keeping more tool responses than the task has) are
    accounted once; every result equals a proxy that remembers nothing, and no two results share
    a usage dict (one result edited leaves the others alone)."""
    _, full, dropped = controls
    table = EvidenceTable.fit(full, dropped)
    specs = [PolicySpec("rolling_drop", {"keep_tool_responses": k}) for k in (1, 500, 900, 1, 2)]
    remembering, afresh = ProxyReplay(eng, table), ProxyReplay(eng, table)
    afresh.MEMO_SIZE = 0
    for spec in specs:
        a, b = remembering.evaluate_many(spec, tasks), afresh.evaluate_many(spec, tasks)
        assert [(r.cost, [q.usage for q in r.requests], [p.passed for p in r.probes]) for r in a] == \
               [(r.cost, [q.usage for q in r.requests], [p.passed for p in r.probes]) for r in b]
    assert afresh.accounting_hits == 0
    assert remembering.accounting_hits == 2 * len(tasks)  # 900 decides as 500 does, and 1 comes twice
    first, again = (remembering.evaluate_many(specs[0], tasks)[0] for _ in range(2))
    first.requests[0].usage["prefill_tokens"] = -1
    assert again.requests[0].usage["prefill_tokens"] >= 0
