"""The cache search's proposer, as its config names it (``proposer.kind``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rsi.proposers.base import Proposer
from rsi.proposers.mutation import MutationProposer

if TYPE_CHECKING:
    from rsi.cache.config import SearchConfig
    from rsi.cache.hindsight import Hindsight
    from rsi.cache.synthesis import Screen
    from search_spaces import Episode


def make_proposer(config: SearchConfig, smoke: Sequence[Episode], run_dir: Path, *,
                  hindsight: Hindsight | None = None, screen: Screen | None = None, check: Screen | None = None,
                  known: set[str] | None = None, source_of: Callable[[str], str] | None = None) -> Proposer:
    """The proposer ``config.proposer.kind`` names. ``hindsight`` (the oracle on train), ``screen``
    (zero-forward scoring) and ``known`` (behaviour fingerprints of the search's programs) guide the
    synthesis proposer; the others ignore them. ``source_of`` (a program hash's source) is the
    hill climber's way to read its incumbent."""
    kind = config.proposer.kind
    if kind == "random":
        from rsi.cache.baselines import RandomProposer

        return RandomProposer(smoke)
    if kind == "hillclimb":
        from rsi.cache.baselines import HillClimbProposer

        if source_of is None:
            raise ValueError("the hillclimb proposer needs source_of")
        return HillClimbProposer(smoke, source_of)
    if kind == "llm":
        from rsi.proposers.llm import LLMProposer

        return LLMProposer(config.proposer, smoke, run_dir)
    if kind == "synthesis":
        from rsi.cache.synthesis import SynthesisProposer

        return SynthesisProposer(smoke, hindsight, screen, config.proposer.candidates, known, config.proposer.inner,
                                 check=check if config.proposer.check_last > 0 else None)
    if kind == "none":
        from rsi.proposers.tuning import TuningOnly

        return TuningOnly(config.seeds)
    return MutationProposer(smoke)
