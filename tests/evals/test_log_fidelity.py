"""Probe-free fidelity on agent logs: the full cache changes nothing (closed form), a dropping policy
equals a slow reference (each turn scored by a fresh engine of its own), and akv eval reports it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import Engine
from engine.template import get_template
from evals.cache.evaluator import EvalConfig, PolicySpec, Replay
from evals.cache.log_fidelity import measure, passes, scored_turns, summarize, turn_text
from evals.tasks.logs import load_log
from rsi.cli import main
from search_spaces import request_points
from tests.conftest import get_engine

OPENAI = Path(__file__).resolve().parents[2] / "docs" / "examples" / "openai-chat.jsonl"
DROP = PolicySpec("rolling_drop", {"keep_tool_responses": 1})


@pytest.fixture(scope="module")
def engine():
    base = get_engine("tiny-random")
    return Engine(base.model, base.tokenizer, "plain", pool_bytes=64 << 20, name=base.name)


def test_turn_text_is_the_assistant_turn_after_the_generation_prompt():
    plain, chatml = get_template("plain"), get_template("chatml")
    msg = {"role": "assistant", "content": "Done.", "reasoning_content": "check"}
    assert turn_text(plain, msg, 3) == " <think>\ncheck\n</think>\nDone."
    assert turn_text(chatml, {"role": "assistant", "content": "ok"}, 2) == "ok"
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}
    assert turn_text(chatml, call, 2) == "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>"


def test_the_full_cache_changes_nothing_and_a_drop_equals_a_fresh_engine_per_turn(engine):
    task = load_log(OPENAI)[0]
    replay = Replay(engine, EvalConfig())
    full, drop = measure(replay, [PolicySpec("full"), DROP], task)
    turns = scored_turns(list(task.messages), request_points(list(task.messages)))
    assert [t.index for t in full.turns] == turns == [2, 4, 7, 9]
    assert all(t.delta_per_token == 0.0 and not t.first_changed for t in full.turns)  # closed form: no change
    assert full.cost_cents == full.full_cost_cents and drop.cost_cents < full.cost_cents
    # the reference: each turn under the policy's decision, scored by an engine that has seen nothing else
    decisions = replay.episode(task)
    policy_decisions = dict(zip(decisions.cuts, DROP.build().run_episodes([decisions])[0]))
    changed = 0
    for t in drop.turns:
        fresh = Engine(engine.model, engine.tokenizer, "plain", pool_bytes=64 << 20, name=engine.name)
        d = policy_decisions[t.index]
        ref = fresh.score(list(task.messages[: t.index]), [turn_text(fresh.renderer.template, task.messages[t.index],
                                                                      t.index)], d.schedule if d else None)
        assert ref.n_tokens[0] == t.n_tokens
        assert t.logprob_policy == pytest.approx(ref.logprobs[0], abs=1e-3 * t.n_tokens)
        changed += abs(t.logprob_policy - t.logprob_full) > 1e-4
    assert changed > 0  # the drops reach the scores (this test could fail if the schedule were ignored)
    assert (passes(drop, 10.0) and not passes(drop, 0.0)) or drop.worst_delta == 0.0


def test_summary_intervals_cover_the_point_estimates(engine):
    tasks = load_log(OPENAI)
    replay = Replay(engine, EvalConfig())
    rows = [f for t in tasks for f in measure(replay, [DROP], t, first_tokens=False)]
    s = summarize(rows, 0.5, samples=200)
    assert s["conversations"] == 2 and s["turns"] == sum(len(r.turns) for r in rows)
    lo, hi = s["cost_delta_ci95"]
    assert lo <= s["cost_delta_pct"] <= hi + 1e-9 and s["cost_delta_pct"] < 0
    mlo, mhi = s["mean_delta_ci95"]
    assert mlo - 1e-12 <= s["mean_delta_per_token"] <= mhi + 1e-12


@pytest.mark.slow
def test_akv_eval_on_a_log_reports_fidelity(tmp_path, capsys):
    out = tmp_path / "fid.json"
    assert main(["eval", "--suite", str(OPENAI), "--split", "all", "--model", "tiny-random", "--compare",
                 "full,read_drop:min_tokens=8", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "probe-free fidelity on 2 conversations" in text and "read_drop" in text
    data = json.loads(out.read_text())
    assert data["mode"] == "fidelity" and [p["policy"] for p in data["policies"]] == ["full", "read_drop(min_tokens=8)"]
    assert data["policies"][0]["mean_delta_per_token"] == 0.0 and len(data["conversations"]) == 4


@pytest.mark.parametrize("bound", ["-1", "inf", "nan"])
def test_a_bad_fidelity_bound_is_one_line(bound, tmp_path, capsys):
    out = tmp_path / "fid.json"
    assert main(["eval", "--suite", str(OPENAI), "--split", "all", "--model", "tiny-random", "--policy", "full",
                 "--fidelity-bound", bound, "--out", str(out)]) == 2
    assert "--fidelity-bound must be a finite number >= 0" in capsys.readouterr().err and not out.exists()
