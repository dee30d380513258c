"""Tool-gap survival policies: built-in families from the literature and survival programs.

Public surface::

    from search_spaces.survival import get_survival_policy, make_survival_policy, SURVIVAL_FAMILIES
    p = get_survival_policy("min_waste", gap_estimate="expected")   # lru, ttl, min_waste,
                                                                   # program_priority, next_ref,
                                                                   # intent, weighted, program
    p = make_survival_policy({"source": program_text, "params": {...}})
    res = run_survival_program(source, params, requests)           # batch, in the sandbox
    r = check_program(source)                                      # the static check, this API's names
    src = survival_seed_source("ttl")                              # the family as a program

Each family names its source (docs/survival.md); the program API is ``search_spaces.survival.api``
(docs/survival-api.md). The engine applies decisions (``engine.survival``).
"""

from search_spaces.survival.builtin import BuiltinSurvival, parse_decisions
from search_spaces.survival.common import SurvivalFamily
from search_spaces.survival.program import (
    SurvivalProgram,
    SurvivalRunResult,
    check_program,
    run_survival_program,
    suggest_survival_params,
)
from search_spaces.survival.registry import (
    SURVIVAL_FAMILIES,
    get_survival_family,
    get_survival_policy,
    make_survival_policy,
    spec_name,
    survival_policy_names,
)
from search_spaces.survival.seeds import SURVIVAL_SEEDS, survival_seed_source


def survival_api_doc() -> str:
    """The survival-program API, as text fit to paste into a proposer's prompt (docs/survival-api.md)."""
    from search_spaces.survival import api as survival_api

    return str(survival_api.__doc__).strip() + "\n"


__all__ = [
    "SURVIVAL_FAMILIES",
    "SURVIVAL_SEEDS",
    "BuiltinSurvival",
    "SurvivalFamily",
    "SurvivalProgram",
    "SurvivalRunResult",
    "check_program",
    "get_survival_family",
    "get_survival_policy",
    "make_survival_policy",
    "parse_decisions",
    "run_survival_program",
    "spec_name",
    "suggest_survival_params",
    "survival_api_doc",
    "survival_policy_names",
    "survival_seed_source",
]
