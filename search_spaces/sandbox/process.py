"""The sandbox process: run a job in an isolated child interpreter under hard limits.

The second wall around policy programs (the first is ``checker.py``). A job runs in
``python -I -S -B child.py`` (standard library only, empty environment, a fresh temporary
working directory, its own session so the whole group can be killed), which confines itself with
rlimits before compiling the program (see ``child.py``). This module enforces the
wall-clock limit and the output cap from outside and turns every way a child can end into a
:class:`ChildOutput` with a :class:`Status` and a one-line reason. It never imports or runs a
program in the calling process, and it knows nothing about decisions (``program.py`` does).
"""

from __future__ import annotations

import atexit
import enum
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHILD = Path(__file__).resolve().with_name("child.py")
_STDERR_CAP = 64_000


class Status(enum.Enum):
    """How a sandboxed run ended."""

    OK = "ok"
    REFUSED = "refused"  # the static check refused the program; it never ran
    TIMEOUT = "timeout"  # CPU time or wall-clock limit
    MEMORY = "memory"  # the memory limit
    ERROR = "error"  # the program raised, or returned something that is not a decision
    CRASHED = "crashed"  # the child died without an answer
    OUTPUT_LIMIT = "output_limit"  # the answer was too large
    INVALID = "invalid"  # a decision broke the wire-format rules or rewrote the past


