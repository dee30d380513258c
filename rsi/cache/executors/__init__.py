"""Executors: where evaluations run (in-process or on Ray replicas); see ``base.Executor``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rsi.cache.executors.base import EvalRequest, Executor, ReplicaStats

if TYPE_CHECKING:
    from evals.cache.evaluator import EvalConfig
    from rsi.cache.config import SearchConfig
    from rsi.store import EvalStore

__all__ = ["EvalRequest", "Executor", "ReplicaStats", "make_executor", "model_spec"]


def make_executor(config: SearchConfig, eval_config: EvalConfig, store: EvalStore, run_dir: Path,
                  progress: bool = True) -> Executor:
    """The executor the config asks for (``progress``: its own per-batch bar, on a terminal).

    ``kind: local`` evaluates in this process: on an engine loaded here (``backend: local``) or
    through one server (``backend: remote``, launched here or attached). ``kind: ray`` starts
    replica actors, each with its own engine or server.
    """
    if config.executor.kind == "ray":
        from rsi.cache.executors.ray_executor import RayExecutor

        return RayExecutor(config, eval_config, store, run_dir, progress=progress)
    from rsi.cache.executors.local import LocalExecutor

    m = config.model
    if config.executor.backend == "remote":
        from rsi.cache.executors.remote import RemoteReplica, server_spec

        replica = RemoteReplica(model_spec(config), eval_config, server_spec(config.executor, 0, run_dir, config.dtype))
        return LocalExecutor(None, eval_config, store, progress=progress, evaluator=replica)
    import torch

    from engine.engine import Engine

    device = "cuda" if config.executor.gpus_per_replica > 0 else "cpu"
    engine = Engine.from_pretrained(m.name, template=m.template, pool_bytes=int(m.pool_gb * (1 << 30)),
                                    threads=m.threads or None, device=device, dtype=getattr(torch, config.dtype))
    return LocalExecutor(engine, eval_config, store, progress=progress)


def model_spec(config: SearchConfig) -> dict[str, Any]:
    """What a replica needs to know about the model (plain data: it travels to Ray actors)."""
    m = config.model
    return {"name": m.name, "template": m.template, "pool_gb": m.pool_gb, "dtype": config.dtype}
