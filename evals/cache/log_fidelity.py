"""Probe-free fidelity: how much a policy changes what the model would have said, on logs without labels.

For every recorded assistant turn ``t`` of a task that a request produces (``request_points``: the
history ``messages[:t]`` is sent, the turn comes back), the model's teacher-forced log-likelihood of
that turn given its history is measured twice: under the policy's schedule at that request (its
decision, under the frame guard when the evaluation has it) and under the full cache
(:meth:`evals.cache.evaluator.Replay.turn_scores`). The turn is scored as the template renders the
assistant's message (reasoning, content and tool calls, after the generation prompt). Each turn is
its own ``engine.score`` call, so the engine's radix tree shares every history prefix between the
turns and between the two schedules. With ``first_tokens``, the greedy first token of the reply is
generated under both schedules too.

Per task and policy (:class:`LogFidelity`): the per-turn change of log-likelihood per token
(policy minus full; 0 when the policy keeps everything, negative when the recorded turn became less
likely), its mean and its worst (the minimum) over turns, the share of turns whose greedy first
token changed, and the session's cost under the policy and under the full cache. It needs no labels:
it is what a team can measure on logs nobody annotated. A policy *passes* a conversation when its
worst per-turn change stays within a bound (:func:`passes`; a search on logs sets it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.template import ChatTemplate


@dataclass(frozen=True)
class TurnScore:
    """One assistant turn under one schedule: its index, tokens, log-likelihood, greedy first token."""

    index: int
    n_tokens: int
    logprob: float
    first_token: str = ""


@dataclass(frozen=True)
class TurnFidelity:
    """One turn under a policy against the full cache."""

    index: int
    n_tokens: int
    logprob_full: float
    logprob_policy: float
    first_changed: bool

    @property
    def delta_per_token(self) -> float:
        """(policy - full) log-likelihood per token of the turn."""
        return (self.logprob_policy - self.logprob_full) / max(1, self.n_tokens)


@dataclass(frozen=True)
class LogFidelity:
    """A policy on one task (module docstring)."""

    task_id: str
    policy: str
    turns: tuple[TurnFidelity, ...]
    cost_cents: float
    full_cost_cents: float

    @property
    def mean_delta(self) -> float:
        return sum(t.delta_per_token for t in self.turns) / len(self.turns) if self.turns else 0.0

    @property
    def worst_delta(self) -> float:
        return min((t.delta_per_token for t in self.turns), default=0.0)

    @property
    def changed_share(self) -> float:
        return sum(t.first_changed for t in self.turns) / len(self.turns) if self.turns else 0.0

    def to_row(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "policy": self.policy, "turns": len(self.turns),
                "mean_delta_per_token": self.mean_delta, "worst_delta_per_token": self.worst_delta,
                "first_token_changed_share": self.changed_share, "cost_cents": self.cost_cents,
                "full_cost_cents": self.full_cost_cents,
                "per_turn": [{"index": t.index, "n_tokens": t.n_tokens, "logprob_full": t.logprob_full,
                              "logprob_policy": t.logprob_policy, "first_changed": t.first_changed}
                             for t in self.turns]}


def passes(f: LogFidelity, bound: float) -> bool:
    """Whether ``f``'s worst per-turn change of log-likelihood per token is at least ``-bound``."""
    return f.worst_delta >= -abs(bound)


def scored_turns(messages: Sequence[Mapping[str, Any]], points: Sequence[int]) -> list[int]:
    """The assistant turns a request produces: ``t`` in ``points`` with ``messages[t]`` the assistant's
    and something in it (content, reasoning or tool calls: an empty reply has nothing to score)."""
    return [t for t in points if t < len(messages) and messages[t].get("role") == "assistant"
            and (messages[t].get("content") or messages[t].get("reasoning_content") or messages[t].get("tool_calls"))]


