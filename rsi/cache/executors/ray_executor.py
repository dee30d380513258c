"""The Ray executor: one engine replica per actor, task-affine routing, hard timeouts, crash retries.

Each replica actor loads the engine once (CPU threads or one GPU, from the config) and keeps its
radix tree warm across evaluations. The driver (proposers, Optuna, the store) routes requests by
task (``routing.Router``), keeps at most one evaluation in flight per replica, and:

- abandons an evaluation past ``executor.timeout_s``, kills and restarts its replica, and records
  the evaluation as a timeout (a result with ``ok=False``), never waiting forever;
- when a replica dies mid-evaluation (its process killed), lets Ray restart it and retries the
  evaluation (up to ``MAX_ATTEMPTS``); results are written once, keyed by the evaluation key, so a
  retry never double counts.

With ``executor.backend: remote`` each actor is an ``rsi.cache.executors.remote.RemoteReplica``: it
launches a server process from ``executor.server_command`` on its GPU (or attaches to one of
``executor.server_urls``) and evaluates through ``engine.remote.RemoteEngine``.

Without an address it starts a local Ray instance sized to this machine (127.0.0.1, no usage
stats, explicit object-store size, token auth disabled for the local instance only); with
``ray_address`` (``auto`` or ``HOST:PORT``) it joins an existing cluster. See docs/cluster.md.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from evals.cache.evaluator import CostBreakdown, EvalConfig, PolicySpec, TaskResult
from evals.tasks.schema import Task
from rsi.cache.executors.base import EvalRequest, Executor, ReplicaStats
from rsi.cache.executors.routing import Router
from rsi.store import EvalStore

log = logging.getLogger("akv.ray")
MAX_ATTEMPTS = 3


class EngineReplica:
    """A Ray actor holding one engine and its radix tree (the class is wrapped by ``ray.remote``)."""

    def __init__(self, model: dict[str, Any], eval_config: EvalConfig, threads: int, device: str):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch

        from engine.engine import Engine
        from evals.cache.evaluator import Replay

        if threads:
            torch.set_num_threads(threads)
        dtype = getattr(torch, model.get("dtype") or "float32")
        self.engine = Engine.from_pretrained(model["name"], template=model["template"],
                                             pool_bytes=int(model["pool_gb"] * (1 << 30)), device=device, dtype=dtype)
        self.replay = Replay(self.engine, eval_config)

    def evaluate(self, spec: PolicySpec, task: Task) -> TaskResult:
        return self.replay.evaluate(spec, task)

    def pid(self) -> int:
        return os.getpid()

    def tree_stats(self) -> dict[str, int]:
        st = self.engine.stats
        return {"prefill_tokens": st.prefill_tokens, "cached_tokens": st.cached_tokens, "requests": st.requests}


def _failed(req: EvalRequest, reason: str) -> TaskResult:
    return TaskResult(req.task.id, req.task.family, req.task.split, req.spec.display, req.spec.key,
                      dict(req.spec.params), False, reason, (), (), CostBreakdown(), 0.0, req.task.generator,
                      req.task.generator_version)


@dataclass
class _InFlight:
    req: EvalRequest
    ref: Any
    started: float
    attempt: int


def init_ray(address: str, num_cpus: int | None = None) -> bool:
    """Connect to ``address`` or start a local instance on 127.0.0.1; returns whether it started one."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address:
        ray.init(address=address, log_to_driver=False)
        return False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private local instance; clusters keep their auth
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ray.init(num_cpus=num_cpus or os.cpu_count(), object_store_memory=256 << 20, include_dashboard=False,
             _node_ip_address="127.0.0.1", log_to_driver=False,
             runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}})
    return True


