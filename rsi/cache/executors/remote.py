"""Replicas whose engine is a server: launched by the replica on its GPU, or attached by URL.

``executor.backend: remote`` puts one :class:`RemoteReplica` in each Ray actor (or one in this
process for ``executor.kind: local``). The replica starts its server from
``executor.server_command`` (``rsi.cache.executors.launcher``), evaluates through
:class:`engine.remote.RemoteEngine` pointed at it, and when the server goes away mid-evaluation
(crash, hang) restarts it and runs the evaluation again: an unreachable server is never recorded
as the policy's failure, unless it stays unreachable for ``ATTEMPTS`` tries.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import RemoteUnavailableError
from evals.cache.evaluator import CostBreakdown, EvalConfig, PolicySpec, Replay, TaskResult
from evals.tasks.schema import Task

log = logging.getLogger("akv.remote_replica")
ATTEMPTS = 3
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class ServerSpec:
    """How a replica gets its server.

    Attributes:
        command: a server command template (launch mode), or "".
        url: an existing server's base URL (attach mode), or "".
        log_path: where a launched server's output goes.
        health_timeout_s, grace_s: see ``rsi.cache.executors.launcher.ServerProcess``.
        kv_dtype: dtype of the server's KV cache (geometry of the dry-run accountant).
        check_usage: ``RemoteEngine.check_usage``.
        prefix_mode: ``RemoteEngine.prefix_mode``.
    """

    command: str = ""
    url: str = ""
    log_path: str = ""
    health_timeout_s: float = 900.0
    grace_s: float = 15.0
    kv_dtype: str = "bfloat16"
    check_usage: str = "warn"
    prefix_mode: str = "field"

    def __post_init__(self) -> None:
        if bool(self.command) == bool(self.url):
            raise ValueError(f"give exactly one of command and url, got command={self.command!r} url={self.url!r}")
        if self.kv_dtype not in DTYPES:
            raise ValueError(f"kv_dtype must be one of {', '.join(DTYPES)}, got {self.kv_dtype!r}")


def server_spec(executor: Any, replica_index: int, run_dir: Path | None, kv_dtype: str) -> ServerSpec:
    """The :class:`ServerSpec` of replica ``replica_index`` under an ``ExecutorConfig``."""
    name = f"replica-{replica_index}"
    prefix_mode = getattr(executor, "server_prefix_mode", "field")
    if executor.server_urls:
        return ServerSpec(url=executor.server_urls[replica_index % len(executor.server_urls)], kv_dtype=kv_dtype,
                          prefix_mode=prefix_mode)
    base = Path(executor.server_log_dir) if executor.server_log_dir else (
        run_dir / "servers" if run_dir is not None else Path(tempfile.gettempdir()) / "akv-servers")
    return ServerSpec(command=executor.server_command, log_path=str(base / f"{name}.log"),
                      health_timeout_s=executor.server_health_timeout_s, grace_s=executor.server_grace_s,
                      kv_dtype=kv_dtype, prefix_mode=prefix_mode)


def _failed(spec: PolicySpec, task: Task, reason: str) -> TaskResult:
    return TaskResult(task.id, task.family, task.split, spec.display, spec.key, dict(spec.params), False,
                      reason.splitlines()[0][:500], (), (), CostBreakdown(), 0.0, task.generator,
                      task.generator_version)


def _gpu_ids() -> str | None:
    """The GPUs Ray assigned to this process ("" when none), or ``None`` outside Ray."""
    try:
        import ray
    except ImportError:
        return None
    if not ray.is_initialized():
        return None
    return ",".join(str(g) for g in ray.get_gpu_ids())


class RemoteReplica:
    """Evaluations through a server (the class is wrapped by ``ray.remote`` in ``RayExecutor``).

    Args:
        model: ``{"name", "template", "pool_gb"}`` of the model config.
        eval_config: scoring settings.
        server: launch or attach (:class:`ServerSpec`).
        gpu: GPU ids for the server (default: Ray's assignment; ``None`` leaves the environment).
    """

    def __init__(self, model: dict[str, Any], eval_config: EvalConfig, server: ServerSpec, gpu: str | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch

        from engine.remote import RemoteEngine
        from rsi.cache.executors.launcher import ServerProcess

        self.server = None
        url = server.url
        if server.command:
            self.server = ServerProcess(server.command, model=model["name"], log_path=server.log_path,
                                        gpu=gpu if gpu is not None else _gpu_ids(),
                                        health_timeout_s=server.health_timeout_s, grace_s=server.grace_s)
            self.server.start(wait=False)  # the server loads while the tokenizer loads here
            url = self.server.base_url
        try:
            self.engine = RemoteEngine(url, model["name"], template=model["template"],
                                       kv_dtype=getattr(torch, server.kv_dtype),
                                       pool_bytes=int(model["pool_gb"] * (1 << 30)), check_usage=server.check_usage,
                                       prefix_mode=server.prefix_mode)
            if self.server is not None:
                self.server.wait()
        except BaseException:
            if self.server is not None:
                self.server.stop()
            raise
        self.replay = Replay(self.engine, eval_config)

    def evaluate(self, spec: PolicySpec, task: Task) -> TaskResult:
        """``Replay.evaluate`` on the server; an unreachable server is restarted and the evaluation rerun."""
        from rsi.cache.executors.launcher import LaunchError

        last: RemoteUnavailableError | None = None
        try:
            for attempt in range(1, ATTEMPTS + 1):
                if self.server is not None:
                    self.server.ensure_running()
                try:
                    return self.replay.evaluate(spec, task)
                except RemoteUnavailableError as err:
                    last = err
                    log.warning("server unavailable during %s on %s (attempt %d): %s", spec.display, task.id,
                                attempt, err)
                    if self.server is not None:
                        self.server.recover()
        except LaunchError as err:
            return _failed(spec, task, f"engine server could not be (re)started: {err}")
        return _failed(spec, task, f"engine server unavailable after {ATTEMPTS} attempts: {last}")

    def pid(self) -> int:
        return os.getpid()

    def server_pid(self) -> int | None:
        return self.server.pid if self.server is not None else None

    def restarts(self) -> int:
        return self.server.restarts if self.server is not None else 0

    def base_url(self) -> str:
        return self.engine.base_url

    def tree_stats(self) -> dict[str, int]:
        st = self.engine.stats
        return {"prefill_tokens": st.prefill_tokens, "cached_tokens": st.cached_tokens, "requests": st.requests}

    def close(self) -> None:
        """Stop the launched server (SIGTERM, then SIGKILL) and close the HTTP client."""
        self.engine.close()
        if self.server is not None:
            self.server.stop()
