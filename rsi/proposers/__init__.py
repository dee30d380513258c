"""Proposers: who writes new policy programs (``mutation`` offline, or ``llm``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rsi.proposers.base import ParentView, Proposal, Proposer, ProposerStats
from rsi.proposers.mutation import MutationProposer

if TYPE_CHECKING:
    from rsi.config import SearchConfig
    from search_spaces import Episode

__all__ = ["MutationProposer", "ParentView", "Proposal", "Proposer", "ProposerStats", "make_proposer"]


def make_proposer(config: SearchConfig, smoke: Sequence[Episode], run_dir: Path) -> Proposer:
    if config.proposer.kind == "llm":
        from rsi.proposers.llm import LLMProposer

        return LLMProposer(config.proposer, smoke, run_dir)
    return MutationProposer(smoke)
