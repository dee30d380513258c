"""Executors on remote engines: ``executor.backend: remote`` in this process (attached to a server)
and on a real local Ray actor that launches ``akv serve`` as its replica's server."""

from __future__ import annotations

import sys

import pytest

from engine import Engine
from engine.server import ServerThread, create_app
from evals.cache.evaluator import EvalConfig, PolicySpec
from evals.tasks import load_suite
from rsi.cache.executors import make_executor
from rsi.cache.executors.base import EvalRequest
from rsi.cache.executors.local import LocalExecutor
from rsi.store import EvalStore, eval_key
from tests.procs import gone
from tests.rsi.conftest import tiny_config
from tests.rsi.test_launcher import AKV_SERVE

pytestmark = pytest.mark.usefixtures("one_thread")  # see tests/conftest.py

EVAL = EvalConfig(scoring="loglik", generate=False)
SPECS = [PolicySpec("full"), PolicySpec("rolling_drop", {"keep_tool_responses": 1})]


def _requests(tasks, model_id):
    return [EvalRequest(s, t, eval_key(s.key, t.id, model_id, EVAL.digest)) for t in tasks for s in SPECS]


def _rows(results):
    rows = [r.to_row() for r in results]
    for r in rows:
        r.pop("seconds")
    return rows


def test_local_executor_attached_to_a_server_equals_in_process(tiny_plain, tmp_path):
    tasks = load_suite("smoke", "train")[:1]
    served = Engine(tiny_plain.model, tiny_plain.tokenizer, "plain", name=tiny_plain.name)
    with ServerThread(create_app(served, snapshot_dir=tmp_path)) as srv:
        cfg = tiny_config(model={"dtype": "float32"}, executor={"backend": "remote", "server_urls": [srv.base_url]})
        assert cfg.model_id.startswith("tiny-random|plain|remote:")
        ex = make_executor(cfg, EVAL, EvalStore(tmp_path / "remote.jsonl"), tmp_path)
        try:
            remote = ex.run(_requests(tasks, cfg.model_id))
        finally:
            ex.close()
    local = LocalExecutor(tiny_plain, EVAL, EvalStore(tmp_path / "local.jsonl"), progress=False).run(
        _requests(tasks, "tiny"))
    assert all(r.ok for r in remote) and _rows(remote) == _rows(local)


@pytest.mark.slow
def test_ray_replica_launches_its_server_evaluates_and_leaves_nothing_behind(tiny_plain, tmp_path):
    """A real local Ray actor starts `akv serve` from the command template, evaluates through
    RemoteEngine, and its server dies with it."""
    import ray

    from rsi.cache.executors.ray_executor import RayExecutor

    cfg = tiny_config(model={"dtype": "float32"}, executor={
        "kind": "ray", "replicas": 1, "timeout_s": 300.0, "backend": "remote", "server_command": AKV_SERVE,
        "server_log_dir": str(tmp_path / "servers"), "server_health_timeout_s": 240.0, "server_grace_s": 5.0})
    tasks = load_suite("smoke", "train")[:1]
    ex = RayExecutor(cfg, EVAL, EvalStore(tmp_path / "ray.jsonl"), tmp_path, progress=False)
    try:
        actor = ex.actors["replica-0"]
        server_pid = ray.get(actor.server_pid.remote())
        assert ray.get(actor.base_url.remote()).startswith("http://127.0.0.1:")
        results = ex.run(_requests(tasks, cfg.model_id))
        local = LocalExecutor(tiny_plain, EVAL, EvalStore(tmp_path / "local.jsonl"), progress=False).run(
            _requests(tasks, "tiny"))
        assert _rows(results) == _rows(local)
        assert ex.reuse()["replica-0"]["requests"] > 0
        assert "serving tiny-random" in (tmp_path / "servers" / "replica-0.log").read_text()
        # The actor process is killed (no Python cleanup runs): its server must not outlive it.
        actor_pid = ray.get(actor.pid.remote())
        ray.kill(actor, no_restart=True)
        assert gone(actor_pid, timeout=30) and gone(server_pid, timeout=30), "the server outlived its Ray actor"
    finally:
        ex.close()
    assert sys.executable  # the template's {python}: the interpreter of this environment
