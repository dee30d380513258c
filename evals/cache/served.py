"""A policy served by model name, deciding exactly as the replay evaluator does (invariant 8).

:class:`ReplayPolicy` is the :class:`engine.served_policy.ServedPolicy` of a
:class:`search_spaces.Policy` (a built-in family, or a program, which runs in the sandbox's kept
processes under per-call limits): for a request it replays the policy over the request's messages,
deciding at every request point in order (``search_spaces.request_points``) with ``previous`` passed
along and the served model's token counts, and serves the last decision, under the frame guard when
the policy was searched or exported with it (``evals.cache.guard``). That is the decision
``Replay.decide`` takes at the same point of the same messages, so a policy behaves alike in search,
in ``akv live`` and in service.

A failure (an exception, an invalid decision, a program's crash or time-out) raises
:class:`engine.served_policy.PolicyFailure` with the fallback: the replay's decision at the last
request point that the policy decided (found again from the messages, so nothing is kept between
requests), or none. ``akv serve --policy`` builds these (``rsi.cache.serving``).

Not for: text baselines (they rewrite messages; nothing to serve as a schedule), nor the server.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from engine.errors import AKVError
from engine.layout import Rendered
from engine.served_policy import PolicyFailure, PolicyOutcome
from evals.cache.guard import guard_decisions
from search_spaces import Decision, Episode, Policy, PolicyError, PolicyKind, ProgramFailure

_FAILED_AT = re.compile(r"request of (\d+) messages")
"""Where the sandbox says a program failed (``[episode 0, request of N messages]``)."""

SAMPLE: tuple[dict[str, Any], ...] = (
    {"role": "system", "content": "You are an agent. Tools: search(query), read(doc_id)."},
    {"role": "user", "content": "Find the launch year of the probe and its mass."},
    *(m for k in range(5) for m in (
        {"role": "assistant", "content": f"Searching, step {k}.",
         "tool_calls": [{"id": f"c{k}", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": f"c{k}", "name": "search", "content": f"result {k}: " + "text " * (20 + k)})),
    {"role": "assistant", "content": "The probe launched in 1977."},
    {"role": "user", "content": "And its mass?"},
)
"""A short agent session on which :meth:`ReplayPolicy.check` runs a policy before it is served."""


class ReplayPolicy:
    """``policy`` served as ``name`` (see the module docstring).

    Args:
        name: the name after ``@`` in the model id.
        policy: a cache policy (a text baseline is refused).
        frame_guard: every decision guarded (a run searched, or a module exported, under the guard).
        label: what the policy is, for messages (``rolling_drop(keep_tool_responses=1)``, a path).

    Raises:
        PolicyError: ``policy`` is a text baseline.
    """

    def __init__(self, name: str, policy: Policy, *, frame_guard: bool = False, label: str = "") -> None:
        if policy.kind is not PolicyKind.CACHE:
            raise PolicyError(f"policy {name!r} ({label or policy.name}) is a text baseline: it rewrites messages, "
                              "and only a cache schedule can be served", field="policy", value=name)
        self._name = name
        self.policy = policy
        self.frame_guard = frame_guard
        self.label = label or policy.name

    @property
    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"ReplayPolicy({self._name!r}, {self.label!r}{', frame guard' if self.frame_guard else ''})"

    def schedule(self, messages: Sequence[Mapping[str, Any]], token_counts: Sequence[int]) -> dict[str, Any]:
        """The replay's decision at the last request point of ``messages`` (no drops before the
        first); see :class:`engine.served_policy.ServedPolicy`.

        Raises:
            PolicyFailure: the policy failed at some request point (``fallback``: the decision at
                the last point before it, or ``None``).
        """
        try:
            episode = Episode.of(messages, token_counts)
        except AKVError as err:  # the server checked the messages: a mismatch here is the policy's to report
            raise PolicyFailure(f"the request cannot be replayed: {err}") from None
        try:
            return _wire(self._decide(episode))
        except Exception as err:  # noqa: BLE001 -- a policy's bug is its failure, reported; never the server's
            failure = err
        fallback = self._fallback(episode, failure)
        raise PolicyFailure(_reason(failure), outcome=_outcome(failure),
                            fallback=_wire(fallback) if fallback is not None else None)

    def check(self, messages: Sequence[Mapping[str, Any]] = SAMPLE) -> None:
        """Decide a sample session twice, refusing a policy that fails on it or decides differently
        the second time (served decisions must equal the replay's, request after request).

        Raises:
            PolicyError: naming the policy and what went wrong.
        """
        counts = [1 + len(str(m.get("content", ""))) // 4 for m in messages]
        try:
            first, second = (self.schedule(messages, counts) for _ in range(2))
        except PolicyFailure as err:
            raise PolicyError(f"policy {self._name!r} ({self.label}) fails on a sample session: {err}",
                              field="policy", value=self._name) from None
        if first != second:
            raise PolicyError(f"policy {self._name!r} ({self.label}) decides the same session differently twice "
                              f"({first} then {second}): its served schedules would not equal its replay",
                              field="policy", value=self._name)

    def _decide(self, episode: Episode) -> Decision | None:
        """The decision at ``episode``'s last cut (guarded as evaluated), or ``None`` without cuts."""
        if not episode.cuts:
            return None
        decisions = self.policy.run_episodes([episode])[0]
        last = decisions[-1]
        if self.frame_guard:
            return guard_decisions(episode.messages, {last.n_messages: last})[last.n_messages]
        return last

    def _fallback(self, episode: Episode, failure: Exception) -> Decision | None:
        """The replay's decision at the last request point the policy decides, or ``None``: the
        longest prefix of ``episode.cuts`` that it decides, found by bisection (a deterministic
        policy that fails at a point fails on every longer prefix), first trying the prefix before
        the point the sandbox named."""
        cuts = episode.cuts
        hi = len(cuts) - 1  # the longest prefix that may succeed; cuts[:0] always does (no decision)
        found = _FAILED_AT.search(str(failure))
        if found is not None and int(found.group(1)) in cuts:
            hi = min(hi, cuts.index(int(found.group(1))))
        lo, best = 0, None
        first = True
        while lo < hi:
            mid = hi if first else (lo + hi + 1) // 2
            first = False
            try:
                decided = self._decide(Episode(episode.messages, episode.token_counts, cuts[:mid], episode.relevance))
            except Exception:  # noqa: BLE001 -- the same failure, earlier: look before it
                hi = mid - 1
                continue
            lo, best = mid, decided
        return best


class CountedPolicy:
    """``served``'s schedule for ``messages`` with their token counts from ``render`` (``akv live``:
    the endpoint's model, rendered locally by ``engine.RemoteEngine.render``): the ``decide(messages)``
    that ``evals.cache.live.run_episode`` calls each turn."""

    def __init__(self, served: ReplayPolicy, render: Callable[[Sequence[Any]], Rendered]) -> None:
        self.served = served
        self.render = render

    def decide(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Raises :class:`engine.served_policy.PolicyFailure` when the policy fails."""
        return self.served.schedule(messages, self.render(list(messages)).message_tokens)


def _wire(decision: Decision | None) -> dict[str, Any]:
    return decision.wire if decision is not None else {"drop_message": {}, "reposition": []}


def _outcome(err: Exception) -> PolicyOutcome:
    if isinstance(err, ProgramFailure) and err.result is not None and err.result.timed_out:
        return PolicyOutcome.TIMEOUT
    return PolicyOutcome.ERROR


def _reason(err: Exception) -> str:
    return str(err) if isinstance(err, AKVError) else f"{type(err).__name__}: {err}"
