"""Proposers for survival programs: the cache search's proposers and bandit, on survival programs.

:class:`SurvivalMutationProposer` is ``rsi.proposers.mutation.MutationProposer`` (AST edits,
crossover, the UCB1 bandit over operators rebuilt from the archive) with two differences: the
``fragment`` operator is left out (its fragments are cache-policy rules), and an edit must run
in the survival sandbox (``run_survival_program``) on recorded decision points of a real
simulation (:func:`record_requests`) before it is proposed. The bandit's reward uses the survival
archive's hypervolume (p95 resume TTFT and recompute tokens, both minimised).

:class:`SurvivalLLMProposer` is ``rsi.proposers.llm.LLMProposer`` (any OpenAI-compatible
endpoint, SEARCH/REPLACE or whole-program answers, one retry with the refusal, token and dollar
caps) with the survival API in the prompt, the parent's simulated metrics beside the tuned
built-in families', its own prompt variants (``refine``, ``rewrite``, ``balance``) under the same
bandit, and the same sandbox run on recorded decision points as its validity check.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.survival import SurvivalRequest
from evals.survival import SimConfig, Trace, simulate
from rsi.archive import ArchiveView, Record
from rsi.config import ProposerConfig
from rsi.proposers.bandit import UCB1, bandit_from_archive
from rsi.proposers.base import ParentView
from rsi.proposers.llm import FORMAT, PREFIX, LLMProposer, failed_children
from rsi.proposers.mutation import OPERATORS, MutationProposer
from search_spaces.survival import check_program, get_survival_policy, run_survival_program, survival_api_doc

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

    def _bandit(self, archive: ArchiveView[Record[Any]]) -> UCB1:
        # The bandit reads only what both archives have (candidates, scored(), point, status, train.ok).
        return bandit_from_archive(self.operators, archive, self.ref[0], ref_pass=-self.ref[1])

    def _checks(self, source: str) -> bool:
        return check_program(source).ok

    def _smoke_ok(self, source: str) -> bool:
        return not self.requests or run_survival_program(source, {}, self.requests).ok


SURVIVAL_INSTRUCTIONS = """You improve tool-gap survival policies for an LLM serving engine. While an agent waits on a
tool, its session's KV cache can be kept, pinned, swapped to host memory or discarded (then
recomputed when the agent resumes). Keeping everything fills the pool and evicts other sessions;
discarding makes the resume slow. Write a program with a lower p95 resume time-to-first-token or
fewer recomputed tokens than the parent, without making the other worse. Change one idea at a time."""

SURVIVAL_VARIANTS: dict[str, str] = {
    "refine": "This time: make one small change to the parent (a threshold, a TTL, a weight) that lowers "
              "one objective without raising the other.",
    "rewrite": "This time: write a program around a different idea from the parent's (what to keep, swap or "
               "discard, and when), using the fields the API gives each session.",
    "balance": "This time: compare the parent with the tuned built-in families above and change it where it "
               "does worse than they do.",
}
"""The survival prompt variants (the cache variants ``repair`` and ``fragment`` need probes and
cache-policy fragments, which survival programs do not have)."""


class SurvivalLLMProposer(LLMProposer):
    """Survival programs from an OpenAI-compatible endpoint (see the module docstring).

    Args:
        cfg: the endpoint, sampling and budget (``rsi.config.ProposerConfig``).
        requests: recorded decision points each program must answer in the sandbox.
        ref: the hypervolume reference (p95 resume TTFT, recompute tokens) of the bandit's reward.
        run_dir: where ``proposer/calls.jsonl`` goes.
    """

    variants = SURVIVAL_VARIANTS
    default_instructions = SURVIVAL_INSTRUCTIONS

    def __init__(self, cfg: ProposerConfig, requests: Sequence[SurvivalRequest], ref: tuple[float, float],
                 run_dir: Path):
        super().__init__(cfg, [], run_dir)
        self.requests = list(requests)
        self.ref = ref

    def prompt(self, parent: ParentView, archive: ArchiveView[Record[Any]] | None = None, variant: str = "refine",
               rng: random.Random | None = None) -> list[dict[str, str]]:
        """The survival API, the parent program with its train metrics (and the tuned families'),
        its failed children, the variant's line and the answer format."""
        c, fb = parent.candidate, parent.feedback
        lines = [f"Parent program {c.label}:", "```python", parent.source.rstrip(), "```",
                 f"Its metrics on the train traces (lower is better): {_metrics(fb.get('train'))}"]
        baselines = fb.get("baselines") or {}
        if baselines:
            lines.append("The tuned built-in families on the same traces:")
            lines += [f"- {label}: {_metrics(m)}" for label, m in sorted(baselines.items())]
        if archive is not None:
            lines += failed_children(c, archive)
        lines += ["", self.variants[variant]]
        user = "\n".join([survival_api_doc(), "", *lines, "", FORMAT])
        return [{"role": "system", "content": self.instructions}, {"role": "user", "content": user}]

    def _problem(self, source: str) -> str | None:
        if self.requests:
            res = run_survival_program(source, {}, self.requests)
            return None if res.ok else res.reason
        check = check_program(source)
        return None if check.ok else check.reason

    def _bandit(self, archive: ArchiveView[Record[Any]]) -> UCB1:
        return bandit_from_archive(tuple(self.variants), archive, self.ref[0], PREFIX, ref_pass=-self.ref[1])

    def _scored_line(self, c: Any) -> str:
        return _metrics(c.train.to_dict())


def _metrics(train: Any) -> str:
    """The simulated metrics a prompt shows (p95 resume TTFT, recompute tokens, mean JCT)."""
    if not isinstance(train, dict):
        return "not scored"
    keys = ("resume_ttft_p95_s", "recompute_tokens", "jct_mean_s")
    return json.dumps({k: round(float(train[k]), 4) for k in keys if isinstance(train.get(k), int | float)})
