"""The executor interface: run evaluations, store each result once, return them in order.

Implementations differ in where the engine lives (this process, or Ray replica actors); they
share the contract below and one conformance suite (tests/rsi/test_executors.py).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field

from evals.cache.evaluator import PolicySpec, TaskResult
from evals.tasks.schema import Task
from rsi.store import EvalStore


@dataclass(frozen=True)
class EvalRequest:
    """One evaluation: a policy on a task, with its store key."""

    spec: PolicySpec
    task: Task
    key: str


@dataclass
class ReplicaStats:
    """Per-replica counters (written to the run directory)."""

    evaluations: int = 0
    timeouts: int = 0
    restarts: int = 0
    failures: int = 0
    tasks: set[str] = field(default_factory=set)


class Executor(abc.ABC):
    """Runs evaluations.

    Contract: :meth:`run` returns one :class:`TaskResult` per request, in request order. A result
    already in the store is returned from it and not recomputed; every new result is put in the
    store before :meth:`run` returns (so a crash loses at most the evaluations in flight). A
    failing or timed-out evaluation is a result with ``ok=False`` and a reason, never an
    exception. Raises only for caller mistakes.
    """

    def __init__(self, store: EvalStore):
        self.store = store
        self.replicas: dict[str, ReplicaStats] = {}

    @abc.abstractmethod
    def _compute(self, requests: Sequence[EvalRequest]) -> None:
        """Compute the requests (none is in the store) and put each result in the store."""

    def run(self, requests: Sequence[EvalRequest]) -> list[TaskResult]:
        missing, seen = [], set()
        for r in requests:
            if r.key not in self.store and r.key not in seen:
                missing.append(r)
                seen.add(r.key)
        if missing:
            # Task by task: policies evaluated on one task share its KV in the engine's tree.
            order = {t: i for i, t in enumerate(dict.fromkeys(r.task.id for r in missing))}
            self._compute(sorted(missing, key=lambda r: order[r.task.id]))
        out = []
        for r in requests:
            res = self.store.get(r.key)
            assert res is not None, f"executor did not store {r.key}"
            out.append(res)
        return out

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op for executors that hold nothing
        """Release engines and workers."""

    def stats(self) -> dict[str, dict[str, int]]:
        return {name: {"evaluations": s.evaluations, "timeouts": s.timeouts, "restarts": s.restarts,
                       "failures": s.failures, "tasks": len(s.tasks)} for name, s in self.replicas.items()}
