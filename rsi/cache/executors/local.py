"""The in-process executor: one engine, evaluations task by task (with a progress bar).

The policies of one task are evaluated in lockstep when the evaluator can
(``Replay.evaluate_policies``: each probe scored for all of them in one batched forward, with
the rows sequential evaluation gives), at most :data:`LOCKSTEP_POLICIES` at a time, so that a
crash loses at most that many evaluations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import groupby
from typing import Protocol

from tqdm import tqdm

from engine.interface import ChatEngine
from evals.cache.evaluator import EvalConfig, PolicySpec, Replay, TaskResult
from evals.tasks.schema import Task
from rsi.cache.executors.base import EvalRequest, Executor, ReplicaStats
from rsi.store import EvalStore

LOCKSTEP_POLICIES = 16
"""Policies of one task evaluated together (the evaluations in flight at once)."""


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
        together: Callable[[Sequence[PolicySpec], Task], list[TaskResult]] | None = getattr(
            self.replay, "evaluate_policies", None)
        # disable=None: a bar on a terminal, nothing in logs and pipes.
        bar = tqdm(total=len(requests), desc="evaluations", unit="eval", disable=None if self.progress else True,
                   leave=False)
        for group in _groups(requests, LOCKSTEP_POLICIES if together is not None else 1):
            task = group[0].task
            if together is not None and len(group) > 1:
                results = together([r.spec for r in group], task)
            else:
                results = [self.replay.evaluate(r.spec, task) for r in group]
            for r, result in zip(group, results, strict=True):
                self.store.put(r.key, result)
                stats.evaluations += 1
                stats.failures += not result.ok
                stats.tasks.add(r.task.id)
                bar.update(1)
                bar.set_postfix(task=r.task.id[-12:], policy=r.spec.display[:16], failed=stats.failures)
        bar.close()


def _groups(requests: Sequence[EvalRequest], size: int) -> Iterator[list[EvalRequest]]:
    """Runs of consecutive requests on one task, at most ``size`` each (the base class sorts by task)."""
    for _, same in groupby(requests, key=lambda r: r.task.id):
        run = list(same)
        for a in range(0, len(run), size):
            yield run[a:a + size]
