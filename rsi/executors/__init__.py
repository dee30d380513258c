"""Executors: where evaluations run (in-process or on Ray replicas); see ``base.Executor``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rsi.executors.base import EvalRequest, Executor, ReplicaStats

if TYPE_CHECKING:
    from evals.replay import EvalConfig
    from rsi.config import SearchConfig
    from rsi.store import EvalStore

__all__ = ["EvalRequest", "Executor", "ReplicaStats", "make_executor"]


def make_executor(config: SearchConfig, eval_config: EvalConfig, store: EvalStore, run_dir: Path) -> Executor:
    """The executor the config asks for (``local`` loads one engine here; ``ray`` starts replicas)."""
    if config.executor.kind == "ray":
        from rsi.executors.ray_executor import RayExecutor

        return RayExecutor(config, eval_config, store, run_dir)
    from engine.engine import Engine
    from rsi.executors.local import LocalExecutor

    m = config.model
    engine = Engine.from_pretrained(m.name, template=m.template, pool_bytes=int(m.pool_gb * (1 << 30)),
                                    threads=m.threads or None)
    return LocalExecutor(engine, eval_config, store)