class RayExecutor(Executor):
    """Evaluations on Ray replica actors (see the module docstring)."""

    def __init__(self, config: Any, eval_config: EvalConfig, store: EvalStore, run_dir: Path | None = None,
                 progress: bool = True):
        super().__init__(store)
        import ray

        ex = config.executor
        self._owns_ray = init_ray(ex.ray_address,
                                  num_cpus=max(os.cpu_count() or 1, ex.replicas * max(1, ex.threads_per_replica)))
        from rsi.cache.executors import model_spec

        device = "cuda" if ex.gpus_per_replica else "cpu"
        model = model_spec(config)
        self.names = [f"replica-{i}" for i in range(ex.replicas)]
        self.remote_backend = getattr(ex, "backend", "local") == "remote"
        options = {"name": None, "num_cpus": max(1, ex.threads_per_replica), "num_gpus": ex.gpus_per_replica}
        if self.remote_backend:
            # Each actor launches its server (on the GPU Ray gave it) and evaluates through RemoteEngine.
            from rsi.cache.executors.remote import RemoteReplica, server_spec

            actor: Any = ray.remote(max_restarts=-1, max_task_retries=0)(RemoteReplica)
            self.actors: dict[str, Any] = {
                n: actor.options(**options).remote(model, eval_config, server_spec(ex, i, run_dir, config.dtype))
                for i, n in enumerate(self.names)}
        else:
            actor = ray.remote(max_restarts=-1, max_task_retries=0)(EngineReplica)
            self.actors = {n: actor.options(**options).remote(model, eval_config, ex.threads_per_replica, device)
                           for n in self.names}
        self.timeout = ex.timeout_s
        self.affinity = ex.routing == "affinity"
        self.progress = progress
        self.in_flight: dict[str, str] = {}  # replica -> evaluation key it is computing right now
        for n in self.names:
            self.replicas[n] = ReplicaStats()
        try:
            ray.get([a.pid.remote() for a in self.actors.values()])  # wait until every engine is loaded
        except ray.exceptions.RayActorError as err:  # an engine or server that cannot start is not retried
            self.close()
            from rsi.cache.executors.launcher import LaunchError

            raise LaunchError(f"a replica could not start: {err}", field="executor", value=None) from err

    def pids(self, timeout: float = 300.0) -> dict[str, int]:
        """Process id of every replica, waiting for restarting ones to come back."""
        import ray
        from ray.exceptions import ActorUnavailableError

        out: dict[str, int] = {}
        deadline = time.monotonic() + timeout
        for n, a in self.actors.items():
            while n not in out:
                try:
                    out[n] = int(ray.get(a.pid.remote(), timeout=max(1.0, deadline - time.monotonic())))
                except ActorUnavailableError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        return out

    def _compute(self, requests: Sequence[EvalRequest]) -> None:
        import ray
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        router: Router[tuple[EvalRequest, int]] = Router(self.names, affinity=self.affinity)
        for r in requests:
            router.add(r.task.id, (r, 1))
        running: dict[str, _InFlight] = {}
        recovering: dict[str, Any] = {}  # replica -> a pid() call that answers once it is back
        bar = tqdm(total=len(requests), desc="evaluations", unit="eval", disable=None if self.progress else True,
                   leave=False)
        failed = 0
        dead = (RayActorError, ActorDiedError, ActorUnavailableError)
        while router.pending() or running:
            for name in self.names:
                if name not in running and name not in recovering:
                    nxt = router.next_for(name, {n: f.req.task.id for n, f in running.items()})
                    if nxt is not None:
                        req, attempt = nxt
                        running[name] = _InFlight(req, self.actors[name].evaluate.remote(req.spec, req.task),
                                                  time.monotonic(), attempt)
            self.in_flight = {name: f.req.key for name, f in running.items()}
            refs = {f.ref: name for name, f in running.items()}
            waits = list(refs) + list(recovering.values())
            ready, _ = ray.wait(waits, num_returns=1, timeout=0.5) if waits else ([], [])
            for name, probe in list(recovering.items()):
                if probe in ready:
                    try:
                        ray.get(probe)
                        del recovering[name]  # restarted and loaded: it takes work again
                    except dead:
                        recovering[name] = self.actors[name].pid.remote()
            for ref in ready:
                if ref not in refs:
                    continue
                name = refs[ref]
                flight = running.pop(name)
                stats = self.replicas[name]
                try:
                    result: TaskResult = ray.get(ref)
                except dead as err:
                    stats.restarts += 1
                    log.warning("%s died during %s (attempt %d): %s", name, flight.req.key, flight.attempt, err)
                    recovering[name] = self.actors[name].pid.remote()
                    if flight.attempt < MAX_ATTEMPTS:
                        router.queues[name].appendleft((flight.req.task.id, (flight.req, flight.attempt + 1)))
                        continue
                    result = _failed(flight.req, f"replica crashed {MAX_ATTEMPTS} times evaluating this task")
                self._store(name, flight.req, result)
                failed += not result.ok
                bar.update(1)
            now = time.monotonic()
            for name, flight in list(running.items()):
                if now - flight.started > self.timeout:
                    running.pop(name)
                    ray.kill(self.actors[name], no_restart=False)  # Ray restarts it; the tree starts cold
                    recovering[name] = self.actors[name].pid.remote()
                    stats = self.replicas[name]
                    stats.timeouts += 1
                    stats.restarts += 1
                    self._store(name, flight.req, _failed(flight.req, f"timed out after {self.timeout:.0f}s"))
                    failed += 1
                    bar.update(1)
            bar.set_postfix(running=len(running), failed=failed, recovering=len(recovering),
                            load="/".join(str(self.replicas[n].evaluations) for n in self.names))
        self.in_flight = {}
        bar.close()

    def _store(self, name: str, req: EvalRequest, result: TaskResult) -> None:
        stats = self.replicas[name]
        if self.store.put(req.key, result):
            stats.evaluations += 1
            stats.failures += not result.ok
            stats.tasks.add(req.task.id)

    def reuse(self) -> dict[str, dict[str, int]]:
        """Per replica: prompt tokens prefilled vs read from its radix tree."""
        import ray

        return {n: ray.get(a.tree_stats.remote()) for n, a in self.actors.items()}

    def close(self) -> None:
        import ray

        if self.remote_backend and self.actors:  # stop the servers cleanly (SIGTERM, then SIGKILL)
            try:
                ray.get([a.close.remote() for a in self.actors.values()], timeout=60)
            except Exception:
                log.warning("could not close every replica's server cleanly", exc_info=True)
        for a in self.actors.values():
            ray.kill(a, no_restart=True)
        self.actors = {}
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
