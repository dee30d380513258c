"""The Ray executor on a real local Ray instance (127.0.0.1): same results as in-process, task
affinity, replica crashes (SIGKILL) retried, hard timeouts recorded."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter

import pytest

from evals.cache.evaluator import EvalConfig, PolicySpec
from evals.cache.probes import ProbeFormat
from evals.tasks import load_suite
from rsi.cache.executors.base import EvalRequest
from rsi.cache.executors.local import LocalExecutor
from rsi.cache.executors.routing import HashRing, Router
from rsi.store import EvalStore, eval_key
from tests.rsi.conftest import tiny_config

EVAL = EvalConfig(scoring="loglik", generate=False, probe=ProbeFormat())
SLOW = ("def decide(request, params):\n    x = 0\n    while True:\n        x = x + 1\n\n"
        "def space(trial):\n    return {}\n")


def test_hash_ring_moves_few_tasks_when_a_replica_joins():
    ids = [f"task-{i}" for i in range(400)]
    two = HashRing(["a", "b"])
    three = HashRing(["a", "b", "c"])
    moved = sum(two.owner(t) != three.owner(t) for t in ids)
    assert 0.15 * len(ids) < moved < 0.5 * len(ids)
    assert all(three.owner(t) == "c" for t in ids if two.owner(t) != three.owner(t))


def test_router_keeps_tasks_together_and_steals_when_idle():
    r: Router[int] = Router(["a", "b"], affinity=True)
    for i in range(6):
        r.add("t1", i)
    owner = r.ring.owner("t1")
    other = "b" if owner == "a" else "a"
    assert r.next_for(owner) == 0
    assert r.next_for(other) is not None and r.stolen == 1
    rr: Router[int] = Router(["a", "b"], affinity=False)
    for i in range(4):
        rr.add("t1", i)
    assert len(rr.queues["a"]) == len(rr.queues["b"]) == 2


def _requests(tasks, specs):
    return [EvalRequest(s, t, eval_key(s.key, t.id, "tiny", EVAL.digest)) for t in tasks for s in specs]


@pytest.fixture(scope="module")
def ray_executor(tmp_path_factory):
    from rsi.cache.executors.ray_executor import RayExecutor

    cfg = tiny_config(executor={"kind": "ray", "replicas": 2, "timeout_s": 20.0})
    ex = RayExecutor(cfg, EVAL, EvalStore(tmp_path_factory.mktemp("ray") / "e.jsonl"), progress=False)
    yield ex
    ex.close()


def test_ray_results_equal_in_process_results(ray_executor, tiny_plain, tmp_path):
    tasks = load_suite("smoke", "train")[:3]
    specs = [PolicySpec("full"), PolicySpec("rolling_drop", {"keep_tool_responses": 1}), PolicySpec("thinking_drop")]
    reqs = _requests(tasks, specs)
    local = LocalExecutor(tiny_plain, EVAL, EvalStore(tmp_path / "local.jsonl"), progress=False).run(reqs)
    remote = ray_executor.run(reqs)

    def strip(r):
        row = r.to_row()
        row.pop("seconds")
        return row

    assert [strip(r) for r in remote] == [strip(r) for r in local]
    # Affinity: tasks stay on one replica, except at most one task split by work stealing at the end.
    per_task = Counter(t for s in ray_executor.replicas.values() for t in s.tasks)
    assert sum(v - 1 for v in per_task.values()) <= 1, per_task
    assert sum(s.evaluations for s in ray_executor.replicas.values()) == len(reqs)
    stats = ray_executor.stats()  # what a search writes to replicas.json
    assert set(stats) == set(ray_executor.names) == {"replica-0", "replica-1"}
    assert all({"evaluations", "timeouts", "restarts", "failures", "tasks"} <= set(v) for v in stats.values())


def test_killed_replica_is_restarted_and_the_evaluation_retried(ray_executor):
    tasks = load_suite("smoke", "heldout")[:2]
    specs = [PolicySpec("rolling_drop", {"keep_tool_responses": k}) for k in (2, 3, 4)]
    reqs = _requests(tasks, specs)
    before = {n: s.restarts for n, s in ray_executor.replicas.items()}
    pids = ray_executor.pids()
    victim = ray_executor.names[0]

    def killer():  # kill the victim while it computes an evaluation, however fast the machine
        deadline = time.monotonic() + 60
        while victim not in ray_executor.in_flight and time.monotonic() < deadline:
            time.sleep(0.002)
        os.kill(pids[victim], signal.SIGKILL)

    t = threading.Thread(target=killer)
    t.start()
    results = ray_executor.run(reqs)
    t.join()
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    assert sum(s.restarts for s in ray_executor.replicas.values()) > sum(before.values())
    assert ray_executor.pids()[victim] != pids[victim]
    keys = [line for line in ray_executor.store.path.read_text().splitlines()]
    assert len(keys) == len({k.split('"row"')[0] for k in keys})  # each evaluation key written once


def test_hard_timeout_abandons_and_restarts_the_replica(ray_executor):
    task = load_suite("smoke", "train")[0]
    ray_executor.timeout = 3.0
    try:
        slow = PolicySpec("program", {}, source=SLOW, label="busy-loop")
        [result] = ray_executor.run(_requests([task], [slow]))
    finally:
        ray_executor.timeout = 20.0
    assert not result.ok and "timed out" in (result.error or "")
    assert sum(s.timeouts for s in ray_executor.replicas.values()) >= 1
    [after] = ray_executor.run(_requests([task], [PolicySpec("trim")]))
    assert after.ok


def test_a_search_killed_on_ray_resumes_in_process_with_the_same_archive(tmp_path, finished):
    """``akv search --replicas 2``, its driver and the local Ray instance it started SIGKILLed
    mid-search (experts done, tuning under way), then ``akv search --resume DIR --in-process``: the
    archive of an uninterrupted in-process search, nothing finished before the kill computed again.
    (A search killed in-process and resumed on Ray rests on the same store and state files.)"""
    import subprocess
    import sys

    import yaml

    from tests.rsi.conftest import TINY
    from tests.rsi.test_search import _count, _summary

    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(TINY))
    run_dir = tmp_path / "ray-run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "rsi.cli", "search", str(cfg), "--run-dir", str(run_dir), "--replicas", "2"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    evals = run_dir / "evaluations.jsonl"
    deadline = time.monotonic() + 400
    while _count(evals) < 8:
        assert proc.poll() is None, "the search ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.2)
    # SIGKILL the driver and the local Ray instance it started (same process group; a cluster would live on).
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = _count(evals)
    assert json.loads((run_dir / "state.json").read_text()).get("status") is None  # it never finished
    assert json.loads((run_dir / "config.json").read_text())["executor"]["kind"] == "ray"
    resumed = subprocess.run([sys.executable, "-m", "rsi.cli", "search", "--resume", str(run_dir), "--in-process"],
                             env=env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert _summary(run_dir) == _summary(finished)
    keys = [json.loads(line)["key"] for line in evals.read_text().splitlines() if line.strip().startswith("{")]
    assert len(keys) == len(set(keys)) and len(keys) >= done_before
    assert json.loads((run_dir / "state.json").read_text())["attempt"] == 2
    assert set(json.loads((run_dir / "replicas.json").read_text())) == {"local"}  # the resume ran in-process
