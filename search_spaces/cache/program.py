"""Policy programs: run them (only) in the sandbox, validate what they return, tune their space.

- :func:`run_program` checks a program, runs it on a batch of episodes in one sandbox process and
  validates every decision; any failure is a :class:`SandboxResult` with its reason (never a raise,
  never a fake score).
- :func:`check_program` is the sandbox's static check with this track's API names readable.
- :func:`suggest_params` evaluates ``space(trial)`` in the sandbox against a real Optuna trial
  (``search_spaces.sandbox.space``).
- :class:`ProgramPolicy` makes a program an ordinary :class:`Policy`; failures raise
  :class:`ProgramFailure` carrying the result.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from search_spaces.cache._program_memo import LRU, episode_key, text_key, trajectory_key
from search_spaces.cache.decision import Decision, appended_decision, cache_decision
from search_spaces.cache.embed import Embedder
from search_spaces.cache.policy import Policy
from search_spaces.cache.program_api import API_CLASSES
from search_spaces.cache.request import Episode, PolicyKind, Request
from search_spaces.errors import DecisionError, ProgramFailure
from search_spaces.params import job_params, unknown_parameter
from search_spaces.sandbox import (
    ChildOutput,
    RunOutcome,
    SandboxLimits,
    SandboxSession,
    SessionPool,
    Status,
    checker,
    one_line,
)
from search_spaces.sandbox.checker import CheckResult
from search_spaces.sandbox.space import draw_params


def check_program(source: str) -> CheckResult:
    """``source`` checked statically as a cache policy program: the sandbox's checker, with the names
    of this track's API (``program_api``) readable."""
    return checker.check_program(source, API_CLASSES)


@dataclass(frozen=True)
class SandboxResult(RunOutcome):
    """The record of one sandboxed evaluation (``RunOutcome``'s fields, then these).

    Attributes:
        decisions: per episode, the validated decisions (empty unless ok).
        params: what ``space(trial)`` returned (:func:`suggest_params` only).
    """

    decisions: tuple[tuple[Decision, ...], ...] = ()
    params: Mapping[str, Any] | None = field(default=None)


