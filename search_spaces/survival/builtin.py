"""Built-in survival policies as :class:`engine.survival.SurvivalPolicy` objects, and decision parsing.

A built-in policy runs its family's ``decide`` in this process on the same view a program gets
in the sandbox (``search_spaces.survival.api.SurvivalView``), so a built-in and its seed program
see identical inputs; :func:`parse_decisions` validates what either returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.survival import SurvivalDecision, SurvivalError, SurvivalRequest
from search_spaces.params import as_dict
from search_spaces.survival.api import SurvivalView
from search_spaces.survival.common import SurvivalFamily


def parse_decisions(raw: Any, request: SurvivalRequest, who: str) -> dict[str, SurvivalDecision]:
    """Validate a policy's answer: exactly one decision per pending session.

    Raises:
        SurvivalError: not a dict, a missing or unknown session id, or a malformed decision.
    """
    if not isinstance(raw, Mapping):
        raise SurvivalError(f"{who}: decide must return a dict of session id to decision, got {type(raw).__name__}",
                            field="decisions", value=type(raw).__name__)
    wanted = [s.session for s in request.pending]
    missing = [s for s in wanted if s not in raw]
    if missing:
        raise SurvivalError(f"{who}: no decision for session {missing[0]!r}", field="decisions", value=missing[0])
    extra = sorted(set(raw) - set(wanted), key=str)
    if extra:
        raise SurvivalError(f"{who}: decision for session {extra[0]!r}, which is not pending", field="decisions",
                            value=extra[0])
    return {s: SurvivalDecision.from_wire(raw[s], f"{who}: decisions[{s!r}]") for s in wanted}


class BuiltinSurvival:
    """A built-in family with resolved parameters, as a survival policy.

    Args:
        family: the family (``registry.SURVIVAL_FAMILIES``).
        params: an instance of ``family.params``.
    """

    def __init__(self, family: SurvivalFamily, params: Any) -> None:
        self.family = family
        self.name = family.name
        self._params = params

    @property
    def params(self) -> dict[str, Any]:
        return as_dict(self._params)

    def decide_view(self, view: SurvivalView) -> dict[str, dict[str, Any]]:
        """The raw decisions (wire dicts) for a view: what the seed program returns for it."""
        return self.family.decide(view, self._params)

    def decide(self, request: SurvivalRequest) -> dict[str, SurvivalDecision]:
        raw = self.decide_view(SurvivalView(request.wire()))
        return parse_decisions(raw, request, self.name)

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"BuiltinSurvival({self.name!r}, {self.params})"
