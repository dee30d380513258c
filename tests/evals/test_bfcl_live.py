"""evals.bfcl.live: BFCL tasks played live, every turn judged by BFCL's checker.

A scripted model (exact control over the calls) checks the verdicts: the gold calls replayed pass
every turn, a wrong call fails its turn, hostile replies are invalid calls that never run, a crash
resumes without re-sending. Then the real path: ``akv live`` against an ``akv serve`` app on the tiny
random model over HTTP, with a policy's schedule on every request."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from engine.durable import CheckpointStore
from engine.errors import RemoteUnavailableError
from evals.bfcl.data import Entry
from evals.bfcl.live import RESULTS_FILE, BfclLiveConfig, live_summary, run_bfcl_episode, run_bfcl_live
from evals.errors import AKVError
from search_spaces import get_policy
from tests.evals.test_live import Reply  # the scripted model's reply, as akv live's tests have it


def call(name, **args):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


class Scripted:
    """Stands in for the model: ``script(turn, step)`` is the reply at that point of the task (the turn
    counted from the user messages, the step from the replies since the last one). Records what it
    was asked; ``fail_at``: the request index that raises as an unreachable server would."""

    def __init__(self, script, fail_at=None, renders_tools=False):
        self.script, self.fail_at = script, fail_at
        self.renderer = SimpleNamespace(template=SimpleNamespace(renders_tools=renders_tools))
        self.asked: list[tuple[list, dict | None, dict]] = []

    def chat(self, messages, schedule=None, **sampling):
        if self.fail_at is not None and len(self.asked) == self.fail_at:
            self.fail_at = None
            raise RemoteUnavailableError("server went away", server="http://127.0.0.1:1")
        self.asked.append(([dict(m) for m in messages], schedule, dict(sampling)))
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        step = sum(m["role"] == "assistant" for m in messages[users[-1]:])
        return Reply(self.script(len(users) - 1, step))


def gold_script(task):
    """The gold calls of each turn as one reply of ``<tool_call>`` blocks, then no call."""
    gold = task.meta["bfcl"]["gold"]
    return lambda turn, step: "[" + ", ".join(gold[turn]) + "]" if step == 0 and gold[turn] else "Done."


def test_the_gold_calls_played_live_pass_every_turn_and_reach_the_backends(small_task, tmp_path):
    model = Scripted(gold_script(small_task))
    e = run_bfcl_episode(model, None, "full", small_task, CheckpointStore(tmp_path))
    j = e.judgement
    assert j.ok and j.passed and [t.passed for t in j.turns] == [True, True], j
    assert j.turns[0].calls == ("cd(folder='document')", "mkdir(dir_name='temp')",
                                "mv(source='final_report.pdf', destination='temp')")
    assert [t.steps for t in j.turns] == [2, 2] and e.calls == 5 and e.invalid_calls == 0
    # the outputs came from the backends into the conversation; the second turn's question followed
    last = model.asked[-1][0]
    tools = [m for m in last if m["role"] == "tool"]
    assert [m["name"] for m in tools] == ["cd", "mkdir", "mv", "cd", "grep"]
    assert json.loads(tools[0]["content"]) == {"current_working_directory": "document"}
    assert "budget analysis" in [m for m in last if m["role"] == "user"][1]["content"]
    assert e.usage["prompt_tokens"] == 4 * 1000 and e.cost_cents > 0
    # the system setup: BFCL's instructions, the tools in the text for a template that does not render them
    assert "Here is a list of functions" in last[0]["content"] and "tools" not in last[0]


def test_a_wrong_call_fails_its_turn_and_its_state_carries_on(small_task, tmp_path):
    gold = gold_script(small_task)

    def script(turn, step):
        return "[mkdir(dir_name='elsewhere')]" if (turn, step) == (0, 0) else gold(turn, step)

    e = run_bfcl_episode(Scripted(script), None, "full", small_task, CheckpointStore(tmp_path))
    t0, t1 = e.judgement.turns
    assert not t0.passed and t0.reason.startswith("multi_turn:instance_state_mismatch")
    assert not t1.passed and not e.judgement.passed  # the model's own state carries into the next turn
    [row] = live_summary([e], ["full"])
    assert row["turn_accuracy"]["rate"] == 0 and row["task_accuracy"]["n"] == 1 and row["calls"] == 3


HOSTILE = ["__import__('os').system('touch PWNED')", "__import__('os')", "os.system('touch PWNED')",
           "cd(folder=open('PWNED', 'w').name)", "rm_everything()", "cd(**{'folder': 'x'})",
           "cd(folder=(lambda: 'x')())"]


def test_hostile_replies_are_invalid_calls_never_run(small_task, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    replies = {(0, 0): "[" + ", ".join(HOSTILE) + "]",
               (1, 0): call("eval", source="1") + call("__import__", module="os")}
    e = run_bfcl_episode(Scripted(lambda turn, step: replies.get((turn, step), "Done.")), None, "full", small_task,
                         CheckpointStore(tmp_path / "s"), BfclLiveConfig(max_steps=3))
    assert e.judgement.ok and e.calls == 0 and not (tmp_path / "PWNED").exists()
    refused = [r for t in e.judgement.turns for r in t.refused]
    assert len(refused) == e.invalid_calls == len(HOSTILE) + 2, refused
    assert "'__import__' is not a declared function" in refused[1] and "Attribute" in refused[0]
    assert "'rm_everything' is not a declared function" in refused[4] and "not a literal" in refused[3]
    assert "'eval' is not a declared function" in refused[-2]
    assert all(not t.passed and "empty_turn" in t.reason and t.steps == 1 for t in e.judgement.turns)
    assert all("\n" not in r for r in refused)


def test_tool_choice_is_required_on_a_turn_s_first_reply_and_auto_after(small_task, tmp_path):
    policy = get_policy("rolling_drop", keep_tool_responses=1)
    for choice, want in (("required", ["required", "auto"] * 2), ("auto", ["auto"] * 4)):
        model = Scripted(gold_script(small_task), renders_tools=True)
        e = run_bfcl_episode(model, policy, "rolling_drop", small_task, CheckpointStore(tmp_path / choice),
                             BfclLiveConfig(tool_choice=choice))
        assert e.judgement.passed and [s.get("tool_choice") for _, _, s in model.asked] == want
        assert model.asked[0][0][0]["tools"] == list(small_task.tools)  # declared: the request's tools
        messages, schedule, _ = model.asked[-1]
        assert schedule == policy.decide(messages) and schedule["drop_message"]  # five outputs, keep one
        assert e.judgement.turns[1].dropped_messages > 0
    with pytest.raises(AKVError, match="tool_choice"):
        BfclLiveConfig(tool_choice="none")


def test_a_crashed_run_resumes_without_resending_and_exports_its_episodes(small_task, tmp_path):
    from evals.bfcl.export import export_episodes
    from evals.tasks.logs import load_log

    run = tmp_path / "run"
    first = Scripted(gold_script(small_task), fail_at=2)
    [e1] = run_bfcl_live(first, [(None, "full")], [small_task], run, header={"model": "scripted"})
    assert not e1.judgement.ok and e1.transient and "server went away" in e1.judgement.error
    assert not (run / RESULTS_FILE).read_text().splitlines()[1:]  # a transient failure is not a finished episode
    second = Scripted(gold_script(small_task))
    [e2] = run_bfcl_live(second, [(None, "full")], [small_task], run, header={"model": "scripted"})
    assert e2.judgement.passed and e2.replayed_steps == 6 and len(second.asked) == 2  # the turn's end, turn 2
    assert e2.usage["prompt_tokens"] == 4 * 1000  # every request's usage, replayed ones too
    third = Scripted(gold_script(small_task))
    [e3] = run_bfcl_live(third, [(None, "full")], [small_task], run, header={"model": "scripted"})
    assert third.asked == [] and e3.to_row() == e2.to_row()  # the finished episode comes from the log
    with pytest.raises(AKVError, match="another run"):
        run_bfcl_live(third, [(None, "full")], [small_task], run, header={"model": "another"})
    openai_path, atif_path = export_episodes(run, [("full", small_task)], "scripted")
    [log] = load_log(openai_path)
    [traj] = load_log(atif_path)
    assert log.messages == traj.messages and traj.meta["model"] == "scripted"
    roles = [m["role"] for m in log.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "tool", "assistant", "user", "assistant", "tool",
                     "tool", "assistant"]
    calls = [c for m in log.messages for c in m.get("tool_calls") or ()]
    assert [c["function"]["name"] for c in calls] == ["cd", "mkdir", "mv", "cd", "grep"]
    assert json.loads(calls[2]["function"]["arguments"]) == {"source": "final_report.pdf", "destination": "temp"}
    results = [m for m in log.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == [c["id"] for c in calls]


def test_the_gold_history_passes_on_a_long_context_task(tmp_path):
    """A whole long-context task (its extended backends) played with the gold calls: every turn passes."""
    from evals.bfcl.data import read_entries, to_task

    task = to_task(read_entries("multi_turn_long_context")[0])
    e = run_bfcl_episode(Scripted(gold_script(task)), None, "full", task, CheckpointStore(tmp_path))
    assert e.judgement.passed and len(e.judgement.turns) == len(Entry.of_task(task).turns)


def test_akv_live_on_a_bfcl_suite_against_the_server(tiny, small_task, tmp_path, monkeypatch, capsys):
    """The real path: ``akv live`` -> RemoteEngine -> HTTP -> akv server on the tiny random model, a
    policy's schedule on every request. The random model writes no acceptable call, so the turns fail
    as BFCL's checker says; the run prints the accuracies, calls, invalid calls and cost, and a rerun
    sends nothing."""
    from engine import Engine
    from engine.server import ServerThread, create_app
    from rsi.cli import main

    monkeypatch.setattr("evals.bfcl.cli.load_tasks", lambda *a: SimpleNamespace(tasks=[small_task], split="train"))
    served = Engine(tiny.model, tiny.tokenizer, "chatml", name=tiny.name)
    run = tmp_path / "run"
    with ServerThread(create_app(served, snapshot_dir=tmp_path / "snaps")) as srv:
        argv = ["live", "--endpoint", srv.base_url, "--model", "tiny-random", "--template", "chatml", "--suite",
                "bfcl-base", "--limit", "1", "--policy", "rolling_drop", "--params", "keep_tool_responses=0",
                "--max-steps", "2", "--max-tokens", "6", "--run-dir", str(run)]
        assert main(argv) == 0
        sent = served.stats.requests
        assert sent >= 2  # at least a reply per turn
        out = capsys.readouterr().out
        assert "turn acc" in out and "invalid calls" in out and "cost" in out, out
        assert main(argv) == 0 and served.stats.requests == sent  # resumed from the log: nothing re-sent
    result = json.loads((run / "live.json").read_text())
    [row] = result["policies"]
    assert row["tasks"] == 1 and row["failed"] == 0 and row["turn_accuracy"]["n"] == 2
    assert row["cost_cents"] > 0 and row["invalid_calls"] + row["calls"] >= 0
    [episode] = result["episodes"]
    assert episode["usage"]["prompt_tokens"] > 0 and len(episode["turns"]) == 2
    assert (run / "episodes.openai.jsonl").exists() and (run / "episodes.atif.json").exists()


def test_akv_live_on_a_bfcl_suite_without_the_package_is_one_line(monkeypatch, tmp_path, capsys):
    from importlib import metadata

    from rsi.cli import main

    have = metadata.version

    def missing(name):
        if name == "bfcl-eval":
            raise metadata.PackageNotFoundError(name)
        return have(name)

    monkeypatch.setattr(metadata, "version", missing)
    code = main(["live", "--endpoint", "http://127.0.0.1:9", "--suite", "bfcl-long", "--split", "heldout", "--limit",
                 "4", "--model", "tiny-random", "--policy", "full", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "make bfcl" in err and len(err.splitlines()) == 1, err
