"""Export: a standalone, standard-library-only module that decides like the in-framework policy."""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from search_spaces import Policy, PolicyError, ProgramPolicy, estimate_tokens, export_policy, get_policy, request_points
from search_spaces.sandbox.checker import CheckResult
from tests.exported import load_exported
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


@pytest.mark.parametrize(("name", "params"), POLICIES)
def test_exported_module_decides_like_the_policy(tmp_path, name, params):
    policy = get_policy(name, **params)
    module = load_exported(export_policy(policy, tmp_path / "policy.py"))
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
    module = load_exported(export_policy(policy, tmp_path / "evolved.py"))
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


# ---------------------------------------------------------------- hostile programs in exported modules
# The exported module used to run its program with every builtin: a program that passed the checker
# through a gap (here `open = None` in one function made `open` look defined in another) read
# /etc/passwd and created files when the module was imported and used in a plain interpreter.
SHADOWED_OPEN = '''CANARY = {canary!r}


def helper():
    open = None
    return open


def decide(request, params):
    found = []
    try:
        found = list(open("/etc/passwd"))
    except Exception:
        found = []
    try:
        open(CANARY, "w")
    except Exception:
        found = found + []
    return {{"drop_message": {{"3": [1]}} if found else {{}}, "reposition": [2], "found": found}}


def space(trial):
    return {{}}
'''

DUNDER_WALK = '''CANARY = {canary!r}


def decide(request, params):
    g = [c for c in ().__class__.__bases__[0].__subclasses__() if c.__name__ == "_wrap_close"][0].__init__.__globals__
    g["mkdir"](CANARY)
    return request.plan()


def space(trial):
    return {{}}
'''

FORMAT_WALK = '''CANARY = {canary!r}


def decide(request, params):
    text = "{{0.__func__.__globals__}}".format(request.plan)
    return {{"drop_message": {{}}, "reposition": [], "found": [text]}}


def space(trial):
    return {{}}
'''


def test_export_refuses_a_program_that_binds_a_builtins_name(tmp_path):
    source = SHADOWED_OPEN.format(canary=str(tmp_path / "canary"))
    with pytest.raises(PolicyError, match="binding the name 'open'"):
        export_policy(Policy.from_program(source, {}), tmp_path / "x.py")
    assert not (tmp_path / "x.py").exists()


def _export_unchecked(monkeypatch, source: str, path: Path, fmt: str = "module") -> Path:
    """Export ``source`` as if the static check had a gap (the module's own walls must hold)."""
    import search_spaces.cache.program as program_module
    import search_spaces.export as export_module

    def lenient(text: str) -> CheckResult:
        return CheckResult(True, "ok", hashlib.sha256(text.encode()).hexdigest())

    monkeypatch.setattr(program_module, "check_program", lenient)
    monkeypatch.setattr(export_module, "check_program", lenient)
    return export_policy(Policy.from_program(source, {}), path, fmt)


@pytest.mark.parametrize("fmt", ["module", "akv-harness"])
@pytest.mark.parametrize(("program", "imports"), [(SHADOWED_OPEN, True), (DUNDER_WALK, False), (FORMAT_WALK, False)])
def test_an_exported_hostile_program_touches_nothing_in_a_clean_interpreter(tmp_path, monkeypatch, program, imports,
                                                                           fmt):
    canary = tmp_path / "canary"
    path = _export_unchecked(monkeypatch, program.format(canary=str(canary)), tmp_path / "hostile.py", fmt)
    body = {"model": "m", "messages": recorded()[1][:4]}
    run = subprocess.run([sys.executable, "-I", "-S", str(path)], input=json.dumps(body), capture_output=True,
                         text=True, cwd=tmp_path, env={}, timeout=60)
    assert not canary.exists(), "the exported program created a file"
    assert "root:" not in run.stdout + run.stderr, "the exported program read /etc/passwd"
    if imports:  # passes the module's own check: runs, but without `open` (it would drop message 1)
        assert run.returncode == 0, run.stderr
        out = json.loads(run.stdout)
        assert out.get("found", []) == [] and out.get("drop_message", {}) == {} and out["reposition"] == [2]
        assert ("found" in out) == (fmt == "module")  # the harness face passes only the schedule on
    else:  # refused when the module is imported, before any program code runs
        assert run.returncode != 0 and "refuses its program" in run.stderr, run.stderr


@pytest.mark.parametrize("fmt", ["module", "akv-harness"])
def test_an_edited_exported_program_is_refused_on_import(tmp_path, fmt):
    path = export_policy(get_policy("rolling_drop"), tmp_path / "policy.py", fmt)
    text = path.read_text().replace("def decide(request, params):", "def decide(request, params):\n    x = 1", 1)
    path.write_text(text)
    run = subprocess.run([sys.executable, "-I", "-S", str(path)], input="{}", capture_output=True, text=True,
                         cwd=tmp_path, env={}, timeout=60)
    assert run.returncode != 0 and "does not match PROGRAM_SHA256" in run.stderr, run.stderr


@pytest.mark.parametrize("tail", ["", "\n", "  # ends with a quote: ''", "  # ends with 'x'", "\r\n"])
def test_the_embedded_source_reads_back_exactly(tmp_path, tail):
    source = "def decide(request, params):\n    return request.plan()\n\n\ndef space(trial):\n    return {}" + tail
    policy = Policy.from_program(source, {})
    module = load_exported(export_policy(policy, tmp_path / f"p{len(tail)}.py"))
    assert source == module.PROGRAM_SOURCE
    assert module.decide(recorded()[0][:3]) == {"drop_message": {}, "reposition": []}
