"""Proposers: who writes new policy programs (``mutation`` and ``synthesis`` offline, ``llm``, or
``none``: the seed programs tuned again, the ablation; ``random`` and ``hillclimb``: the baselines
over the synthesis grammar, ``rsi.cache.baselines``). The cache search picks its proposer with
``rsi.cache.proposers.make_proposer``; the survival track with its own (``rsi.survival.proposer``)."""

from __future__ import annotations

from rsi.proposers.base import ParentView, Proposal, Proposer, ProposerStats
from rsi.proposers.mutation import MutationProposer

__all__ = ["MutationProposer", "ParentView", "Proposal", "Proposer", "ProposerStats"]
