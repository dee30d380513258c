"""The live-agent evaluator: tools over a task's corpus, the episode loop with a scripted model
(exact control over the tool calls), crash and resume without re-running side effects, and an
end-to-end episode over HTTP against the real server."""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from engine import Engine
from engine.cache.plan import TokenUsage
from engine.durable import CheckpointStore
from engine.errors import AKVError, RemoteError, RemoteUnavailableError
from engine.remote import RemoteEngine
from engine.server import ServerThread, create_app
from evals.cache.live import Corpus, LiveConfig, calculate, run_episode, run_live, summary
from evals.tasks.schema import Probe, Task
from search_spaces import get_policy

TASK = Task(
    id="hand/live/001",
    messages=(
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Reconcile the orders."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "sql_query", "arguments": '{"sql": "orders"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "sql_query",
         "content": "order 4821 ships from warehouse Tern; order 5530 ships from warehouse Linnet"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "tail_logs", "arguments": '{"source": "dock"}'}}]},
        {"role": "tool", "tool_call_id": "c2", "name": "tail_logs",
         "content": "dock-planner: carrier Halden booked for 12 pallets; weather delay at Tern"},
        {"role": "assistant", "content": "Both checked."},
        {"role": "user", "content": "Later note."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c3", "type": "function", "function": {"name": "read", "arguments": '{"doc": "x"}'}}]},
        {"role": "tool", "tool_call_id": "c3", "name": "read", "content": "order 4821 was moved to Osprey"},
    ),
    probes=(Probe(after_message=6, question="Which warehouse does order 4821 ship from?", answer="Tern",
                  evidence_ids=(3,)),),
)
USAGE = TokenUsage(prompt_tokens=1000, prefill_tokens=600, cached_tokens=300, drop_skipped_tokens=100,
                   repos_tokens=50, completion_tokens=20)


@dataclass
class Reply:
    text: str
    usage: TokenUsage = USAGE
    token_ids: tuple[int, ...] = ()


class ScriptedModel:
    """Stands in for the model where a test needs exact control of what it writes; records what
    it was asked (messages and schedule). ``fail_at``: the call index that raises as an
    unreachable server would."""

    def __init__(self, replies, fail_at=None):
        self.replies, self.fail_at = list(replies), fail_at
        self.calls: list[tuple[list, dict | None]] = []
        self.sampling: list[dict] = []

    def chat(self, messages, schedule=None, **sampling):
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            self.fail_at = None
            raise RemoteUnavailableError("server went away", server="http://127.0.0.1:1")
        self.calls.append(([dict(m) for m in messages], schedule))
        self.sampling.append(dict(sampling))
        return Reply(self.replies[len(self.calls) - 1])


def call(name, **args):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


SCRIPT = ["Let me search.\n" + call("search", query="order 4821 warehouse"), call("read", doc_id="doc-3"),
          call("calculator", expression="12 * 2"), call("submit_answer", answer="Tern")]


@pytest.mark.parametrize(("expr", "want"), [("(120 - 45) * 3", "225"), ("7 / 2", "3.5"), ("2 ** 10", "1024"),
                                            ("1,250 + 10", "1260"), ("-(3 - 5) % 4", "2"), ("10 // 4", "2")])
def test_calculator_values(expr, want):
    assert calculate(expr) == want


@pytest.mark.parametrize(("expr", "why"), [("__import__('os').system('true')", "unsupported"),
                                           ("open('/etc/passwd')", "unsupported"), ("9 ** 9 ** 9", "power too large"),
                                           ("1 / 0", "division by zero"), ("2 +", "error"), ("x" * 300, "200")])
def test_calculator_refuses_hostile_input(expr, why):
    out = calculate(expr)
    assert out.startswith("error") and why in out


def test_corpus_holds_what_the_agent_had_seen_by_the_probe():
    corpus = Corpus.from_task(TASK, TASK.probes[0].after_message)
    assert set(corpus.docs) == {"doc-3", "doc-5"}  # doc-9 comes after the probe
    assert corpus.docs["doc-3"][0].startswith("sql_query")
    assert corpus.search("order 4821 warehouse").splitlines()[0].startswith("doc-3 (sql_query")
    assert corpus.search("Halden carrier").splitlines()[0].startswith("doc-5")
    assert corpus.search("zebra") == "no document matches 'zebra'"
    assert corpus.read("doc-5", 12) == "dock-planner"
    assert corpus.read("doc-99", 10).startswith("error: no document 'doc-99'")


