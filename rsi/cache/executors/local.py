"""The in-process executor: one engine, evaluations one after another (with a progress bar)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tqdm import tqdm

from engine.interface import ChatEngine
from evals.cache.evaluator import EvalConfig, PolicySpec, Replay, TaskResult
from evals.tasks.schema import Task
from rsi.cache.executors.base import EvalRequest, Executor, ReplicaStats
from rsi.store import EvalStore


class Evaluator(Protocol):
    """Evaluates one policy on one task (``evals.cache.evaluator.Replay``,
    ``rsi.cache.executors.remote.RemoteReplica``)."""

    def evaluate(self, spec: PolicySpec, task: Task) -> TaskResult: ...


class LocalExecutor(Executor):
    """Evaluates in this process on ``engine`` (whose radix tree stays warm between calls).

    ``evaluator`` replaces the replay over ``engine`` (e.g. a ``RemoteReplica`` that restarts its
    server); its ``close()``, if any, is called by :meth:`close`.
    """

    def __init__(self, engine: ChatEngine | None, config: EvalConfig, store: EvalStore, progress: bool = True,
                 *, evaluator: Evaluator | None = None):
        super().__init__(store)
        if evaluator is None:
            if engine is None:
                raise TypeError("LocalExecutor needs an engine or an evaluator")
            evaluator = Replay(engine, config)
        self.replay = evaluator
        self.progress = progress
        self.replicas["local"] = ReplicaStats()

    def close(self) -> None:
        close = getattr(self.replay, "close", None)
        if callable(close):
            close()

    def _compute(self, requests: Sequence[EvalRequest]) -> None:
        stats = self.replicas["local"]
        # disable=None: a bar on a terminal, nothing in logs and pipes.
        bar = tqdm(requests, desc="evaluations", unit="eval", disable=None if self.progress else True, leave=False)
        for r in bar:
            result = self.replay.evaluate(r.spec, r.task)
            self.store.put(r.key, result)
            stats.evaluations += 1
            stats.failures += not result.ok
            stats.tasks.add(r.task.id)
            bar.set_postfix(task=r.task.id[-12:], policy=r.spec.display[:16], failed=stats.failures)
