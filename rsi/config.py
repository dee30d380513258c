"""What both tracks' configs share: the proposer section (who writes programs), the run-name rule,
and the config error. The cache search's config is ``rsi.cache.config``, the survival
evolution's ``rsi.survival.config``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from engine.errors import AKVError


class ConfigError(AKVError):
    """A search config with an unknown key or a bad value."""


@dataclass(frozen=True)
class ProposerConfig:
    """Who writes programs.

    Attributes:
        kind: ``mutation`` (offline AST edits, seeded), ``synthesis`` (offline: new rule structures,
            guided by the oracle's hindsight; ``rsi.cache.synthesis``), ``llm`` (OpenAI-compatible
            endpoint), or ``none`` (tuning only: every generation tunes the seed programs again, in new
            studies; the ablation of the other kinds).
        per_generation: programs proposed per generation.
        parents: how many parents a proposal reads (archive front first).
        base_url, model, api_key_env: the LLM endpoint (key read from that environment variable).
        max_tokens, temperature: LLM sampling.
        budget_usd, budget_tokens: caps on proposing spend (0 = no cap); usd per million tokens below.
        price_in, price_out: USD per million prompt / completion tokens of the proposer model.
        mutate_instructions: let the proposer's own instruction text evolve (recursive proposing).
        timeout_s: per LLM call.
        candidates: structures the synthesis proposer makes (and screens) per proposal.
        inner: zero-forward edit steps the synthesis proposer chains per proposal (1: one operator).
        check_last: with ``inner`` > 1, the chain's last kept step is checked with the model on this many
            train tasks (the program with and without it, each an evaluation per task, counted in the
            budget): kept only when it loses no probe there and costs no more (0: the screen alone decides).
        prompt: the LLM proposer's prompt: ``full`` (the policy API, rich feedback, whole programs or
            SEARCH/REPLACE edits) or ``short`` (for weak models: a short API, a worked example, the parent's
            code and one concrete change to make, whole programs only; ``rsi.proposers.llm.SHORT_VARIANTS``).
    """

    kind: str = "mutation"
    per_generation: int = 3
    parents: int = 2
    base_url: str = ""
    model: str = ""
    api_key_env: str = "AKV_PROPOSER_API_KEY"
    max_tokens: int = 2048
    temperature: float = 0.8
    budget_usd: float = 0.0
    budget_tokens: int = 0
    price_in: float = 0.0
    price_out: float = 0.0
    mutate_instructions: bool = False
    timeout_s: float = 120.0
    candidates: int = 6
    inner: int = 1
    check_last: int = 0
    prompt: str = "full"


_RUN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")
RUN_NAME_RULE = "1-100 letters, digits, '.', '_' or '-', not starting with '.' (it names the run directory)"


def is_run_name(name: Any) -> bool:
    """Whether ``name`` is a valid experiment name (:data:`RUN_NAME_RULE`: no path can hide in it)."""
    return isinstance(name, str) and _RUN_NAME.fullmatch(name) is not None