def test_episode_runs_the_tools_the_model_calls_and_scores_the_answer(tmp_path):
    model = ScriptedModel(SCRIPT)
    policy = get_policy("rolling_drop", keep_tool_responses=1)
    r = run_episode(model, policy, "rolling_drop", TASK, 0, CheckpointStore(tmp_path))
    assert r.error is None and r.answer == "Tern" and r.exact and r.contains and r.submitted
    assert r.tool_calls == ["search", "read", "calculator", "submit_answer"] and r.steps == 4
    # The model saw each tool's result, and the policy's schedule came with every request.
    history = model.calls[-1][0]
    assert [m["role"] for m in history[-2:]] == ["assistant", "tool"] and history[-1]["content"] == "24"
    assert "order 4821 ships from warehouse Tern" in model.calls[2][0][-1]["content"]
    assert model.calls[-1][1] == policy.decide(history)
    assert model.calls[-1][1]["drop_message"]  # two tool responses, keep one: the older is dropped
    # Cost: four requests of USAGE at gpt-oss-120b rates (0.15 / 0.075 / 0.60 USD per million).
    per_request = (600 * 0.15 + 300 * 0.075 + 50 * 0.075 + 20 * 0.60) / 1e6 * 100
    assert r.cost_cents == pytest.approx(4 * per_request, rel=1e-12)
    assert r.usage["prompt_tokens"] == 4000


def test_bad_calls_get_an_error_result_and_the_episode_goes_on(tmp_path):
    model = ScriptedModel([call("rm", path="/"), "<tool_call>{not json}</tool_call>",
                           '<tool_call>{"name": "read", "arguments": "doc-3"}</tool_call>', "Tern."])
    r = run_episode(model, None, "full", TASK, 0, CheckpointStore(tmp_path))
    assert r.invalid_calls == 3 and r.tool_calls == [] and r.answer == "Tern." and r.exact and not r.submitted
    results = [m["content"] for m in model.calls[-1][0] if m["role"] == "tool"]
    assert "unknown tool 'rm'" in results[0] and "not a JSON tool call" in results[1]
    assert "must be a JSON object" in results[2]


def test_max_steps_ends_an_episode_unanswered(tmp_path):
    model = ScriptedModel([call("search", query="order")] * 3)
    r = run_episode(model, None, "full", TASK, 0, CheckpointStore(tmp_path), LiveConfig(max_steps=3))
    assert r.answer is None and not r.exact and r.steps == 3 and r.tool_calls == ["search"] * 3


def test_a_crashed_episode_resumes_without_resending_or_rerunning_side_effects(tmp_path):
    store = CheckpointStore(tmp_path)
    first = ScriptedModel(SCRIPT, fail_at=2)
    r1 = run_episode(first, None, "full", TASK, 0, store)
    assert r1.error is not None and "server went away" in r1.error and r1.answer is None and r1.steps == 2
    second = ScriptedModel(SCRIPT[2:])  # only the turns not finished before the crash are asked for
    r2 = run_episode(second, None, "full", TASK, 0, store)
    assert r2.error is None and r2.answer == "Tern" and r2.exact and r2.replayed_steps == 4
    assert len(second.calls) == 2 and r2.steps == 4
    assert r2.tool_calls == ["search", "read", "calculator", "submit_answer"]
    # A finished episode replays entirely: no request, and submit_answer (a side effect) does not run again.
    third = ScriptedModel([])
    r3 = run_episode(third, None, "full", TASK, 0, store)
    assert third.calls == [] and r3.answer == "Tern" and r3.cost_cents == pytest.approx(r2.cost_cents)


def test_episode_end_to_end_over_http_against_the_server(tiny, tmp_path):
    """The real path: RemoteEngine -> HTTP -> akv server (tiny random model). The tiny model does
    not follow the tool protocol, so the episode ends on its first reply, scored wrong."""
    served = Engine(tiny.model, tiny.tokenizer, "gemma", name=tiny.name)
    config = LiveConfig(max_steps=2, max_tokens=8)
    policy = get_policy("rolling_drop", keep_tool_responses=1)
    with (ServerThread(create_app(served, snapshot_dir=tmp_path / "snaps")) as srv,
          RemoteEngine(srv.base_url, "tiny-random", template="gemma", check_usage="raise") as remote):
        results = run_live(remote, policy, "rolling_drop", [TASK], tmp_path / "run", config, progress=False)
        [r] = results
        assert r.error is None and r.steps >= 1 and r.usage["prompt_tokens"] > 0 and r.cost_cents > 0
        assert not r.exact  # a random model does not know where order 4821 ships from
        sent = served.stats.requests
        again = run_live(remote, policy, "rolling_drop", [TASK], tmp_path / "run", config, progress=False)
        assert served.stats.requests == sent  # resumed from its checkpoints: nothing re-sent
        assert again[0].answer == r.answer
    s = summary(results)
    assert s["episodes"] == 1 and s["pass_rate"] == 0.0 and s["errors"] == 0


