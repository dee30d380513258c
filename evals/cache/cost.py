"""The cost model: token usage times a rate table, per request and per task. Pure functions.

Per request (docs/architecture.md, "Accounting")::

    input  = prefill_tokens     x input rate          newly computed tokens
    cached = cached_tokens      x cached-input rate   active KV read from the tree (kept, not dropped)
    repos  = repos_tokens       x cached-input rate   keys rotated by a reposition (pessimistic, as the
                                                      reference study charges them)
    output = completion_tokens  x output rate
    dropped (drop_skipped_tokens) tokens are not read and not charged.

Text baselines pay their summary calls on top (``summary``: each call priced the same way); the
re-prefill after an edited message already shows up as ``prefill_tokens`` in the engine's usage.
Amounts are USD; :attr:`CostBreakdown.cents` gives cents.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.cache.plan import TokenUsage
from evals.errors import CostError
from evals.rates import Rates

PER = 1_000_000
_FIELDS = ("prompt_tokens", "prefill_tokens", "cached_tokens", "drop_skipped_tokens", "repos_tokens",
           "completion_tokens")


@dataclass(frozen=True)
class Counts:
    """Validated token counts of one request (the fields of ``engine.cache.plan.TokenUsage``)."""

    prompt_tokens: int
    prefill_tokens: int
    cached_tokens: int
    drop_skipped_tokens: int
    repos_tokens: int
    completion_tokens: int

    def __post_init__(self) -> None:
        for name in _FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CostError(f"usage.{name} must be a non-negative integer, got {value!r}", field=f"usage.{name}",
                                value=value)
        parts = self.prefill_tokens + self.cached_tokens + self.drop_skipped_tokens
        if parts != self.prompt_tokens:
            raise CostError(f"usage does not partition the prompt: prefill {self.prefill_tokens} + cached "
                            f"{self.cached_tokens} + drop_skipped {self.drop_skipped_tokens} = {parts} != prompt "
                            f"{self.prompt_tokens}", field="usage", value=self.prompt_tokens)


def counts(usage: Any) -> Counts:
    """Token counts from a ``TokenUsage``-like object, a flat mapping of the same fields, an
    OpenAI-style usage mapping (``prompt_tokens``, ``completion_tokens`` and
    ``prompt_tokens_details.{cached_tokens, drop_skipped_tokens, repos_tokens}``; prefill is the rest),
    or ``akv serve``'s (the same with ``prefill_tokens`` at the top, checked against the rest).

    Raises:
        CostError: missing fields, negative counts, or counts that do not partition the prompt.
    """
    if isinstance(usage, Counts):
        return usage
    if isinstance(usage, Mapping):
        details = usage.get("prompt_tokens_details")
        if "prefill_tokens" in usage and isinstance(details, Mapping):  # akv serve's own: details nested
            usage = {**details, **{k: v for k, v in usage.items() if k != "prompt_tokens_details"}}
        elif "prefill_tokens" not in usage and "prompt_tokens" in usage:
            details = usage.get("prompt_tokens_details") or {}
            cached, skipped = details.get("cached_tokens", 0), details.get("drop_skipped_tokens", 0)
            prompt = usage["prompt_tokens"]
            prefill = prompt - cached - skipped if all(isinstance(x, int) for x in (prompt, cached, skipped)) else -1
            return Counts(prompt, prefill, cached, skipped, details.get("repos_tokens", 0),
                          usage.get("completion_tokens", 0))
        get = usage.get
    elif isinstance(usage, TokenUsage):  # the engine's own (every request of every evaluation passes here)
        return Counts(usage.prompt_tokens, usage.prefill_tokens, usage.cached_tokens, usage.drop_skipped_tokens,
                      usage.repos_tokens, usage.completion_tokens)
    else:
        def get(name: str, default: Any = None) -> Any:
            return getattr(usage, name, default)
    missing = [f for f in _FIELDS if get(f) is None and f != "completion_tokens"]
    if missing:
        raise CostError(f"usage lacks {missing}; expected the fields of engine.cache.plan.TokenUsage", field="usage",
                        value=type(usage).__name__)
    return Counts(*(get(f, 0) for f in _FIELDS))


@dataclass(frozen=True)
class CostBreakdown:
    """A cost in USD, by component (see the module docstring)."""

    input: float = 0.0
    cached: float = 0.0
    repos: float = 0.0
    output: float = 0.0
    summary: float = 0.0

    @property
    def total(self) -> float:
        return self.input + self.cached + self.repos + self.output + self.summary

    @property
    def cents(self) -> float:
        """The total in US cents."""
        return self.total * 100

    def __add__(self, other: CostBreakdown) -> CostBreakdown:
        return CostBreakdown(self.input + other.input, self.cached + other.cached, self.repos + other.repos,
                             self.output + other.output, self.summary + other.summary)


def request_cost(usage: Any, rates: Rates, summary: Any | Iterable[Any] = ()) -> CostBreakdown:
    """The cost of one request, plus the summary call(s) a text baseline made for it.

    Args:
        usage: the request's usage (see :func:`counts` for accepted shapes).
        rates: the price point.
        summary: the usage of one summary call, or an iterable of them; each is priced like a
            request and lands in ``summary``.
    """
    c = counts(usage)
    calls = [summary] if _is_usage(summary) else list(summary)
    return CostBreakdown(
        input=c.prefill_tokens * rates.input / PER,
        cached=c.cached_tokens * rates.cached_input / PER,
        repos=c.repos_tokens * rates.cached_input / PER,
        output=c.completion_tokens * rates.output / PER,
        summary=sum(request_cost(s, rates).total for s in calls),
    )


def _is_usage(obj: Any) -> bool:
    return isinstance(obj, Mapping | Counts) or hasattr(obj, "prefill_tokens")


def sum_costs(costs: Iterable[CostBreakdown]) -> CostBreakdown:
    """The component-wise sum of ``costs`` (zero for none)."""
    total = CostBreakdown()
    for c in costs:
        total = total + c
    return total


def task_cost(usages: Iterable[Any], rates: Rates, summaries: Iterable[Any] = ()) -> CostBreakdown:
    """The cost of a task: every request's usage, plus every summary call (``.cents`` for cents)."""
    return sum_costs([*(request_cost(u, rates) for u in usages),
                      CostBreakdown(summary=sum(request_cost(s, rates).total for s in summaries))])
