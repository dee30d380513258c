"""The policy registry: every built-in family by name, with its Optuna space and its seed program.

``get_policy(name, **params)`` is the one way to build a policy by name; ``"program"`` wraps
program source (``get_policy("program", source=src, keep=3)``). Unknown names raise
:class:`UnknownPolicyError` listing the valid ones; unknown parameters raise
:class:`ParameterError` naming the parameter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from search_spaces.cache.families import fixed, full, read_drop, rolling, scored, text, thinking
from search_spaces.cache.policy import Policy
from search_spaces.cache.request import PolicyKind
from search_spaces.lookup import Registry


@dataclass(frozen=True)
class Family:
    """A built-in policy family.

    Attributes:
        name: registry name.
        kind: ``cache`` or ``text``.
        factory: ``(**params_and_options) -> Policy``.
        space: ``(optuna trial) -> params`` (the family's declared parameter space).
        seed: name of the equivalent seed program under ``search_spaces/cache/seeds`` (cache families).
        summary: one line for listings.
    """

    name: str
    kind: PolicyKind
    factory: Callable[..., Policy]
    space: Callable[[Any], dict[str, Any]]
    seed: str | None
    summary: str


def _summarize(name: str) -> Callable[..., Policy]:
    def make(**kwargs: Any) -> Policy:
        return text.Summarize(name, **kwargs)

    return make


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("full", PolicyKind.CACHE, full.Full, full.space, "full", "no cache operations (reference point)"),
    Family("rolling_drop", PolicyKind.CACHE, rolling.RollingDrop, rolling.space, "rolling_drop",
           "expert policy: keep the last K tool responses' KV"),
    Family("thinking_drop", PolicyKind.CACHE, thinking.ThinkingDrop, thinking.space, "thinking_drop",
           "drop the reasoning of earlier assistant turns"),
    Family("scored_drop", PolicyKind.CACHE, scored.ScoredDrop, scored.space, "scored_drop",
           "drop the lowest-scoring messages over a KV budget"),
    Family("read_drop", PolicyKind.CACHE, read_drop.ReadDrop, read_drop.space, "read_drop",
           "hand rule: drop tool output once read (above a length) and stale re-reads"),
    Family("standard", PolicyKind.TEXT, _summarize("standard"), text.summary_space, None,
           "summarize at 0.75 x window (baseline)"),
    Family("text_engineering", PolicyKind.TEXT, _summarize("text_engineering"), text.summary_space, None,
           "summarize at 0.375 x window (baseline)"),
    Family("trim", PolicyKind.TEXT, text.Trim, text.trim_space, None, "delete old rounds from the text (baseline)"),
    Family("schedule", PolicyKind.CACHE, fixed.FixedSchedule, fixed.space, None,
           "one fixed cumulative schedule, cut at each request (the hindsight oracle's)"),
)}

REGISTRY: Registry[Family] = Registry(("policy", "policies"), "policy", FAMILIES.values())


def policy_names() -> tuple[str, ...]:
    """Every name :func:`get_policy` accepts."""
    return REGISTRY.names()


def get_family(name: str) -> Family:
    """The built-in family ``name``.

    Raises:
        UnknownPolicyError: listing the valid names.
    """
    return REGISTRY.get(name)


def get_policy(name: str, **params: Any) -> Policy:
    """Build policy ``name`` with ``params`` (plus options such as ``summarizer=``, ``counter=``
    for text baselines and ``embedder=`` for ``scored_drop``).

    ``name == "program"`` takes ``source=`` (program text) and the program's parameters.

    Raises:
        UnknownPolicyError: an unknown name (the message lists the valid names).
        ParameterError: an unknown parameter (named) or a value out of range.
    """
    return REGISTRY.build(name, params, program=Policy.from_program, family=lambda f, p: f.factory(**p))


class _RecordingTrial:
    """An Optuna-like trial that records what a space asks for, answering each with the family's
    default where it has one (so a conditional branch follows the defaults)."""

    def __init__(self, defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self.asked: dict[str, str] = {}

    def _answer(self, name: str, fallback: Any) -> Any:
        return self.defaults.get(name, fallback)

    def suggest_int(self, name: str, low: int, high: int, step: int = 1, log: bool = False) -> Any:
        self.asked[name] = f"int {low}..{high}" + (f" step {step}" if step != 1 else "") + (" (log)" if log else "")
        return self._answer(name, low)

    def suggest_float(self, name: str, low: float, high: float, step: float | None = None, log: bool = False) -> Any:
        self.asked[name] = f"float {low:g}..{high:g}" + (f" step {step:g}" if step else "") + (" (log)" if log else "")
        return self._answer(name, low)

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        self.asked[name] = "one of " + ", ".join(map(str, choices))
        return self._answer(name, choices[0])


def family_parameters(name: str) -> list[tuple[str, Any, str]]:
    """``(parameter, default, searched range)`` of family ``name``: every parameter it takes, with the
    range its Optuna space searches when the other parameters are at their defaults (a parameter
    the space fixes, or asks only on another branch, says so).

    Raises:
        UnknownPolicyError: an unknown name.
    """
    family = get_family(name)
    defaults = dict(getattr(family.factory(), "params", {}) or {})
    trial = _RecordingTrial(defaults)
    family.space(trial)
    return [(k, v, trial.asked.get(k, "not searched at the defaults")) for k, v in defaults.items()] + [
        (k, None, r) for k, r in trial.asked.items() if k not in defaults]