@dataclass(frozen=True)
class RunOutcome:
    """How one sandboxed run ended (the fields every program result shares).

    Attributes:
        status: how it ended; ``ok``/``timed_out``/``error`` are derived flags.
        reason: ``"ok"`` or one line fit to show a proposer.
        sha256: the program's hash.
        wall_seconds: time spent in the sandbox.
    """

    status: Status
    reason: str
    sha256: str
    wall_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def timed_out(self) -> bool:
        return self.status is Status.TIMEOUT

    @property
    def error(self) -> bool:
        """Any failure other than a timeout (refused, crashed, raised, invalid, too large)."""
        return not self.ok and not self.timed_out

    def record(self) -> dict[str, Any]:
        """A JSON-able summary for logs and trackers."""
        return {"status": self.status.value, "ok": self.ok, "timed_out": self.timed_out, "error": self.error,
                "reason": self.reason, "sha256": self.sha256, "wall_seconds": round(self.wall_seconds, 3)}


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one sandbox call (one batch).

    Attributes:
        cpu_seconds: CPU time (RLIMIT_CPU; SIGXCPU ends the child).
        wall_seconds: wall-clock time, enforced by the parent (kills the process group).
        memory_mb: address space (RLIMIT_AS).
        max_output_bytes: size of the JSON answer.
        max_params: parameters one ``space(trial)`` may suggest; one more stops the child at
            once (a ``space`` that never stops suggesting fails here, not at the time limit).
    """

    cpu_seconds: int = 20
    wall_seconds: float = 60.0
    memory_mb: int = 512
    max_output_bytes: int = 16_000_000
    max_params: int = 256

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "wall_seconds", "memory_mb", "max_output_bytes", "max_params"):
            if not getattr(self, name) > 0:
                raise ValueError(f"SandboxLimits.{name} must be positive, got {getattr(self, name)!r}")

    def for_child(self) -> dict[str, int]:
        return {"cpu_seconds": max(1, int(self.cpu_seconds)), "memory_bytes": self.memory_mb * 2**20,
                "max_output_bytes": self.max_output_bytes}


@dataclass(frozen=True)
class ChildOutput:
    """What came back from one child: its status, a one-line reason, the parsed answer (OK only)."""

    status: Status
    reason: str
    answer: dict[str, Any] | None
    wall_seconds: float


def one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run_child(job: dict[str, Any], limits: SandboxLimits, answer: Callable[[dict[str, Any]], Any] | None = None,
              ) -> ChildOutput:
    """Run ``job`` (see ``child.py``) and classify how it ended; never raises for the
    child's behaviour (only ``TypeError`` for a job that is not JSON, a caller mistake).

    ``answer`` serves a ``space`` job's questions (``{"ask": spec}`` lines) with a value; if it
    raises ``ValueError``/``TypeError``/``KeyError``/``ArithmeticError`` (what Optuna raises for a
    distribution it cannot hold), or the child asks more than ``limits.max_params`` questions or
    something that is not a question, the child is stopped and the run is ``INVALID``.
    """
    payload = json.dumps({**job, "limits": limits.for_child()}).encode() + b"\n"
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="akv-sandbox-") as tmp, tempfile.TemporaryFile() as stdin:
        if answer is None:
            stdin.write(payload)
            stdin.seek(0)
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", str(CHILD)], stdin=stdin if answer is None else subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={}, cwd=tmp, start_new_session=True, close_fds=True)
        dialog = _Dialog(proc, payload, answer, limits.max_params) if answer is not None else None
        out, err, ended = _collect(proc, start + limits.wall_seconds, limits.max_output_bytes + 4096, dialog)
        wall = time.monotonic() - start
    if dialog is not None and dialog.failure:
        return ChildOutput(Status.INVALID, one_line(dialog.failure), None, wall)
    return _classify(proc.returncode, out, err, ended, limits, wall)


def _classify(rc: int, out: bytes, err: bytes, ended: str, limits: SandboxLimits, wall: float) -> ChildOutput:
    if ended == "wall":
        return ChildOutput(Status.TIMEOUT, f"wall-clock limit of {limits.wall_seconds:g} s exceeded", None, wall)
    if ended == "output":
        return ChildOutput(Status.OUTPUT_LIMIT, f"the answer exceeds {limits.max_output_bytes} bytes", None, wall)
    if rc < 0:
        sig = -rc
        if sig == signal.SIGXCPU:
            return ChildOutput(Status.TIMEOUT, f"CPU time limit of {limits.for_child()['cpu_seconds']} s exceeded",
                               None, wall)
        if sig == signal.SIGXFSZ:
            return ChildOutput(Status.CRASHED, "the program tried to write a file", None, wall)
        name = signal.Signals(sig).name if sig in signal.valid_signals() else str(sig)
        return ChildOutput(Status.CRASHED, f"the sandbox process was killed by {name}", None, wall)
    tail = one_line(err.decode(errors="replace").strip().splitlines()[-1]) if err.strip() else "no message"
    if rc != 0:
        if b"MemoryError" in err:
            return ChildOutput(Status.MEMORY, f"memory limit of {limits.memory_mb} MB exceeded", None, wall)
        return ChildOutput(Status.CRASHED, f"the sandbox process exited with code {rc}: {tail}", None, wall)
    try:
        answer = json.loads(out)
    except (ValueError, RecursionError):
        return ChildOutput(Status.CRASHED, f"the sandbox process gave no readable answer: {tail}", None, wall)
    status = {s.value: s for s in Status}.get(str(answer.get("status"))) if isinstance(answer, dict) else None
    if status is None or not isinstance(answer, dict):
        return ChildOutput(Status.CRASHED, "the sandbox process gave a malformed answer", None, wall)
    why = answer.get("reason")
    why = why if isinstance(why, str) else status.value  # only JSON crosses: never format a child's object
    if status is Status.MEMORY:
        return ChildOutput(status, one_line(f"memory limit of {limits.memory_mb} MB exceeded: {why}"), None, wall)
    if status is not Status.OK:
        return ChildOutput(status, one_line(why), None, wall)
    return ChildOutput(Status.OK, "ok", answer, wall)


def _send(proc: subprocess.Popen[bytes], data: bytes) -> None:
    """Write ``data`` to the child; a child that is gone is not an error here (how it ended is
    read from its exit status)."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        proc.stdin.flush()
    except (BrokenPipeError, OSError):
        pass


