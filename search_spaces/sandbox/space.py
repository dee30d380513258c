"""Drawing a program's parameters: its ``space(trial)`` runs in the sandbox, and each ``suggest_*``
call the child makes is forwarded to a real Optuna trial in the parent as it happens (so conditional
spaces draw exactly the parameters their branches reach), after checking it is one Optuna can hold.
Both tracks draw through here; each runs the ``space`` call in its own kept sandbox process and
checks the program against its own API.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from search_spaces.sandbox.checker import CheckResult
from search_spaces.sandbox.process import ChildOutput, RunOutcome, Status

RunSpace = Callable[[dict[str, Any], Callable[[dict[str, Any]], Any]], ChildOutput]
"""(the ``space`` message, the answerer of its questions) -> what the child answered: how a track
runs a program's ``space`` in the sandbox."""


@dataclass(frozen=True)
class Drawn(RunOutcome):
    """The record of one draw (``RunOutcome``'s fields); ``params``: what ``space(trial)`` returned."""

    params: Mapping[str, Any] | None = None


def draw_params(check: CheckResult, trial: Any, run: RunSpace) -> Drawn:
    """The parameters the checked program draws from Optuna ``trial``, its ``space`` run by ``run``.

    Never raises for anything the program does: a program the check refused is ``REFUSED``; a
    suggestion with bounds Optuna cannot hold (beyond 2**53 for integers, not finite for floats, a
    range that overflows), a refused suggestion, or more than the limits' ``max_params``
    suggestions make the result ``INVALID``.
    """
    if not check.ok:
        return Drawn(Status.REFUSED, check.reason, check.sha256)
    out = run({"mode": "space"}, lambda spec: forward(trial, spec))
    if out.status is not Status.OK or out.answer is None:
        reason = out.reason if out.reason.startswith("space(trial)") else f"space(trial): {out.reason}"
        return Drawn(out.status, reason, check.sha256, out.wall_seconds)
    params = out.answer.get("params")
    if not isinstance(params, dict):
        return Drawn(Status.CRASHED, "space(trial): the sandbox answered without parameters", check.sha256,
                     out.wall_seconds)
    return Drawn(Status.OK, "ok", check.sha256, out.wall_seconds, params=MappingProxyType(params))


MAX_INT = 2**53
"""Bound of integer suggestions and choices: Optuna keeps parameter values as floats."""
_MAX_CHOICES = 1000
_MAX_TEXT = 1000


def forward(trial: Any, call: Mapping[str, Any]) -> Any:
    """Forward one suggestion of the child to ``trial`` after checking it is one Optuna can hold.

    Raises:
        ValueError, TypeError, KeyError: a suggestion outside what Optuna accepts (also
            ``ArithmeticError`` from Optuna itself); the dialog turns these into ``INVALID``.
    """
    if not isinstance(call, Mapping):
        raise TypeError("a suggestion must be an object")
    name, kind = call.get("name"), call.get("kind")
    if not isinstance(name, str) or not 0 < len(name) <= _MAX_TEXT:
        raise ValueError(f"a parameter name must be a non-empty string of at most {_MAX_TEXT} characters")
    log = call.get("log", False)
    if not isinstance(log, bool):
        raise TypeError(f"log must be True or False, got {log!r}")
    if kind == "int":
        low, high = _integer(call.get("low"), "low"), _integer(call.get("high"), "high")
        step = _integer(1 if call.get("step") is None else call["step"], "step")
        if step < 1 or low > high:
            raise ValueError(f"need low <= high and step >= 1, got low={low}, high={high}, step={step}")
        return trial.suggest_int(name, low, high, step=step, log=log)
    if kind == "float":
        flow, fhigh = _finite(call.get("low"), "low"), _finite(call.get("high"), "high")
        fstep = None if call.get("step") is None else _finite(call["step"], "step")
        if fstep is not None and not fstep > 0:
            raise ValueError(f"step must be positive, got {fstep!r}")
        if flow > fhigh or not math.isfinite(fhigh - flow):
            raise ValueError(f"need finite low <= high with a finite range, got low={flow!r}, high={fhigh!r}")
        return trial.suggest_float(name, flow, fhigh, step=fstep, log=log)
    if kind == "categorical":
        choices = call.get("choices")
        if not isinstance(choices, list) or not 0 < len(choices) <= _MAX_CHOICES:
            raise ValueError(f"choices must be a list of 1 to {_MAX_CHOICES} values")
        for c in choices:
            _choice(c)
        return trial.suggest_categorical(name, choices)
    raise ValueError(f"unknown suggestion kind {kind!r}")


def _integer(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an integer, got {type(value).__name__}")
    if abs(value) > MAX_INT:
        raise ValueError(f"{what} must be within +-2**53, got {what} of {len(str(abs(value)))} digits")
    return value


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number, got {type(value).__name__}")
    if isinstance(value, int):
        return float(_integer(value, what))
    if not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def _choice(value: Any) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        _integer(value, "a choice")
    elif isinstance(value, float):
        _finite(value, "a choice")
    elif not isinstance(value, str) or len(value) > _MAX_TEXT:
        raise ValueError(f"a choice must be None, a bool, a number or a string of at most {_MAX_TEXT} characters")
