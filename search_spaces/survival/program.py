"""Survival programs: run them only in the sandbox, validate what they return.

- :func:`run_survival_program` checks a program and runs ``decide`` on a batch of requests in one
  sandbox process; any failure is a :class:`SurvivalRunResult` with its reason (never a raise,
  never a fake score). Conformance tests use it.
- :class:`SurvivalProgram` is a program as a live :class:`engine.survival.SurvivalPolicy`: one
  long-lived sandbox process (``serve`` mode) answers every decision of a replay or simulation.
  A failure raises :class:`search_spaces.ProgramFailure` carrying the result.

- :func:`check_program` is the sandbox's static check with this track's API names readable;
  :func:`suggest_survival_params` draws ``space(trial)`` (``search_spaces.sandbox.space``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.survival import SurvivalDecision, SurvivalError, SurvivalRequest
from search_spaces.errors import ProgramFailure
from search_spaces.params import job_params, unknown_parameter
from search_spaces.sandbox import (
    RunOutcome,
    SandboxLimits,
    SandboxSession,
    SessionPool,
    Status,
    checker,
    one_line,
    run_child,
)
from search_spaces.sandbox.checker import CheckResult
from search_spaces.sandbox.space import Drawn, draw_params
from search_spaces.survival.api import API_CLASSES
from search_spaces.survival.builtin import parse_decisions


def check_program(source: str) -> CheckResult:
    """``source`` checked statically as a survival program: the sandbox's checker, with the names of
    this track's API (``survival/api.py``) readable."""
    return checker.check_program(source, API_CLASSES)


SPACES = SessionPool(size=4)
"""Kept sandbox processes answering the ``space`` calls of the survival programs tuned lately (a
process start costs ~50 times a draw)."""


def suggest_survival_params(source: str, trial: Any, limits: SandboxLimits | None = None) -> Drawn:
    """Draw the parameters of survival program ``source`` from Optuna ``trial``: its ``space`` runs in
    the program's kept sandbox process (:func:`search_spaces.sandbox.space.draw_params`; never raises
    for what the program does)."""
    limits = limits or SandboxLimits()
    check = check_program(source)
    return draw_params(check, trial, lambda message, answer: SPACES.ask(
        (check.sha256, limits), SPACES.program_starter(source, limits), message, answer))


@dataclass(frozen=True)
class SurvivalRunResult(RunOutcome):
    """The record of one sandboxed survival run (``RunOutcome``'s fields, then these).

    Attributes:
        decisions: per request, the validated decisions (empty unless ok).
    """

    decisions: tuple[Mapping[str, SurvivalDecision], ...] = ()


@dataclass(frozen=True)
class _Resolved:
    check: CheckResult
    params: dict[str, Any] | None  # DEFAULTS updated with the given values, when valid
    reason: str  # "ok", or why not
    unknown: str | None = None  # a parameter name outside DEFAULTS


def _resolve(source: str, params: Mapping[str, Any]) -> _Resolved:
    check = check_program(source)
    if not check.ok:
        return _Resolved(check, None, check.reason)
    if check.defaults is not None and set(params) - set(check.defaults):
        unknown = sorted(set(params) - set(check.defaults))[0]
        return _Resolved(check, None, f"parameter {unknown!r} is not in the program's DEFAULTS", unknown)
    return _Resolved(check, job_params({**(check.defaults or {}), **params}), "ok")


def run_survival_program(source: str, params: Mapping[str, Any], requests: Sequence[SurvivalRequest],
                         limits: SandboxLimits | None = None) -> SurvivalRunResult:
    """Check ``source`` and run its ``decide`` on every request in one sandbox process.

    Raises:
        ParameterError: ``params`` are not JSON values (a caller mistake).
    """
    limits = limits or SandboxLimits()
    res = _resolve(source, params)
    check = res.check
    if res.params is None:
        return SurvivalRunResult(Status.REFUSED if not check.ok else Status.INVALID, res.reason, check.sha256)
    job = {"mode": "survival", "source": source, "params": res.params, "requests": [r.wire() for r in requests]}
    out = run_child(job, limits)
    if out.status is not Status.OK or out.answer is None:
        return SurvivalRunResult(out.status, out.reason, check.sha256, out.wall_seconds)
    raw = out.answer.get("decisions")
    if not isinstance(raw, list) or len(raw) != len(requests):
        return SurvivalRunResult(Status.CRASHED, "the sandbox answered with the wrong number of decisions",
                                 check.sha256, out.wall_seconds)
    validated = []
    for i, (request, answer) in enumerate(zip(requests, raw)):
        try:
            validated.append(parse_decisions(answer, request, f"request {i}"))
        except SurvivalError as err:
            return SurvivalRunResult(Status.INVALID, one_line(str(err)), check.sha256, out.wall_seconds)
    return SurvivalRunResult(Status.OK, "ok", check.sha256, out.wall_seconds, tuple(validated))


class SurvivalProgram:
    """A survival program as a policy, answered by one long-lived sandbox process.

    Args:
        source: the program text (checked at once).
        params: parameter values (names outside ``DEFAULTS`` are refused; missing ones default).
        limits: sandbox limits (``cpu_seconds`` bounds the process's life, ``wall_seconds`` each answer).

    Raises:
        ProgramFailure: the static check refuses ``source`` (or, later, a decision fails).
        ParameterError: an unknown parameter, or a value that is not JSON.
    """

    name = "program"

    def __init__(self, source: str, params: Mapping[str, Any] | None = None, *,
                 limits: SandboxLimits | None = None) -> None:
        given = dict(params or {})
        res = _resolve(source, given)
        check = res.check
        if not check.ok:
            raise ProgramFailure(f"program refused: {check.reason}",
                                 result=SurvivalRunResult(Status.REFUSED, check.reason, check.sha256))
        if res.params is None:
            raise unknown_parameter("program", res.unknown or "", list(check.defaults or {}),
                                    given.get(res.unknown or ""))
        self.sha256 = check.sha256
        self.source = source
        self.params = res.params
        self.limits = limits or SandboxLimits()
        self._session: SandboxSession | None = None
        self.calls = 0

    def _fail(self, status: Status, reason: str, wall: float) -> ProgramFailure:
        return ProgramFailure(f"program failed: {reason}", result=SurvivalRunResult(status, reason, self.sha256, wall))

    def decide(self, request: SurvivalRequest) -> dict[str, SurvivalDecision]:
        if self._session is None:
            self._session = SandboxSession({"source": self.source, "params": self.params}, self.limits)
        out = self._session.ask({"request": request.wire()})
        self.calls += 1
        if out.status is not Status.OK or out.answer is None:
            raise self._fail(out.status, out.reason, out.wall_seconds)
        try:
            return parse_decisions(out.answer.get("decisions"), request, "program")
        except SurvivalError as err:
            raise self._fail(Status.INVALID, one_line(str(err)), out.wall_seconds) from err

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