class _Dialog:
    """The parent's side of a ``space`` job: sends the job, answers ``{"ask": ...}`` lines (at most
    ``max_params`` of them). The child ends its final answer without a newline, so every complete
    line is a question; one that is not readable as a question stops the child."""

    def __init__(self, proc: subprocess.Popen[bytes], payload: bytes, answer: Callable[[dict[str, Any]], Any],
                 max_params: int) -> None:
        self.proc, self.answer, self.max_params = proc, answer, max_params
        self.failure = ""
        self.asked = 0
        _send(self.proc, payload)

    def serve(self, out: bytearray) -> bool:
        """Answer every complete question line at the start of ``out`` (removing it); False to stop."""
        while b"\n" in out:
            line = bytes(out).partition(b"\n")[0]
            del out[: len(line) + 1]
            try:
                msg = json.loads(line)
            except (ValueError, RecursionError):
                msg = None
            ask = msg.get("ask") if isinstance(msg, dict) else None
            if not isinstance(ask, dict):
                self.failure = "space(trial): the sandbox sent a line that is not a question"
                return False
            name = ask["name"][:60] if isinstance(ask.get("name"), str) else "?"
            self.asked += 1
            if self.asked > self.max_params:
                self.failure = (f"space(trial): more than {self.max_params} parameters suggested (at {name!r}); "
                                "a space must stop suggesting")
                return False
            try:
                value = self.answer(ask)
            except (ValueError, TypeError, KeyError, ArithmeticError) as err:
                self.failure = f"space(trial): {name!r}: {type(err).__name__}: {err}"
                return False
            _send(self.proc, json.dumps({"value": value}).encode() + b"\n")
        return True


