"""The replay evaluator: exact accounting against the real engine, probes, failures as results."""

from __future__ import annotations

from engine import Engine
from evals.cache.evaluator import EvalConfig, PolicySpec, Replay, evaluate, request_cuts
from evals.cache.probes import ProbeFormat, answer_matches, probe_prompt, verbatim_lead_in
from search_spaces import request_points


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


SESSION_SPECS = [
    PolicySpec("full"), PolicySpec("rolling_drop", {"keep_tool_responses": 1}),
    PolicySpec("rolling_drop", {"keep_tool_responses": 2, "reposition": "calls", "reposition_every": 1}),
    PolicySpec("thinking_drop"), PolicySpec("drop_evidence"), PolicySpec("standard", {"window": 256}),
]


def _program(name: str, **params) -> PolicySpec:
    from search_spaces.cache.seeds import seed_source

    return PolicySpec("program", params, source=seed_source(name), label=name)


def test_a_session_compiled_once_is_billed_as_the_tree_bills_each_request(tasks, eng):
    """The evaluator compiles a cache policy's session once and accounts it request by request
    (``SessionAccountant.request_layout``); a pool bound too large to evict anything sends it down
    the general path instead (each request compiled and planned on a radix tree): every request's
    usage and the cost must be equal. Text baselines take the general path in both."""
    specs = [*SESSION_SPECS, _program("thinking_drop"), _program("scored_drop", budget_tokens=300),
             _program("rolling_drop", keep_tool_responses=0, reposition="calls", reposition_every=1)]
    fast = Replay(eng, EvalConfig(generate=False))
    tree = Replay(eng, EvalConfig(generate=False, pool_bytes=1 << 50))
    compiled = 0
    for task in tasks:
        for spec in specs:
            a, b = fast.evaluate(spec, task), tree.evaluate(spec, task)
            assert a.ok and b.ok, (a.error, b.error)
            assert a.requests == b.requests and a.cost == b.cost, (spec.display, task.id)
            assert [p.passed for p in a.probes] == [p.passed for p in b.probes]
        cuts = request_cuts(task)
        for spec in specs:
            policy = spec.build()
            decisions = (dict(zip(cuts, policy.run_episodes([fast.episode(task)])[0])) if policy is not None
                         else dict.fromkeys(cuts))
            compiled += fast._session_layout(task, list(request_points(list(task.messages))), decisions) is not None
    assert compiled >= (len(specs) - 1) * len(tasks)  # every cache policy on every task (Standard may not)
