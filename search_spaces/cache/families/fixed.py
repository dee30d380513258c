"""``schedule``: one fixed cumulative schedule, given whole (the hindsight oracle's, or any other).

A schedule written out in advance for one trajectory is a policy like any other: at a request of
``n`` messages it emits the entries whose trigger lies below ``n`` (a drop of message ``i`` at
trigger ``t`` needs ``i <= t``; repositions as listed). That restriction is cumulative and stable by
construction, so the evaluators, the stores and the reports treat it as they treat every policy.
The hindsight oracle (``evals.cache.oracle``) writes its per-task schedules in this form.

Parameters: ``drop_message`` (``{"trigger": [ids]}``, the wire format's table) and ``reposition``
(a list of triggers). They are checked once, against no message count (ids and triggers must be
non-negative integers, each id at most its trigger, each message dropped once, repositions
strictly increasing); the count is checked at every request, as for any policy.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from engine.errors import show
from search_spaces.cache.policy import Policy
from search_spaces.cache.request import Request
from search_spaces.errors import ParameterError
from search_spaces.params import unknown_parameter

NAME = "schedule"
PARAMS = ("drop_message", "reposition")


def _index(value: Any, what: str) -> int:
    """``value`` as a non-negative integer (a wire key may be its decimal string)."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and (value == "0" or value[0] != "0"):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ParameterError(f"{NAME}: {what} must be a non-negative integer, got {show(value)}", field=what, value=value)


def _drops(table: Any) -> dict[int, list[int]]:
    if not isinstance(table, Mapping):
        raise ParameterError(f"{NAME}: drop_message must be a mapping of trigger to message ids, got {show(table)}",
                             field="drop_message", value=table)
    out: dict[int, list[int]] = {}
    seen: set[int] = set()
    for key, ids in table.items():
        t = _index(key, "drop_message trigger")
        if isinstance(ids, str | bytes) or not isinstance(ids, Sequence):
            raise ParameterError(f"{NAME}: drop_message[{key!r}] must be a list of message ids, got {show(ids)}",
                                 field="drop_message", value=ids)
        for i in (_index(v, "drop_message id") for v in ids):
            if i > t or i in seen:
                why = f"is after its trigger {t}" if i > t else "is dropped twice"
                raise ParameterError(f"{NAME}: message {i} {why}", field="drop_message", value=i)
            seen.add(i)
            out.setdefault(t, []).append(i)
    return out


def _repositions(values: Any) -> list[int]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise ParameterError(f"{NAME}: reposition must be a list of triggers, got {show(values)}",
                             field="reposition", value=values)
    out = [_index(v, "reposition trigger") for v in values]
    if any(b <= a for a, b in itertools.pairwise(out)):
        raise ParameterError(f"{NAME}: reposition triggers must be strictly increasing, got {out}",
                             field="reposition", value=out)
    return out


class FixedSchedule(Policy):
    """Emits one given schedule, cut at each request (see the module docstring)."""

    name = NAME

    def __init__(self, **params: Any) -> None:
        super().__init__()
        for key, value in params.items():
            if key not in PARAMS:
                raise unknown_parameter(NAME, key, PARAMS, value)
        self._drops = _drops(params.get("drop_message", {}))
        self._repositions = _repositions(params.get("reposition", []))

    @property
    def params(self) -> dict[str, Any]:
        return {"drop_message": {str(t): sorted(ids) for t, ids in sorted(self._drops.items())},
                "reposition": list(self._repositions)}

    def propose(self, request: Request) -> dict[str, Any]:
        n = request.n
        return {"drop_message": {str(t): sorted(ids) for t, ids in sorted(self._drops.items()) if t < n},
                "reposition": [t for t in self._repositions if t < n]}


def space(trial: Any) -> dict[str, Any]:
    """A fixed schedule has nothing to tune."""
    return {}