def _collect(proc: subprocess.Popen[bytes], deadline: float, cap: int, dialog: _Dialog | None = None,
             ) -> tuple[bytes, bytes, str]:
    """Read stdout (up to ``cap`` bytes) and stderr (its tail) until both close, the deadline
    passes, stdout overflows or the dialog stops; kill the process group unless it exited. Returns
    (stdout, stderr, how it ended: ``"exit"``, ``"wall"``, ``"output"`` or ``"stopped"``)."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    ended = "exit"
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                ended = "wall"
                break
            for key, _ in sel.select(timeout=min(left, 0.5)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf: bytearray = key.data
                buf += chunk
                if buf is err and len(err) > _STDERR_CAP:
                    del err[: len(err) - _STDERR_CAP]
            if len(out) > cap:
                ended = "output"
                break
            if dialog is not None and not dialog.serve(out):
                ended = "stopped"
                break
    if ended != "exit":
        _kill(proc)
    try:
        proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill(proc)
        proc.wait()
        ended = "wall"
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    return bytes(out), bytes(err), ended


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


class SandboxSession:
    """A long-lived sandbox child in a serving mode: one JSON request per line, one answer per line.

    The child is confined exactly as in :func:`run_child`: ``limits.cpu_seconds`` bounds its whole
    life and ``wall_seconds`` bounds each answer, and the start. ``call_cpu_seconds`` also bounds
    the CPU time of each answer (read from ``/proc`` while waiting; where there is no ``/proc``,
    the wall-clock limit bounds it). After the first failure (timeout, crash, oversized answer,
    an error unless ``ask(keep_on_error=True)``) the session is dead: every later :meth:`ask`
    returns that failure. Always :meth:`close` it (it is also a context manager); closing kills the
    process group.

    Raises:
        TypeError: ``job`` is not JSON (a caller mistake).
    """

    def __init__(self, job: dict[str, Any], limits: SandboxLimits, call_cpu_seconds: float | None = None) -> None:
        self.limits = limits
        self.call_cpu_seconds = call_cpu_seconds
        self.failure: ChildOutput | None = None
        self.calls = 0
        self.held: set[str] = set()
        """Keys of what the caller handed this process to keep between calls (the caller's own
        account, see :meth:`SessionPool.ask_all`; a new process holds nothing)."""
        self._sent: tuple[float, float | None] = (time.monotonic(), None)  # the last request: wall clock, CPU
        self._tmp = tempfile.TemporaryDirectory(prefix="akv-sandbox-")
        payload = json.dumps({"mode": "serve", **job, "limits": limits.for_child()}).encode() + b"\n"
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", str(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env={}, cwd=self._tmp.name, start_new_session=True, close_fds=True)
        self._out, self._err = bytearray(), bytearray()
        self._sel = selectors.DefaultSelector()
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._sel.register(self.proc.stdout, selectors.EVENT_READ, self._out)
        self._sel.register(self.proc.stderr, selectors.EVENT_READ, self._err)
        _send(self.proc, payload)
        first = self._answer()
        if first.status is Status.OK and not (first.answer or {}).get("ready"):
            first = ChildOutput(Status.CRASHED, "the sandbox process did not get ready", None, first.wall_seconds)
        if first.status is not Status.OK:
            self.fail(first)

    @property
    def alive(self) -> bool:
        return self.failure is None and self.proc.poll() is None

    def __enter__(self) -> SandboxSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def ask(self, message: dict[str, Any], answer: Callable[[dict[str, Any]], Any] | None = None, *,
            keep_on_error: bool = False, partial: Callable[[bytes], None] | None = None) -> ChildOutput:
        """Send one request line and wait for its answer (status OK: ``answer`` is the parsed line).

        ``answer`` serves the child's ``{"ask": spec}`` lines before its answer, as in
        :func:`run_child` (at most ``limits.max_params``; a failure to answer is ``INVALID``).
        ``partial`` is given each ``{"partial": ...}`` line (unparsed) as it arrives, while the child
        goes on: a streamed part of the answer. With ``keep_on_error`` an ``ERROR`` answer (the
        program raised; the child caught it and is intact) leaves the session alive; every other
        failure ends it.
        """
        self.send(message)
        return self.receive(answer, keep_on_error=keep_on_error, partial=partial)

    def send(self, message: dict[str, Any]) -> None:
        """Send one request line; :meth:`receive` waits for its answer. Other sessions may be sent
        to in between: their children then work at the same time. Limits count from here."""
        if self.failure is not None:
            return
        self.calls += 1
        _send(self.proc, json.dumps(message).encode() + b"\n")
        self._sent = (time.monotonic(), _cpu_seconds(self.proc.pid))

    def receive(self, answer: Callable[[dict[str, Any]], Any] | None = None, *, keep_on_error: bool = False,
                partial: Callable[[bytes], None] | None = None) -> ChildOutput:
        """The answer to the request :meth:`send` sent (see :meth:`ask`)."""
        steps = self.steps(answer, keep_on_error=keep_on_error, partials=partial is not None)
        for step in steps:
            if isinstance(step, ChildOutput):
                return step
            assert partial is not None
            partial(step)
        raise AssertionError("steps() ends with the answer")

    def steps(self, answer: Callable[[dict[str, Any]], Any] | None = None, *, keep_on_error: bool = False,
              partials: bool = True) -> Iterator[bytes | ChildOutput]:
        """:meth:`receive` one step at a time: each streamed part (a ``{"partial": ...}`` line, with
        ``partials``) as it arrives, then the answer, a :class:`ChildOutput`. Several sessions can
        be read in turns this way, each step waiting for its own child only."""
        if self.failure is not None:
            yield self.failure
            return
        start, cpu0 = self._sent
        dialog = _Dialog(self.proc, b"", answer, self.limits.max_params) if answer is not None else None
        while True:
            out = self._answer(start, cpu0, questions=dialog is not None, partials=partials)
            if out.reason == "partial" and out.answer is not None and partials:
                yield out.answer["line"]
                continue
            if dialog is None or out.reason != "ask" or out.answer is None:
                break
            if not dialog.serve(bytearray(out.answer["line"] + b"\n")):
                out = ChildOutput(Status.INVALID, one_line(dialog.failure), None, time.monotonic() - start)
                break
        if out.status is Status.OK and self._over_cpu(cpu0):  # it answered, but past its CPU time
            out = ChildOutput(Status.TIMEOUT, f"CPU time limit of {self.call_cpu_seconds:g} s exceeded", None,
                              time.monotonic() - start)
        if out.status is not Status.OK and not (keep_on_error and out.status is Status.ERROR):
            self.fail(out)
        yield out

    def _over_cpu(self, cpu0: float | None) -> bool:
        """Whether the call begun with ``cpu0`` CPU seconds used has used more than its share (while
        its answer waited to be read, say)."""
        if self.call_cpu_seconds is None or cpu0 is None:
            return False
        used = _cpu_seconds(self.proc.pid)
        return used is not None and used - cpu0 > self.call_cpu_seconds

    def close(self) -> None:
        if self.proc.poll() is None:
            _send(self.proc, b'{"stop": true}\n')
            try:
                self.proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                _kill(self.proc)
                self.proc.wait()
        self._sel.close()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        self._tmp.cleanup()

    def fail(self, out: ChildOutput) -> None:
        """End this session with ``out`` as its ``failure``, killing its child if it still runs."""
        self.failure = out
        if self.proc.poll() is None:
            _kill(self.proc)
            self.proc.wait()

    def _answer(self, start: float | None = None, cpu0: float | None = None, questions: bool = False,
                partials: bool = False) -> ChildOutput:
        """The next answer line (or how the child ended), within the limits of the call begun at
        ``start`` (the wall clock) with ``cpu0`` CPU seconds used. With ``questions``, a question
        line comes back unparsed as ``OK`` with reason ``"ask"`` and ``answer={"line": ...}``; with
        ``partials``, a streamed part likewise with reason ``"partial"``."""
        start = time.monotonic() if start is None else start
        deadline = start + self.limits.wall_seconds
        cap = self.limits.max_output_bytes + 4096
        while b"\n" not in self._out:
            if not self._sel.get_map() or self.proc.stdout is None or self.proc.stdout.closed:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                _kill(self.proc)
                return ChildOutput(Status.TIMEOUT, f"wall-clock limit of {self.limits.wall_seconds:g} s exceeded",
                                   None, time.monotonic() - start)
            eof = False
            for key, _ in self._sel.select(timeout=min(left, 0.5)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    self._sel.unregister(key.fileobj)
                    eof = eof or key.data is self._out
                    continue
                key.data.extend(chunk)
                if key.data is self._err and len(self._err) > _STDERR_CAP:
                    del self._err[: len(self._err) - _STDERR_CAP]
            if self.call_cpu_seconds is not None and cpu0 is not None and b"\n" not in self._out:
                used = _cpu_seconds(self.proc.pid)
                if used is not None and used - cpu0 > self.call_cpu_seconds:
                    _kill(self.proc)
                    return ChildOutput(Status.TIMEOUT, f"CPU time limit of {self.call_cpu_seconds:g} s exceeded",
                                       None, time.monotonic() - start)
            if len(self._out) > cap:
                return ChildOutput(Status.OUTPUT_LIMIT, f"the answer exceeds {self.limits.max_output_bytes} bytes",
                                   None, time.monotonic() - start)
            if eof:
                break
        wall = time.monotonic() - start
        if b"\n" in self._out:
            line, _, rest = bytes(self._out).partition(b"\n")
            self._out[:] = rest
            if questions and line.startswith(b'{"ask"'):
                return ChildOutput(Status.OK, "ask", {"line": line}, wall)
            if partials and line.startswith(b'{"partial"'):
                return ChildOutput(Status.OK, "partial", {"line": line}, wall)
            return _classify(0, line, b"", "exit", self.limits, wall)
        try:
            rc = self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill(self.proc)
            rc = self.proc.wait()
        out = bytes(self._out)
        self._out.clear()
        if rc == 0 and not out:
            return ChildOutput(Status.CRASHED, "the sandbox process exited without an answer", None, wall)
        return _classify(rc, out, bytes(self._err), "exit", self.limits, wall)


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") and "SC_CLK_TCK" in os.sysconf_names else 100


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (from ``/proc``), or None where unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime and stime: fields 14 and 15 of stat(5)


Message = dict[str, Any] | Callable[[SandboxSession], dict[str, Any]]
"""A request line for :meth:`SessionPool.ask_all`, or a function of the session it goes to that makes it."""


class SessionPool:
    """Live :class:`SandboxSession` objects by key, at most ``size`` of them (least recently used
    closed first), each replaced after ``max_calls`` calls or its first failure. Closed at exit.

    Starting a sandbox process costs about 30 ms (an interpreter and the sandbox's modules), more
    than a policy program's decisions on a few tasks; a search asks the same program for thousands
    of trials, so its process is kept.
    """

    def __init__(self, size: int = 4, max_calls: int = 256) -> None:
        self.size, self.max_calls = size, max_calls
        self._sessions: dict[Any, SandboxSession] = {}
        self._lock = threading.Lock()
        atexit.register(self.close)
        if hasattr(os, "register_at_fork"):  # a forked child must not talk to its parent's sandboxes
            os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._sessions, self._lock = {}, threading.Lock()

    def program_starter(self, source: str, limits: SandboxLimits) -> Callable[[], SandboxSession]:
        """How to start a kept process for program ``source`` (``program`` mode: it answers ``space``
        and ``decide`` calls, each within ``limits``; the process's own CPU bound covers the
        :attr:`max_calls` calls it may serve)."""
        lifetime = SandboxLimits((limits.cpu_seconds + 1) * (self.max_calls + 1), limits.wall_seconds,
                                 limits.memory_mb, limits.max_output_bytes, limits.max_params)

        def start() -> SandboxSession:
            return SandboxSession({"mode": "program", "source": source}, lifetime, call_cpu_seconds=limits.cpu_seconds)

        return start

    def ask(self, key: Any, start: Callable[[], SandboxSession], message: dict[str, Any],
            answer: Callable[[dict[str, Any]], Any] | None = None,
            partial: Callable[[bytes], None] | None = None) -> ChildOutput:
        """``message`` to the session of ``key`` (started by ``start()`` when there is none alive);
        a program's error leaves the session alive."""
        with self._lock:
            session = self._take(key, start)
            if session.failure is not None:
                return session.failure
            return session.ask(message, answer, keep_on_error=True, partial=partial)

    def ask_all(self, calls: Sequence[tuple[Any, Callable[[], SandboxSession], Message,
                                            Callable[[bytes], None] | None]]) -> list[ChildOutput]:
        """Several ``(key, start, message, partial)`` calls at once, each to the session of its own
        key: every message is sent (the children work at the same time), then their streamed parts
        are read in turns, one part of each call in the order of ``calls``, round and round, as
        long as a call has parts left. As :meth:`ask` otherwise.

        A ``message`` may be a function of the session it goes to, called just before it is sent:
        one that hands the process data to keep between calls records their keys in the session's
        ``held`` (what a later message may then name instead of sending again). A session that
        fails is replaced by a new process with an empty ``held``, so the account stays true."""
        if len({key for key, *_ in calls}) != len(calls) or len(calls) > self.size:
            raise ValueError(f"ask_all needs distinct keys, at most {self.size}")
        with self._lock:
            sessions = [self._take(key, start) for key, start, _, _ in calls]
            outs: list[ChildOutput | None] = [None] * len(calls)
            try:
                for session, (_, _, message, _) in zip(sessions, calls):
                    session.send(message(session) if callable(message) else message)
                steps = [session.steps(keep_on_error=True, partials=partial is not None) for session, (*_, partial)
                         in zip(sessions, calls)]
                while any(o is None for o in outs):
                    for i, (step, (*_, partial)) in enumerate(zip(steps, calls)):
                        if outs[i] is not None:
                            continue
                        got = next(step)
                        if isinstance(got, ChildOutput):
                            outs[i] = got
                        elif partial is not None:
                            partial(got)
            except BaseException:
                # a child's answer left half read would be read by its next call, and a message that
                # failed to be made or sent would leave ``held`` counting what the child never got
                for session, out in zip(sessions, outs):
                    if out is None:
                        session.fail(ChildOutput(Status.CRASHED, "the call was interrupted", None, 0.0))
                raise
            return [o for o in outs if o is not None]

    def _take(self, key: Any, start: Callable[[], SandboxSession]) -> SandboxSession:
        """The live session of ``key`` (a new one when there is none, or a failed one that is not
        kept: its ``failure`` says why), made the most recently used. Holds the lock."""
        session = self._sessions.pop(key, None)
        if session is not None and (not session.alive or session.calls >= self.max_calls):
            session.close()
            session = None
        if session is None:
            session = start()
            if session.failure is not None:
                session.close()
                return session
        self._sessions[key] = session
        while len(self._sessions) > self.size:
            self._sessions.pop(next(iter(self._sessions))).close()
        return session

    def close(self) -> None:
        with self._lock:
            while self._sessions:
                self._sessions.popitem()[1].close()