def turn_text(template: ChatTemplate, message: Mapping[str, Any], index: int) -> str:
    """The assistant ``message`` as the template writes it after the generation prompt: the header's
    rest (``plain`` writes ``Assistant: `` after ``Assistant:``), reasoning, content and tool calls."""
    parts = template.parts(message, index)
    header = parts[0].text
    rest = header[len(template.generation_prompt):] if header.startswith(template.generation_prompt) else ""
    return rest + "".join(p.text for p in parts[1:] if p.kind != "footer")


def compare(task_id: str, policy: str, full: Sequence[TurnScore], scored: Sequence[TurnScore], cost_cents: float,
            full_cost_cents: float) -> LogFidelity:
    """The :class:`LogFidelity` of ``scored`` (a policy's turn scores) against ``full`` (the full cache's)."""
    if [t.index for t in full] != [t.index for t in scored]:
        raise ValueError("the two schedules scored different turns")
    turns = tuple(TurnFidelity(f.index, f.n_tokens, f.logprob, s.logprob, f.first_token != s.first_token)
                  for f, s in zip(full, scored))
    return LogFidelity(task_id, policy, turns, cost_cents, full_cost_cents)


def measure(replay: Any, specs: Sequence[Any], task: Any, *, first_tokens: bool = True) -> list[LogFidelity]:
    """Each policy of ``specs`` (``PolicySpec``) on ``task`` against the full cache, with ``replay``
    (an ``evals.cache.evaluator.Replay``; the full cache's turns are scored once)."""
    from evals.cache.evaluator import PolicySpec

    full_spec = PolicySpec("full")
    full = replay.turn_scores(full_spec, task, first_tokens=first_tokens)
    full_cost = replay.cost(full_spec, task).cents
    return [compare(task.id, s.display, full, replay.turn_scores(s, task, first_tokens=first_tokens, full=full),
                    replay.cost(s, task).cents, full_cost) for s in specs]


def _interval(values: Any, samples: int, seed: int, statistic: Any) -> tuple[float, float]:
    import numpy as np

    from evals.paired import stratified_draws

    n = len(values[0])
    if n < 2:
        v = statistic(*values)
        return v, v
    idx = stratified_draws([n], samples, seed)  # the paired bootstrap's draw (evals.paired)
    stats = np.array([statistic(*(a[i] for a in values)) for i in idx])
    return float(np.percentile(stats, 2.5)), float(np.percentile(stats, 97.5))


def summarize(rows: Sequence[LogFidelity], bound: float, *, samples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """One policy over its conversations: mean cost and its change against the full cache (ratio of
    sums), mean per-turn change of log-likelihood per token, worst turn, first tokens changed, the
    share of conversations that pass at ``bound``; 95% percentile intervals of a bootstrap over
    conversations (paired: the policy and the full cache resampled together)."""
    import numpy as np

    cost = np.array([r.cost_cents for r in rows])
    full = np.array([r.full_cost_cents for r in rows])
    mean = np.array([r.mean_delta for r in rows])
    return {
        "policy": rows[0].policy if rows else "", "conversations": len(rows),
        "turns": sum(len(r.turns) for r in rows),
        "cost_cents_mean": float(cost.mean()) if len(rows) else 0.0,
        "cost_delta_pct": float(100 * (cost.sum() / full.sum() - 1)) if full.sum() > 0 else 0.0,
        "cost_delta_ci95": [100 * (x - 1) for x in _interval(
            [cost, full], samples, seed, lambda c, f: c.sum() / f.sum() if f.sum() > 0 else 1.0)],
        "mean_delta_per_token": float(mean.mean()) if len(rows) else 0.0,
        "mean_delta_ci95": list(_interval([mean], samples, seed, lambda m: m.mean())),
        "worst_delta_per_token": min((r.worst_delta for r in rows), default=0.0),
        "first_token_changed_share": (sum(sum(t.first_changed for t in r.turns) for r in rows)
                                      / max(1, sum(len(r.turns) for r in rows))),
        "bound": bound, "pass_rate": sum(passes(r, bound) for r in rows) / len(rows) if rows else 0.0,
    }
