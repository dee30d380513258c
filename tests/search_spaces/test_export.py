"""Export: a standalone, standard-library-only module that decides like the in-framework policy."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from search_spaces import Policy, PolicyError, ProgramPolicy, estimate_tokens, export_policy, get_policy, request_points
from tests.search_spaces.trajectories import recorded

POLICIES = [
    ("full", {}),
    ("rolling_drop", {}),
    ("rolling_drop", {"keep_tool_responses": 3, "target": "both", "reposition": "calls", "reposition_every": 2}),
    ("rolling_drop", {"keep_tool_responses": 2, "trigger": "tokens", "trigger_tokens": 600, "target_tokens": 300,
                      "reposition": "tokens", "reposition_tokens": 500}),
    ("thinking_drop", {"keep_turns": 2}),
    ("scored_drop", {"budget_tokens": 500, "m_recency_pressure": -0.5, "reposition_tokens": 700}),
]


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"exported_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("name", "params"), POLICIES)
def test_exported_module_decides_like_the_policy(tmp_path, name, params):
    policy = get_policy(name, **params)
    module = _load(export_policy(policy, tmp_path / "policy.py"))
    for msgs in recorded():
        for n in request_points(msgs):
            prefix = msgs[:n]
            assert module.decide(prefix) == policy.decide(prefix, token_counts=estimate_tokens(prefix))
            counts = [7 + i % 5 * 40 for i in range(n)]
            assert module.decide(prefix, counts) == policy.decide(prefix, token_counts=counts)


def test_exported_program_policy(tmp_path):
    source = ("DEFAULTS = {'every': 2}\n\n\ndef decide(request, params):\n    plan = request.plan()\n"
              "    tools = request.tool_responses()\n    for t in tools[params['every']::params['every']]:\n"
              "        plan.drop(t, [t - 1])\n    return plan\n\n\ndef space(trial):\n    return {}\n")
    policy = Policy.from_program(source, {"every": 3})
    assert isinstance(policy, ProgramPolicy)
    module = _load(export_policy(policy, tmp_path / "evolved.py"))
    msgs = recorded()[0]
    assert module.decide(msgs) == policy.decide(msgs, token_counts=estimate_tokens(msgs))
    assert module.PARAMS == {"every": 3}
    assert policy.sha256 == module.PROGRAM_SHA256


def test_exported_module_runs_in_a_clean_interpreter(tmp_path):
    policy = get_policy("rolling_drop", keep_tool_responses=2)
    path = export_policy(policy, tmp_path / "akv_policy.py")
    tree = ast.parse(path.read_text())
    imported = {a.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 and node.module}
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}
    msgs = recorded()[1]
    body = {"model": "m", "messages": msgs, "max_tokens": 8, "cache": {"reposition": [1]}}
    run = subprocess.run([sys.executable, "-I", "-S", str(path)], input=json.dumps(body), capture_output=True,
                         text=True, cwd=tmp_path, env={}, timeout=60)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    expected = policy.decide(msgs, token_counts=estimate_tokens(msgs))
    assert out == {"model": "m", "messages": msgs, "max_tokens": 8, **expected}
    assert out["drop_message"]  # the trajectory is long enough for the rolling window to drop


@pytest.mark.parametrize(("name", "params", "match"), [
    ("standard", {}, "text baseline"),
    ("trim", {}, "text baseline"),
    ("scored_drop", {"w_intent": 0.5}, "sentence embeddings"),
])
def test_unexportable_policies_are_refused(tmp_path, name, params, match):
    with pytest.raises(PolicyError, match=match):
        export_policy(get_policy(name, **params), tmp_path / "x.py")
    assert not (tmp_path / "x.py").exists()