def _episode_job(ep: Episode, previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {"messages": [dict(m) for m in ep.messages], "tokens": list(ep.token_counts), "cuts": list(ep.cuts),
            "relevance": list(ep.relevance) if ep.relevance is not None else None,
            "previous": dict(previous) if previous is not None else None}


HELD = 256
"""Trajectories one sandbox process keeps between calls (sent once, then named by their key; past
this many it is told to forget them all and is sent each again as it is needed)."""

CHECKED: LRU[tuple[Decision, ...]] = LRU(2048)
"""Checked decisions of an episode by the exact text the sandbox sent for them (a screen's trials
often decide alike: the same text is the same decisions, and checking them again is skipped)."""


def _decide_message(part: Sequence[Episode], params: dict[str, Any]) -> Callable[[SandboxSession], dict[str, Any]]:
    """The streamed ``decide`` request of ``part`` for the sandbox process it goes to: each episode's
    trajectory (messages and token counts, most of a request's bytes and of what the process
    builds from them) is sent the first time that process sees it and named by its key after."""

    def message(session: SandboxSession) -> dict[str, Any]:
        keys = [trajectory_key(e) for e in part]
        forget = len(session.held | set(keys)) > HELD
        if forget:
            session.held.clear()
        jobs = []
        for ep, key in zip(part, keys):
            job: dict[str, Any] = {"trajectory": key, "cuts": list(ep.cuts),
                                   "relevance": list(ep.relevance) if ep.relevance is not None else None,
                                   "previous": None}
            if key not in session.held:
                job.update(messages=[dict(m) for m in ep.messages], tokens=list(ep.token_counts))
                session.held.add(key)
            jobs.append(job)
        return {"mode": "decide", "params": params, "episodes": jobs, "stream": True, "forget": forget}

    return message


_PART = re.compile(rb'\{"partial": (0|[1-9][0-9]{0,8}), "decisions": ')
"""How a streamed part starts (``child._decide_all``); the decisions' JSON text follows, then ``}``."""


SHARDS = 2
"""Sandbox processes that decide one call's episodes at the same time (process k the episodes k,
k + SHARDS, ...: their decisions are checked in order, in turns, as they arrive): a program's
decisions are most of a screen's time. Two suits the 2-core machine the project runs on, where one
process per program screened 8-14% slower (``python -m bench.screen_speed --shards 1``, against the default)."""

SESSIONS = SessionPool(size=4 * SHARDS)
"""The sandbox processes of the programs run lately (``SHARDS`` per program and limits): a call
runs the program's module code afresh in each, as a new process would, without paying for one."""


def _sandboxed(source: str, sha256: str, limits: SandboxLimits, message: dict[str, Any],
               answer: Any = None) -> ChildOutput:
    """``message`` (a ``space`` or ``decide`` call) answered by the program's first pooled sandbox
    process (the one that decides the episodes 0, SHARDS, ... of :func:`run_program`: a program's
    ``space`` and ``decide`` calls alternate in a screen, and one process fewer is one start fewer).
    Each call keeps ``limits`` (CPU, wall clock, output); memory and CPU are bounded per process too."""
    return SESSIONS.ask((sha256, limits, 0), SESSIONS.program_starter(source, limits), message, answer)


OnEpisode = Callable[[int, tuple[Decision, ...]], None]
"""(episode index, its validated decisions): called as each episode's decisions arrive."""


def run_program(source: str, params: Mapping[str, Any], episodes: Sequence[Episode],
                limits: SandboxLimits | None = None, on_episode: OnEpisode | None = None) -> SandboxResult:
    """Check ``source``, run ``decide`` on every request of ``episodes`` in the program's sandbox
    processes (:data:`SHARDS` of them, each request carrying the program's previous decision) and
    validate each decision. The program gets its ``DEFAULTS`` updated with ``params``; a name
    outside ``DEFAULTS`` is a failure.

    The sandbox sends each episode's decisions as soon as it has made them, and they are validated
    (and given to ``on_episode``) while it decides the next episodes: the caller's work on them
    overlaps the program's. Each process is sent an episode's trajectory once and keeps it for its
    later calls (:data:`HELD`), and decisions whose text was checked before for the same episode
    are not checked again (:data:`CHECKED`). A call of ``on_episode`` does not mean the run
    succeeds (a later episode can still fail it); an exception it raises is raised again once the
    sandbox has answered, and it is not called after one. It runs while the sandbox pool is held:
    it must not run a program itself.

    Raises:
        ParameterError: ``params`` are not JSON values (a caller mistake).
    """
    limits = limits or SandboxLimits()
    check = check_program(source)
    if not check.ok:
        return SandboxResult(Status.REFUSED, check.reason, check.sha256)
    if check.defaults is not None and set(params) - set(check.defaults):
        unknown = sorted(set(params) - set(check.defaults))[0]
        return SandboxResult(Status.INVALID, f"parameter {unknown!r} is not in the program's DEFAULTS", check.sha256)
    sent = job_params({**(check.defaults or {}), **params})
    parts = [episodes[k::SHARDS] for k in range(min(SHARDS, len(episodes)))] or [[]]
    keys = [episode_key(e) for e in episodes]
    validated: list[tuple[Decision, ...]] = []
    failed: list[tuple[Status, str]] = []  # the first failure found in a streamed part
    raised: list[Exception] = []  # what on_episode raised
    received = [0]  # bytes streamed

    def partial(shard: int, line: bytes) -> None:
        if failed:
            return
        received[0] += len(line)
        if received[0] > limits.max_output_bytes:
            failed.append((Status.OUTPUT_LIMIT, f"the answer exceeds {limits.max_output_bytes} bytes"))
            return
        head = _PART.match(line)
        e = int(head.group(1)) * len(parts) + shard if head and line.endswith(b"}") else -1  # shard k: k, k + K, ...
        if e != len(validated) or e >= len(episodes):
            failed.append((Status.CRASHED, "the sandbox answered with the wrong number of decisions"))
            return
        assert head is not None
        text = line[head.end():-1]
        key = text_key(keys[e], text)
        decisions = CHECKED.get(key)
        if decisions is None:
            try:
                wires = json.loads(text)
            except (ValueError, RecursionError):
                wires = None
            if not isinstance(wires, list) or len(wires) != len(episodes[e].cuts):
                failed.append((Status.CRASHED, "the sandbox answered with the wrong number of decisions"))
                return
            try:
                decisions = _validated(episodes[e], wires)
            except DecisionError as err:
                failed.append((Status.INVALID, one_line(f"episode {e}: {err}")))
                return
            CHECKED.put(key, decisions)
        validated.append(decisions)
        if on_episode is not None and not raised:
            try:
                on_episode(e, decisions)
            except Exception as err:  # noqa: BLE001 - raised again once the sandbox has answered
                raised.append(err)

    start = SESSIONS.program_starter(source, limits)
    outs = SESSIONS.ask_all([((check.sha256, limits, k), start, _decide_message(part, sent),
                              functools.partial(partial, k)) for k, part in enumerate(parts)])
    if raised:
        raise raised[0]
    wall = max((o.wall_seconds for o in outs), default=0.0)
    for out in outs:
        if out.status is not Status.OK or out.answer is None:
            return SandboxResult(out.status, out.reason, check.sha256, wall)
    if failed:
        return SandboxResult(*failed[0], check.sha256, wall)
    if any(o.answer is None or o.answer.get("episodes") != len(part) for o, part in zip(outs, parts)) or len(
            validated) != len(episodes):
        return SandboxResult(Status.CRASHED, "the sandbox answered with the wrong number of decisions",
                             check.sha256, wall)
    return SandboxResult(Status.OK, "ok", check.sha256, wall, tuple(validated))


def _validated(episode: Episode, wires: list[Any]) -> tuple[Decision, ...]:
    """The decisions of ``episode``'s requests, each checked (and against the one before).

    Raises:
        DecisionError: the first that is not valid.
    """
    decisions: list[Decision] = []
    previous: tuple[Any, int] = (None, 0)
    for n, wire in zip(episode.cuts, wires):
        if decisions and wire == previous[0]:  # unchanged: valid as before, and it extends itself
            decisions.append(Decision(PolicyKind.CACHE, n, schedule=decisions[-1].schedule))
        elif decisions and (added := appended_decision(wire, n, previous[0], decisions[-1])) is not None:
            decisions.append(added)
        else:
            decisions.append(cache_decision(wire, episode.request(n, *previous),
                                            decisions[-1].schedule if decisions else None))
        previous = (wire, n)
    return tuple(decisions)


def suggest_params(source: str, trial: Any, limits: SandboxLimits | None = None) -> SandboxResult:
    """Draw the parameters of cache program ``source`` from Optuna ``trial``
    (:func:`search_spaces.sandbox.space.draw_params`: never raises for anything the program does).
    ``space`` runs in the program's first pooled sandbox process, where its ``decide`` calls run too."""
    limits = limits or SandboxLimits()
    check = check_program(source)
    drawn = draw_params(check, trial, lambda message, answer: _sandboxed(source, check.sha256, limits, message, answer))
    return SandboxResult(drawn.status, drawn.reason, drawn.sha256, drawn.wall_seconds, params=drawn.params)


class ProgramPolicy(Policy):
    """A policy program as a :class:`Policy` (every call runs in the sandbox).

    Args:
        source: the program text (checked at once).
        params: parameter values; with a ``DEFAULTS`` dict in the program, names outside it are
            refused and missing ones take their defaults.
        limits: sandbox limits per call.
        embedder: computes relevance when the program's ``NEEDS`` asks for it.

    Raises:
        ProgramFailure: the static check refuses ``source``.
        ParameterError: an unknown parameter, or a value that is not JSON.
    """

    name = "program"

    def __init__(self, source: str, params: Mapping[str, Any], *, limits: SandboxLimits | None = None,
                 embedder: Embedder | None = None) -> None:
        super().__init__(embedder)
        self.check: CheckResult = check_program(source)
        if not self.check.ok:
            raise ProgramFailure(f"program refused: {self.check.reason}",
                                 result=SandboxResult(Status.REFUSED, self.check.reason, self.check.sha256))
        defaults = dict(self.check.defaults or {})
        unknown = sorted(set(params) - set(defaults)) if self.check.defaults is not None else []
        if unknown:
            raise unknown_parameter("program", unknown[0], list(defaults), params[unknown[0]])
        self.source = source
        self.limits = limits or SandboxLimits()
        self._params = job_params({**defaults, **params})

    @property
    def sha256(self) -> str:
        return self.check.sha256

    @property
    def params(self) -> dict[str, Any]:
        return dict(self._params)

    @property
    def needs_relevance(self) -> bool:
        if "relevance" not in self.check.needs:
            return False
        switches = self.check.needs["relevance"]
        return not switches or any(self._params.get(k, 0) not in (0, None, False) for k in switches)

    def propose(self, request: Request) -> Mapping[str, Any]:
        episode = Episode(request.messages, request.token_counts, (request.n,), request.relevance)
        job = {"mode": "decide", "params": self._params, "episodes": [_episode_job(episode, request.previous)]}
        out = _sandboxed(self.source, self.sha256, self.limits, job)
        if out.status is not Status.OK or out.answer is None:
            raise ProgramFailure(f"program failed: {out.reason}",
                                 result=SandboxResult(out.status, out.reason, self.sha256, out.wall_seconds))
        wire: Mapping[str, Any] = out.answer["episodes"][0][0]
        return wire

    def run_episodes(self, episodes: Sequence[Episode], on_episode: OnEpisode | None = None,
                     ) -> list[tuple[Decision, ...]]:
        """All episodes in one sandbox call (``on_episode``: see :func:`run_program`). Raises
        :class:`ProgramFailure` (with ``.result``)."""
        if self.needs_relevance:
            episodes = [e if e.relevance is not None else Episode(e.messages, e.token_counts, e.cuts,
                                                                  self.relevance_for(e.messages)) for e in episodes]
        result = run_program(self.source, self._params, episodes, self.limits, on_episode)
        if not result.ok:
            raise ProgramFailure(f"program failed: {result.reason}", result=result)
        return list(result.decisions)

    def space(self, trial: Any) -> dict[str, Any]:
        """This program's ``space(trial)``, run in the sandbox. Raises :class:`ProgramFailure`."""
        result = suggest_params(self.source, trial, self.limits)
        if not result.ok or result.params is None:
            raise ProgramFailure(f"program space failed: {result.reason}", result=result)
        return dict(result.params)
