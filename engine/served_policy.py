"""A policy served by model name: what the server asks of it, and what it reports back.

``akv serve --policy NAME=SPEC`` serves ``MODEL@NAME`` beside ``MODEL``: a request that names it
gets the cumulative schedule the policy computes from the request's messages. The policies
themselves (a built-in family, a program in the sandbox, a search run's pick) live above the engine
(``evals.cache.served``) and are handed to ``engine.server.create_app(policies=...)`` by the command
line, so the engine never imports ``search_spaces``, ``evals`` or ``rsi``. The server runs a policy
on a pool thread under a time limit (``engine.server.policies``).

Not for: deciding (no policy lives here), nor the HTTP edge.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from engine.errors import AKVError


class PolicyOutcome(enum.StrEnum):
    """How a served policy's request went: ``ok``, or why it was served without new drops."""

    OK = "ok"
    ERROR = "error"
    """The policy raised (a bug, an invalid decision, a program that crashed or was refused)."""
    TIMEOUT = "timeout"
    """The policy ran past its time (the sandbox's limit, or the server's)."""
    REFUSED = "refused"
    """The engine refused the schedule the policy computed."""


class PolicyFailure(AKVError):
    """A served policy could not decide a request.

    Attributes:
        outcome: ``ERROR`` or ``TIMEOUT``.
        fallback: the wire schedule of the last request point that the policy decided (the
            request is served with it: no new drops), or ``None`` when none did (the full cache).
    """

    def __init__(self, message: str, *, outcome: PolicyOutcome = PolicyOutcome.ERROR,
                 fallback: Mapping[str, Any] | None = None) -> None:
        super().__init__(message, field="model")
        self.outcome = outcome
        self.fallback = dict(fallback) if fallback is not None else None


@runtime_checkable
class ServedPolicy(Protocol):
    """A policy the server runs for the requests that name it.

    Contract: :meth:`schedule` returns the wire-format cumulative schedule (``drop_message``,
    ``reposition``) for a request holding ``messages``, exactly as the replay evaluator decides
    over the same messages (the same request points in order, ``previous`` passed along) with
    ``token_counts`` (per message, under the served model's tokenizer and template). It mutates
    nothing, may be called from several threads at once, and raises :class:`PolicyFailure` (with
    the fallback schedule) for any failure of the policy; nothing else.
    """

    @property
    def name(self) -> str:
        """The name after ``@`` in the model id."""
        ...

    def schedule(self, messages: Sequence[Mapping[str, Any]], token_counts: Sequence[int]) -> dict[str, Any]:
        """The wire schedule of the request holding ``messages``; raises :class:`PolicyFailure`."""
        ...


@dataclass(frozen=True)
class PolicyReport:
    """What a request served by a policy reports (``usage.akv_policy``, the ``X-AKV-Policy`` header).

    Attributes:
        name: the policy's name.
        outcome: ``ok``, or why the request was served without new drops.
        reason: one line saying what failed (empty when ok).
        fallback: ``previous`` (the schedule of the last request point the policy decided) or
            ``full`` (no drops), when not ok.
    """

    name: str
    outcome: PolicyOutcome = PolicyOutcome.OK
    reason: str = ""
    fallback: str = ""

    def __post_init__(self) -> None:
        assert (self.outcome is PolicyOutcome.OK) == (not self.fallback), "a fallback goes with a failure"

    @property
    def ok(self) -> bool:
        return self.outcome is PolicyOutcome.OK

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "ok": self.ok}
        if not self.ok:
            out |= {"outcome": self.outcome.value, "reason": self.reason, "fallback": self.fallback}
        return out

    @property
    def header(self) -> str:
        """The ``X-AKV-Policy`` header value: ``NAME; ok`` or ``NAME; OUTCOME; fallback=previous|full``."""
        return f"{self.name}; ok" if self.ok else f"{self.name}; {self.outcome.value}; fallback={self.fallback}"
