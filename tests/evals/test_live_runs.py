"""Many live episodes at once (``evals.cache.live_runs``, ``akv live --concurrency N`` with several
policies): episodes in flight together, results in a fixed order, the same answers and verdicts as
one at a time against the real server (reply and token differences counted), and resume after an
interruption without redoing a finished episode."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

import pytest

from engine import Engine
from engine.errors import AKVError
from engine.remote import RemoteEngine
from engine.server import ServerThread, create_app
from evals.cache.cli import live_policies
from evals.cache.live import LiveConfig
from evals.cache.live_runs import LivePolicy, run_policies
from rsi.cli import main
from search_spaces import get_policy
from tests.evals.test_live import TASK, Reply

TASKS = [replace(TASK, id=f"hand/live/{k:03d}") for k in range(3)]
POLICIES = "full,rolling_drop:keep_tool_responses=1"
LABELS = ("full", "rolling_drop-keep_tool_responses=1")


class HeldModel:
    """Answers every turn in text (ending the episode); the first task's replies wait until every
    other episode has answered, so episodes finish out of order. Counts the requests in flight."""

    def __init__(self, others: int) -> None:
        self.lock = threading.Lock()
        self.n_others, self.now, self.most = others, 0, 0
        self.released = threading.Event()

    def chat(self, messages, schedule=None, **sampling):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        if "hand/live/000" in json.dumps(messages):
            assert self.released.wait(120), "the other episodes never finished"  # a guard, not a timing
        else:
            time.sleep(0.01)
            with self.lock:
                self.n_others -= 1
                if self.n_others == 0:
                    self.released.set()
        with self.lock:
            self.now -= 1
        return Reply("Tern")


def _ask_task_id(task):  # the question names its task, so the model can tell the episodes apart
    probe = replace(task.probes[0], question=f"{task.probes[0].question} ({task.id})")
    return replace(task, probes=(probe,))


def test_episodes_run_n_at_once_and_come_back_in_a_fixed_order(tmp_path):
    tasks = [_ask_task_id(t) for t in TASKS]
    model = HeldModel(others=4)
    entries = [LivePolicy("full", None, tmp_path / "full"),
               LivePolicy("keep1", get_policy("rolling_drop", keep_tool_responses=1), tmp_path / "keep1")]
    finished: list[tuple[str, str]] = []
    runs = run_policies(model, entries, tasks, concurrency=3, progress=False,
                        on_result=lambda r: finished.append((r.policy, r.task_id)))
    assert model.most == 3  # three episodes in flight at once
    assert list(runs) == ["full", "keep1"]
    for results in runs.values():
        assert [r.task_id for r in results] == [t.id for t in tasks] and all(r.exact for r in results)
    assert tasks[0].id not in {t for _, t in finished[:3]}  # the held task finished late, yet it comes first
    with pytest.raises(AKVError, match=r"--concurrency must be an integer >= 1.*got 0"):
        run_policies(model, entries, tasks, concurrency=0)
    with pytest.raises(AKVError, match="own run directory; given twice"):
        run_policies(model, [entries[0], replace(entries[1], run_dir=entries[0].run_dir)], tasks)


def test_several_policies_are_named_as_compare_names_them():
    named = live_policies(POLICIES, {})
    assert [label for label, _ in named] == list(LABELS) and named[0][1] is None
    assert [label for label, _ in live_policies("rolling_drop", {"keep_tool_responses": 2})] == [
        "rolling_drop-keep_tool_responses=2"]  # one policy with --params: the label it always had
    with pytest.raises(AKVError, match="--params goes with one --policy"):
        live_policies(POLICIES, {"keep_tool_responses": 2})
    with pytest.raises(AKVError, match="names a policy twice"):
        live_policies("full,full", {})


def test_concurrent_episodes_against_the_server_equal_the_sequential_run(tiny_gemma, tmp_path, capsys):
    """``akv live --concurrency 3`` over three tasks and two policies against ``akv serve``
    (tiny random gemma 3, whose greedy replies vary token by token; greedy): the same answers and
    verdicts as ``--concurrency 1``; the replies and tokens that differ are counted in
    ``versus_reference``. The server batched the episodes' decode steps (three generations
    advanced in one step)."""
    suite = tmp_path / "tasks.jsonl"
    suite.write_text("".join(json.dumps({"id": t.id, "messages": list(t.messages), "probes": [  # a prompt each
        {"after_message": 6, "question": f"{TASK.probes[0].question} ({t.id})", "answer": "Tern"}]}) + "\n"
                             for t in TASKS))
    served = Engine(tiny_gemma.model, tiny_gemma.tokenizer, "gemma", name=tiny_gemma.name)
    widest = [0]
    step = served.step

    def counted_step(generations):
        widest[0] = max(widest[0], len(generations))
        return step(generations)

    served.step = counted_step  # type: ignore[method-assign]
    with ServerThread(create_app(served, snapshot_dir=tmp_path / "snaps")) as srv:
        base = ["live", "--endpoint", srv.base_url, "--model", "tiny-random-gemma3", "--template", "gemma", "--suite",
                str(suite), "--split", "all", "--limit", "3", "--max-steps", "2", "--max-tokens", "8",
                "--policy", POLICIES]
        assert main([*base, "--run-dir", str(tmp_path / "one")]) == 0
        assert widest[0] == 1
        assert main([*base, "--concurrency", "3", "--run-dir", str(tmp_path / "three"),
                     "--reference", str(tmp_path / "one")]) == 0
        assert widest[0] == 3
    said = capsys.readouterr().out
    assert said.count("versus ") == 2
    for label in LABELS:
        one = json.loads((tmp_path / "one" / label / "live.json").read_text())
        three = json.loads((tmp_path / "three" / label / "live.json").read_text())
        assert three["policy"] == label and three["concurrency"] == 3
        assert [e["task_id"] for e in three["episodes"]] == sorted(t.id for t in TASKS)
        assert [(e["answer"], e["exact"]) for e in three["episodes"]] == [
            (e["answer"], e["exact"]) for e in one["episodes"]]
        versus = three["summary"]["versus_reference"]
        assert versus["episodes"] == 3 and versus["unpaired"] == 0
        assert versus["answers_differ"] == versus["verdicts_differ"] == 0
        assert versus["turns"] >= 3 and versus["tokens_differ"] >= 0  # counted; batching may change a token
    assert main([*base, "--concurrency", "0"]) == 2
    assert "--concurrency must be an integer >= 1" in capsys.readouterr().err


def test_an_interrupted_concurrent_run_resumes_without_redoing_finished_episodes(tiny, tmp_path):
    """Killed after two episodes finished (others in flight, others not started), the rerun replays
    every finished episode from its checkpoints (no request) and plays only the rest."""

    class Killed(Exception):
        pass

    served = Engine(tiny.model, tiny.tokenizer, "gemma", name=tiny.name)
    config = LiveConfig(max_steps=2, max_tokens=8)
    entries = [LivePolicy("full", None, tmp_path / "full"),
               LivePolicy("keep1", get_policy("rolling_drop", keep_tool_responses=1), tmp_path / "keep1")]
    finished = []

    def kill_after_two(r):
        finished.append(r)
        if len(finished) == 2:
            raise Killed

    with (ServerThread(create_app(served, snapshot_dir=tmp_path / "snaps")) as srv,
          RemoteEngine(srv.base_url, "tiny-random", template="gemma") as remote):
        with pytest.raises(Killed):
            run_policies(remote, entries, TASKS, config, concurrency=3, progress=False, on_result=kill_after_two)
        sent = served.stats.requests
        runs = run_policies(remote, entries, TASKS, config, concurrency=3, progress=False)
        resent = served.stats.requests - sent
    results = [r for rs in runs.values() for r in rs]
    assert len(results) == 6 and all(r.error is None for r in results)
    done = {(r.policy, r.task_id) for r in finished}
    for r in results:
        if (r.policy, r.task_id) in done:
            assert r.replayed_steps == r.steps  # finished before the kill: replayed, nothing sent
    assert resent == sum(r.steps - r.replayed_steps for r in results) < sum(r.steps for r in results)
