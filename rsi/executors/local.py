"""The in-process executor: one engine, evaluations one after another (with a progress bar)."""

from __future__ import annotations

from collections.abc import Sequence

from tqdm import tqdm

from engine.engine import Engine
from evals.replay import EvalConfig, Replay
from rsi.executors.base import EvalRequest, Executor, ReplicaStats
from rsi.store import EvalStore


class LocalExecutor(Executor):
    """Evaluates in this process on ``engine`` (whose radix tree stays warm between calls)."""

    def __init__(self, engine: Engine, config: EvalConfig, store: EvalStore, progress: bool = True):
        super().__init__(store)
        self.replay = Replay(engine, config)
        self.progress = progress
        self.replicas["local"] = ReplicaStats()

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
