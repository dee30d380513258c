"""Errors raised by ``search_spaces``: every one is an :class:`engine.AKVError` (a ``ValueError``).

A caller mistake (unknown policy, bad parameter, malformed request) raises at once, with a message
naming the offending value. A *candidate* that fails (a program refused by the checker, killed by a
sandbox limit, or emitting an invalid schedule) is not an exception in the search: it is recorded
as a :class:`search_spaces.sandbox.SandboxResult` with its reason. :class:`ProgramFailure` only
wraps such a result when a program is used through the plain :class:`Policy` interface.
"""

from __future__ import annotations

from typing import Any

from engine.errors import AKVError


class PolicyError(AKVError):
    """Base class of the errors of this package."""


class UnknownPolicyError(PolicyError):
    """A policy (or seed) name that is not registered; the message lists the valid names."""


class ParameterError(PolicyError):
    """An unknown parameter name, or a parameter value outside its documented range."""


class DecisionError(PolicyError):
    """A decision that breaks the wire-format rules or rewrites an earlier decision."""


class ProgramFailure(PolicyError):
    """A policy program that failed to check, run or validate; ``result`` holds the record."""

    def __init__(self, message: str, *, result: Any = None) -> None:
        super().__init__(message, field="program", value=None)
        self.result = result