def test_akv_live_sends_the_key_from_the_environment(tiny, tmp_path, monkeypatch, capsys):
    """``akv live`` against a server started with an API key: without AKV_API_KEY the first request
    is refused (401) and nothing runs; with it the episode runs."""
    import argparse

    from engine.server.tenants import Tenants
    from evals.cache.cli import live_cli as main_cli

    served = Engine(tiny.model, tiny.tokenizer, "gemma", name=tiny.name)
    probe = {"after_message": 9, "question": "Where does order 4821 ship from?", "answer": "Osprey"}
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"id": TASK.id, "messages": list(TASK.messages),
                                                      "probes": [probe]}) + "\n")
    with ServerThread(create_app(served, snapshot_dir=tmp_path / "snaps",
                                 tenants=Tenants(["alice:alice-key-0123456789"]))) as srv:

        def live(run: str) -> int:
            args = argparse.Namespace(suite=str(tmp_path / "tasks.jsonl"), split="all", limit=1, policy="full",
                                      run_dir=str(tmp_path / run), out=None, max_steps=1, max_tokens=4,
                                      tool_choice="required", rates="gpt-oss-120b", endpoint=srv.base_url,
                                      model="tiny-random", template="gemma", served_model=None, probes=1)
            return main_cli(args, {})

        monkeypatch.delenv("AKV_API_KEY", raising=False)
        with pytest.raises(RemoteError, match="HTTP 401: missing API key"):  # refused once, before any episode
            live("nokey")
        assert not (tmp_path / "nokey").exists()
        before = served.stats.requests
        monkeypatch.setenv("AKV_API_KEY", "alice-key-0123456789")
        assert live("key") == 0 and "errors 0" in capsys.readouterr().out
        assert served.stats.requests > before


def test_a_live_run_exports_as_openai_and_atif_logs_that_import_back(tmp_path):
    from evals.cache.live_export import ATIF_FILE, OPENAI_FILE, export_run
    from evals.tasks.logs import load_log

    run = tmp_path / "run"
    model = ScriptedModel(SCRIPT)
    r = run_episode(model, None, "full", TASK, 0, CheckpointStore(run / "sessions"))
    assert r.exact
    openai_path, atif_path = export_run(run, "scripted-model")
    assert (openai_path.name, atif_path.name) == (OPENAI_FILE, ATIF_FILE)
    [log] = load_log(openai_path)
    [traj] = load_log(atif_path)
    assert log.messages == traj.messages and traj.meta["model"] == "scripted-model"
    roles = [m["role"] for m in log.messages]
    assert roles[:2] == ["system", "user"] and roles[2:] == ["assistant", "tool"] * 4
    calls = [m["tool_calls"][0] for m in log.messages if m["role"] == "assistant"]
    assert [c["function"]["name"] for c in calls] == ["search", "read", "calculator", "submit_answer"]
    assert json.loads(calls[2]["function"]["arguments"]) == {"expression": "12 * 2"}
    assert log.messages[2]["content"] == "Let me search."  # the text before the call stays the content
    results = [m for m in log.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == [c["id"] for c in calls] and results[2]["content"] == "24"
    # what the model saw, in order: the export is the conversation of the episode
    assert [m["content"] for m in results] == [m["content"] for m in model.calls[-1][0] if m["role"] == "tool"] + [
        results[-1]["content"]]


def test_every_turn_asks_for_a_call_where_the_tools_are_declared(tmp_path):
    """A template that renders tool specs gets them declared and ``tool_choice`` sent each turn
    (required by default; auto on request); one that does not gets neither. ``min_tokens`` 1 always."""

    class Declaring(ScriptedModel):
        renderer = SimpleNamespace(template=SimpleNamespace(renders_tools=True))

    for model, config, want in ((Declaring(SCRIPT), LiveConfig(), "required"),
                                (Declaring(SCRIPT), LiveConfig(tool_choice="auto"), "auto"),
                                (ScriptedModel(SCRIPT), LiveConfig(), None)):
        r = run_episode(model, None, "full", TASK, 0, CheckpointStore(tmp_path / str(want)), config)
        assert r.exact and [s.get("tool_choice") for s in model.sampling] == [want] * 4
        assert {s["min_tokens"] for s in model.sampling} == {1}
        assert bool(model.calls[0][0][0].get("tools")) == (want is not None)
    for bad in ({"tool_choice": "none"}, {"min_tokens": 97}, {"min_tokens": -1}):
        with pytest.raises(AKVError) as err:
            LiveConfig(**bad)
        assert err.value.field == next(iter(bad))


def test_an_unknown_price_point_is_refused_before_any_episode():
    with pytest.raises(AKVError, match="unknown rates 'nope'"):
        LiveConfig(rates="nope")
