"""The replay evaluator: exact accounting against the real engine, probes, failures as results."""

from __future__ import annotations

from engine import Engine
from evals.cache.evaluator import EvalConfig, PolicySpec, Replay, evaluate
from evals.cache.probes import ProbeFormat, answer_matches, probe_prompt, verbatim_lead_in


def test_verbatim_lead_in_is_the_text_before_the_answer(tasks):
    for t in tasks:
        for p in t.probes:
            lead = verbatim_lead_in(t, p)
            texts = [str(t.messages[e].get("content", "")) + str(t.messages[e].get("reasoning_content") or "")
                     for e in p.evidence_ids]
            assert any(lead + p.answer in txt for txt in texts) or lead == p.cloze_prefix + " "
            prompt = probe_prompt(t, p, ProbeFormat())
            assert len(prompt.continuations) == len(p.candidates) >= 5


def test_answer_matching():
    assert answer_matches(" Linnet warehouse.", "Linnet") == (True, True)
    assert answer_matches(" the Linnet", "Linnet") == (False, True)
    assert answer_matches(" Keystone Freight, then", "Keystone Freight") == (True, True)


def test_replay_accounting_matches_the_engine_serving_the_same_session(tasks, eng):
    """The dry-run cost of a replay equals what the real engine reports for the same requests."""
    task = tasks[0]
    spec = PolicySpec("rolling_drop", {"keep_tool_responses": 2})
    replay = Replay(eng, EvalConfig())
    result = replay.evaluate(spec, task)
    assert result.ok, result.error
    served = Engine(eng.model, eng.tokenizer, "plain", name=eng.name)
    policy = spec.build()
    msgs = list(task.messages)
    for req in result.requests:
        n = req.n_messages
        sched = policy.decide(msgs[:n], token_counts=replay.token_counts(task)[:n])
        out = eng.renderer.output_ids(msgs[n], n) if n < len(msgs) else []
        # Serve the request, then make the engine "generate" the recorded assistant turn exactly.
        gen = served.start(msgs[:n], sched, max_tokens=max(1, len(out)), stop=[])
        for tok in out:
            gen.tokens.append(tok)
            if len(gen.tokens) == len(out):
                break
            from engine.decode import step_caches

            gen.hidden = step_caches(served.model, [gen.cache], [tok], [gen.next_pos + len(gen.tokens) - 1])[0]
        gen.done, gen.reason = True, "stop"
        usage = served.finish(gen).usage
        assert usage.as_dict() == req.usage, n
    served.check_integrity()


def test_evaluate_runs_policies_task_by_task_and_records_failures(tasks, eng):
    broken = ("def decide(request, params):\n    return {'drop_message': {'0': [5]}}\n\n"
              "def space(trial):\n    return {}\n")
    specs = [PolicySpec("full"), PolicySpec("standard", {"window": 512}), PolicySpec("drop_evidence"),
             PolicySpec("program", {}, source=broken, label="broken")]
    results = evaluate(eng, specs, tasks[:2], EvalConfig(scoring="generate"))
    assert [r.policy for r in results[:4]] == ["full", "standard", "drop_evidence", "broken"]
    by = {r.policy: r for r in results[:4]}
    assert by["full"].ok and by["full"].cost_cents > 0 and len(by["full"].probes) == len(tasks[0].probes)
    assert by["standard"].ok
    assert not by["broken"].ok and by["broken"].error and by["broken"].probes == ()
    assert all(p.evidence_dropped for p in by["drop_evidence"].probes)
    row = by["full"].to_row()
    assert row["prompt_tokens"] == row["prefill_tokens"] + row["cached_tokens"] + row["drop_skipped_tokens"]
    eng.check_integrity()


def test_dropping_history_costs_less_than_full(tasks, eng):
    replay = Replay(eng, EvalConfig())
    full = replay.evaluate(PolicySpec("full"), tasks[1])
    drop = replay.evaluate(PolicySpec("rolling_drop", {"keep_tool_responses": 1}), tasks[1])
    assert drop.cost_cents < full.cost_cents
    assert sum(r.usage["drop_skipped_tokens"] for r in drop.requests) > 0
