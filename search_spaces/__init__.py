"""Policies: the Policy interface, built-in families, policy programs, their sandbox and export.

Public surface (outside checks rely on these names)::

    from search_spaces import get_policy, check_program
    p = get_policy("rolling_drop", keep_tool_responses=12)   # or full, thinking_drop, scored_drop, read_drop,
                                                             # standard, text_engineering, trim
    d = p.decide(messages)        # {"drop_message": {"7": [3]}, "reposition": []}
    r = check_program(source)     # r.ok, r.reason (one line), r.sha256 (a cache policy program;
                                  # survival programs: search_spaces.survival.check_program)
    p = Policy.from_program(source, params)       # a program as a policy (runs in the sandbox)
    res = run_program(source, params, episodes)   # a recorded outcome: res.ok / timed_out / error / reason
    export_policy(p, "policy.py")                 # standalone, standard-library-only module
    export_policy(p, "policy.py", format="akv-harness")   # the same behind the AKV harness interface

See docs/architecture.md for the map and docs/policy-api.md for the program API.
"""

from search_spaces.cache import program_api
from search_spaces.cache.decision import Decision
from search_spaces.cache.policy import Policy, TextProposal, default_token_counts
from search_spaces.cache.program import ProgramPolicy, SandboxResult, check_program, run_program, suggest_params
from search_spaces.cache.program_api import estimate_tokens
from search_spaces.cache.registry import FAMILIES, Family, get_family, get_policy, policy_names
from search_spaces.cache.request import Episode, PolicyKind, Request, request_points
from search_spaces.cache.seeds import SEEDS, seed_source
from search_spaces.errors import (
    DecisionError,
    ParameterError,
    PolicyError,
    ProgramFailure,
    UnknownPolicyError,
)
from search_spaces.export import export_policy
from search_spaces.sandbox import SandboxLimits, Status
from search_spaces.sandbox.checker import CheckResult


def api_doc() -> str:
    """The policy-program API, as text fit to paste into a proposer's prompt (docs/policy-api.md)."""
    return str(program_api.__doc__).strip() + "\n"


__all__ = [
    "FAMILIES",
    "SEEDS",
    "CheckResult",
    "Decision",
    "DecisionError",
    "Episode",
    "Family",
    "ParameterError",
    "Policy",
    "PolicyError",
    "PolicyKind",
    "ProgramFailure",
    "ProgramPolicy",
    "Request",
    "SandboxLimits",
    "SandboxResult",
    "Status",
    "TextProposal",
    "UnknownPolicyError",
    "api_doc",
    "check_program",
    "default_token_counts",
    "estimate_tokens",
    "export_policy",
    "get_family",
    "get_policy",
    "policy_names",
    "request_points",
    "run_program",
    "seed_source",
    "suggest_params",
]
