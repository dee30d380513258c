"""Export for an AKV harness: ``HarnessPolicy().decide(request) -> ContextDecision`` decides like the
in-framework policy, takes duck-typed requests with the reference's defaults, refuses what it
cannot carry, and runs in a clean interpreter with the standard library only."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from evals.cache.cli import read_program_file
from search_spaces import Policy, PolicyError, estimate_tokens, export_policy, get_policy, request_points
from tests.exported import load_exported
from tests.search_spaces import akv_reference as ref
from tests.search_spaces.trajectories import build, recorded

POLICIES = [
    ("full", {}),
    ("rolling_drop", {}),
    ("rolling_drop", {"keep_tool_responses": 2, "target": "both", "reposition": "calls", "reposition_every": 2}),
    ("rolling_drop", {"keep_tool_responses": 3, "target": "assistant_newest"}),
    ("rolling_drop", {"keep_tool_responses": 2, "trigger": "tokens", "trigger_tokens": 600, "target_tokens": 300,
                      "reposition": "tokens", "reposition_tokens": 500}),
    ("rolling_drop", {"keep_tool_responses": 4, "drop_after_call": 3, "drop_interval_calls": 2,
                      "reposition_after_call": 3, "reposition_interval_calls": 2}),
    ("scored_drop", {"budget_tokens": 500, "m_recency_pressure": -0.5, "reposition_tokens": 700}),
]


def _as_decision(wire: dict[str, Any]) -> tuple[Any, Any]:
    drops = {int(t): tuple(ids) for t, ids in wire["drop_message"].items()}
    return drops or None, tuple(wire["reposition"]) or None


@pytest.mark.parametrize(("name", "params"), POLICIES)
def test_harness_module_decides_like_the_policy(tmp_path, name, params):
    policy = get_policy(name, **params)
    module = load_exported(export_policy(policy, tmp_path / "policy.py", format="akv-harness"))
    counts = [7 + i % 5 * 40 for i in range(60)]
    counter = ref.Counter(counts, prefix=3, generation=2, with_counts=True)
    folded = [counts[0] + 3 + 2, *counts[1:]]  # message 0 carries the prompt prefix and the generation header
    nontrivial = 0
    for msgs in recorded():
        for n in request_points(msgs):
            prefix = msgs[:n]
            request = module.request_from_payload({"model": "m", "messages": prefix})
            d = module.HarnessPolicy().decide(request)
            assert (d.drop_message, d.reposition) == _as_decision(
                policy.decide(prefix, token_counts=estimate_tokens(prefix)))
            d = module.HarnessPolicy(token_counter=counter).decide(request)
            assert (d.drop_message, d.reposition) == _as_decision(policy.decide(prefix, token_counts=folded[:n]))
            assert d.messages is None and d.metadata["token_counts"] == "token_counter"
            nontrivial += bool(d.drop_message)
    assert nontrivial or name == "full"


def test_decision_shape_and_metadata(tmp_path):
    policy = get_policy("rolling_drop", keep_tool_responses=2, reposition="calls", reposition_every=2)
    module = load_exported(export_policy(policy, tmp_path / "policy.py", format="akv-harness"))
    msgs = build(["call"] * 5, [True])  # A2 T3 ... A10 T11
    d = module.HarnessPolicy().decide(module.request_from_payload({"messages": msgs}))
    assert d.drop_message == {7: (3,), 9: (5,), 11: (7,)} and d.reposition == (5, 9) and d.messages is None
    assert d.metadata["dropped_message_ids"] == [3, 5, 7] and d.metadata["params"] == policy.params
    assert d.metadata["program_sha256"] == module.PROGRAM_SHA256 and d.metadata["label"] == "rolling_drop"
    body = module.apply_decision({"model": "m", "messages": msgs, "max_tokens": 4}, d)
    assert body == {"model": "m", "messages": msgs, "max_tokens": 4, "drop_message": {"7": [3], "9": [5], "11": [7]},
                    "reposition": [5, 9]}
    empty = module.HarnessPolicy().decide(module.request_from_payload({"messages": msgs[:4]}))
    assert empty.drop_message is None and empty.reposition is None  # None when empty, as the reference
    assert module.apply_decision({"messages": msgs[:4]}, empty) == {"messages": msgs[:4]}


def test_duck_typed_requests_default_like_the_reference(tmp_path):
    policy = get_policy("rolling_drop", keep_tool_responses=1, reposition_after_call=1, reposition_interval_calls=1)
    module = load_exported(export_policy(policy, tmp_path / "policy.py", format="akv-harness"))
    msgs = build(["call"] * 3, [False])  # A2 T3 A4 T5 A6 T7
    harness = module.HarnessPolicy()
    # only messages: no completed calls, so no call-driven reposition (rolling drops still happen)
    d = harness.decide(SimpleNamespace(messages=msgs))
    assert (d.drop_message, d.reposition) == ({5: (3,), 7: (5,)}, None)
    cfg = {"keep_tool_responses": 1, "reposition_after_call": 1, "reposition_interval_calls": 1}
    assert (d.drop_message, d.reposition) == ref.decide(cfg, msgs)
    # every attribute, as an akvalgo PolicyRequest would carry it
    full = SimpleNamespace(messages=msgs, call_index=3, tools=(), completed_call_message_ids=(3, 5, 7),
                           prompt_end_message_ids={}, enable_thinking=None, reasoning_effort=None, api_style=None)
    d = harness.decide(full)
    assert (d.drop_message, d.reposition) == ({5: (3,), 7: (5,)}, (3, 5, 7))
    assert (d.drop_message, d.reposition) == ref.decide(cfg, msgs, call_index=3, boundaries=(3, 5, 7))
    # call_index without the call ends it counts: refused, as the reference refuses it
    with pytest.raises(ValueError, match="0 call ends for call_index 3"):
        harness.decide(SimpleNamespace(messages=msgs, call_index=3))
    with pytest.raises(ValueError):
        ref.decide(cfg, msgs, call_index=3)
    # ... but only when the policy needs call ends: the plain rolling window ignores them
    plain = load_exported(export_policy(get_policy("rolling_drop", keep_tool_responses=1), tmp_path / "plain.py",
                                format="akv-harness"))
    assert plain.HarnessPolicy().decide(SimpleNamespace(messages=msgs, call_index=3)).drop_message == {5: (3,), 7: (5,)}


@pytest.mark.parametrize(("ends", "match"), [
    ((3, 7, 5), "must increase"),
    ((3, 4, 7), "message 4 has role 'assistant'"),
    ((3, 5, 99), "99 is not a message id"),
    ((3, 5, "7"), "'7' is not a message id"),
])
def test_bad_call_ends_are_refused_in_one_line(tmp_path, ends, match):
    policy = get_policy("rolling_drop", keep_tool_responses=1, drop_after_call=1)
    module = load_exported(export_policy(policy, tmp_path / "policy.py", format="akv-harness"))
    msgs = build(["call"] * 3, [False])
    with pytest.raises(ValueError, match=match) as err:
        module.HarnessPolicy().decide(SimpleNamespace(messages=msgs, call_index=3, completed_call_message_ids=ends))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("msgs", "match"), [
    ([{"role": "system", "content": "s"}, {"role": "tool", "tool_call_id": "x", "content": "r"}], "no assistant"),
    ([{"role": "robot", "content": "s"}], "has role 'robot'"),
    ([{"role": "user", "content": "u"}, {"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "b"}]},
      {"role": "tool", "tool_call_id": "a", "content": "r"}], "incomplete"),
    ([{"role": "user", "content": "u"}, {"role": "assistant", "tool_calls": [{"id": "a"}]},
      {"role": "tool", "tool_call_id": "z", "content": "r"}], "did not make"),
    ([{"role": "user", "content": "u"}, {"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "a"}]}], "distinct"),
])
def test_malformed_histories_are_refused_like_the_reference(tmp_path, msgs, match):
    module = load_exported(export_policy(get_policy("rolling_drop"), tmp_path / "policy.py", format="akv-harness"))
    with pytest.raises(ValueError, match=match):
        module.HarnessPolicy().decide(SimpleNamespace(messages=msgs))
    with pytest.raises(ValueError):
        ref.decide({"keep_tool_responses": 12}, msgs)


CATCHER = '''def decide(request, params):
    plan = request.plan()
    try:
        ends = request.call_ends()
    except ValueError:
        ends = [3]
    for t in ends:
        plan.reposition(t)
    return plan


def space(trial):
    return {}
'''

REASONING = '''def decide(request, params):
    plan = request.plan()
    plan.drop_reasoning(3, [2])
    return plan


def space(trial):
    return {}
'''


def test_a_program_cannot_swallow_a_refused_request(tmp_path):
    path = export_policy(Policy.from_program(CATCHER, {}), tmp_path / "catcher.py", format="akv-harness")
    module = load_exported(path)
    msgs = build(["call"] * 2, [False])
    assert module.HarnessPolicy().decide(SimpleNamespace(messages=msgs, call_index=2,
                                                         completed_call_message_ids=[3, 5])).reposition == (3, 5)
    with pytest.raises(ValueError, match="call_index 2"):
        module.HarnessPolicy().decide(SimpleNamespace(messages=msgs, call_index=2))


def test_reasoning_drops_cannot_be_carried(tmp_path):
    with pytest.raises(PolicyError, match="drop_rule"):
        export_policy(get_policy("thinking_drop"), tmp_path / "t.py", format="akv-harness")
    assert not (tmp_path / "t.py").exists()
    module = load_exported(export_policy(Policy.from_program(REASONING, {}), tmp_path / "r.py", format="akv-harness"))
    with pytest.raises(ValueError, match="drop_rule"):
        module.HarnessPolicy().decide(SimpleNamespace(messages=build(["call"], [True])))


@pytest.mark.parametrize(("name", "params", "fmt", "match"), [
    ("standard", {}, "akv-harness", "text baseline"),
    ("text_engineering", {}, "akv-harness", "text baseline"),
    ("scored_drop", {"w_intent": 0.5}, "akv-harness", "sentence embeddings"),
    ("rolling_drop", {}, "sglang", "unknown export format 'sglang'"),
])
def test_unexportable_policies_are_refused_in_one_line(tmp_path, name, params, fmt, match):
    with pytest.raises(PolicyError, match=match) as err:
        export_policy(get_policy(name, **params), tmp_path / "x.py", format=fmt)
    assert "\n" not in str(err.value) and not (tmp_path / "x.py").exists()


def test_apply_decision_refuses_a_body_with_cache_fields(tmp_path):
    module = load_exported(export_policy(get_policy("rolling_drop"), tmp_path / "policy.py", format="akv-harness"))
    msgs = build(["call"], [False])
    decision = module.HarnessPolicy().decide(module.request_from_payload({"messages": msgs}))
    for field in ("drop_message", "reposition", "drop_rule", "cache"):
        with pytest.raises(ValueError, match=field):
            module.apply_decision({"messages": msgs, field: {}}, decision)
        with pytest.raises(ValueError, match=field):
            module.request_from_payload({"messages": msgs, field: {}})


def test_harness_module_runs_in_a_clean_interpreter_and_reads_as_a_program(tmp_path):
    source = ("DEFAULTS = {'every': 2}\n\n\ndef decide(request, params):\n    plan = request.plan()\n"
              "    tools = request.tool_responses()\n    for t in tools[params['every']::params['every']]:\n"
              "        plan.drop(t, [t - 1])\n    return plan\n\n\ndef space(trial):\n    return {}\n")
    policy = Policy.from_program(source, {"every": 3})
    path = export_policy(policy, tmp_path / "evolved.py", format="akv-harness")
    tree = ast.parse(path.read_text())
    imported = {a.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 and node.module}
    assert imported and imported <= set(sys.stdlib_module_names)
    msgs = recorded()[1][:20]
    body = {"model": "m", "messages": msgs, "max_tokens": 8}
    run = subprocess.run([sys.executable, "-I", "-S", str(path)], input=json.dumps(body), capture_output=True,
                         text=True, cwd=tmp_path, env={}, timeout=60)
    assert run.returncode == 0, run.stderr
    expected = policy.decide(msgs, token_counts=estimate_tokens(msgs))
    assert expected["drop_message"] and not expected["reposition"]
    assert json.loads(run.stdout) == {**body, "drop_message": expected["drop_message"]}
    program = read_program_file(path)  # akv eval --program reads the harness module too, without running it
    assert program.exported and program.params == {"every": 3} and program.source == source
