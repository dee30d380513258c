"""Proposers for survival programs: the cache search's mutation proposer and bandit, on survival programs.

:class:`SurvivalMutationProposer` is ``rsi.proposers.mutation.MutationProposer`` (AST edits,
crossover, the UCB1 bandit over operators rebuilt from the archive) with two differences: the
``fragment`` operator is left out (its fragments are cache-policy rules), and an edit must run
in the survival sandbox (``run_survival_program``) on recorded decision points of a real
simulation (:func:`record_requests`) before it is proposed. The bandit's reward uses the survival
archive's hypervolume (p95 resume TTFT and recompute tokens, both minimised).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.survival import SurvivalRequest
from evals.workload import SimConfig, Trace, simulate
from rsi.archive import Archive
from rsi.proposers.bandit import UCB1, bandit_from_archive
from rsi.proposers.mutation import OPERATORS, MutationProposer
from search_spaces.survival import get_survival_policy, run_survival_program

SURVIVAL_OPERATORS = tuple(op for op in OPERATORS if op != "fragment")


class Recorder:
    """A survival policy that records every request it answers (and answers as ``inner``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = f"recorded:{inner.name}"
        self.requests: list[SurvivalRequest] = []
        self.answers: list[dict[str, Any]] = []

    def decide(self, request: SurvivalRequest) -> Any:
        out = self.inner.decide(request)
        self.requests.append(request)
        self.answers.append({k: v.wire() for k, v in out.items()})
        return out

    def close(self) -> None:
        self.inner.close()


def record_requests(trace: Trace, config: SimConfig, policy: str = "weighted",
                    limit: int = 24) -> list[SurvivalRequest]:
    """Up to ``limit`` decision points of a simulation of ``trace`` under built-in ``policy``
    (evenly spread over the run; later ones have a richer event log)."""
    rec = Recorder(get_survival_policy(policy))
    simulate(trace, rec, config)
    reqs = rec.requests
    if len(reqs) <= limit:
        return reqs
    return [reqs[round(i * (len(reqs) - 1) / (limit - 1))] for i in range(limit)]


class SurvivalMutationProposer(MutationProposer):
    """AST mutation of survival programs (see the module docstring).

    Args:
        requests: recorded decision points each edit must answer in the sandbox.
        ref: the hypervolume reference (p95 resume TTFT, recompute tokens) of the bandit's reward.
        max_attempts: edits tried per proposal.
    """

    name = "mutation"
    operators = SURVIVAL_OPERATORS

    def __init__(self, requests: Sequence[SurvivalRequest], ref: tuple[float, float], max_attempts: int = 12):
        super().__init__([], max_attempts)
        self.requests = list(requests)
        self.ref = ref

    def _bandit(self, archive: Archive) -> UCB1:
        # The bandit reads only what both archives have (candidates, scored(), point, status, train.ok).
        return bandit_from_archive(self.operators, archive, self.ref[0], ref_pass=-self.ref[1])

    def _smoke_ok(self, source: str) -> bool:
        return not self.requests or run_survival_program(source, {}, self.requests).ok
