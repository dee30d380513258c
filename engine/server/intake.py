"""The intake process: large chat and score bodies are screened outside the server's process.

Parsing a 3 MB JSON body holds the interpreter's lock for tens of milliseconds, and 100,000
messages for hundreds (the strict parser's hooks are Python). On a pool thread that is still the
lock the engine thread takes back between its kernels, so a client flooding the server with bodies
it must refuse slowed every other client's requests 2.3-2.4x (``bench.server_limits``).

A body of at least ``ServerLimits.intake_bytes`` is therefore first parsed and checked in one
child process, at a lower CPU priority (nice 10), against every refusal that needs no tokenizing:
strict JSON, the route's schema, sampling values or the candidate count, the schedule, the context
window by message count and by text length (``engine.server.prepare.check_early``). A refused body
is answered with the error the intake sends back and is never parsed in the server; an accepted one
is parsed again by the server, which needs its objects (a body that fits the window parses in
milliseconds), and checked again in full. So the intake changes which bodies the server parses,
never what it answers, except that for a large body the intake's refusal comes before the
route's own checks (an unknown ``model``, ``n``, unsupported fields).

The child starts on the first large body (or at :meth:`Intake.start`, which ``akv serve`` calls),
and is started again after a failure; while it cannot serve, bodies are parsed in the server as
before, and the failure is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import pickle
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel

from engine.errors import AKVError
from engine.layout import Renderer
from engine.server.body import parse_model
from engine.server.limits import ServerLimits
from engine.server.prepare import check_early
from engine.server.schemas import ChatRequest, ScoreRequest
from engine.window import ContextWindow

log = logging.getLogger("akv.intake")

NICE = 10
"""How much lower the intake's CPU priority is than the server's (``os.nice``)."""

SCREENED: dict[str, type[ChatRequest] | type[ScoreRequest]] = {"ChatRequest": ChatRequest, "ScoreRequest": ScoreRequest}
"""The request models the intake screens, by name (other bodies are small and parsed in the server)."""

_window: ContextWindow | None = None  # the child's own, built once by _start
_limits = ServerLimits()


ORPHAN_POLL_S = 1.0
"""How often the child checks that the server that started it is alive."""


def _exit_when_orphaned(parent: int) -> None:
    """End this process once ``parent`` is gone (a server killed with SIGKILL never shuts its pool
    down, and the child holds both ends of its own queue, so it would wait for work forever).
    The launcher uses ``PR_SET_PDEATHSIG`` for external servers; polling the parent id needs no
    ctypes, works off Linux, and does not hang on which thread spawned the child (the signal
    fires when that thread ends, and a pool spawns from whichever thread submits)."""
    while os.getppid() == parent:
        time.sleep(ORPHAN_POLL_S)
    os._exit(0)


def _start(max_context: int, tokenizer: Any, template: Any, limits: ServerLimits) -> None:
    """The child's initializer: follow the server's life, lower its priority, build its window."""
    global _window, _limits
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), name="akv-intake-orphan",
                     daemon=True).start()
    with contextlib.suppress(AttributeError, OSError):  # not on this platform: same priority, still off the lock
        os.nice(NICE)
    _window = ContextWindow(max_context, Renderer(tokenizer, template))
    _limits = limits


def _screen(raw: bytes, model: str) -> AKVError | RequestValidationError | None:
    """The first refusal of ``raw`` as a ``model`` body, or ``None`` (runs in the child)."""
    assert _window is not None, "the intake child was not started"
    try:
        req = parse_model(raw, SCREENED[model], _limits.max_json_depth)
        check_early(_window, req, _limits)
    except (AKVError, RequestValidationError) as err:
        return err
    return None


def _ready() -> tuple[int, int]:
    assert _window is not None, "the intake child was not started"
    return os.getpid(), os.nice(0) if hasattr(os, "nice") else 0


class Intake:
    """The server's intake child (one per app; see the module docstring).

    Attributes:
        screened: bodies the child checked; refused: of them, those it refused; failures: times
            the child could not answer (the server parsed those bodies itself).
    """

    def __init__(self, window: ContextWindow, limits: ServerLimits) -> None:
        self._spec = (window.max_context, window.renderer.tokenizer, window.renderer.template, limits)
        self._threshold = limits.intake_bytes
        self._pool: ProcessPoolExecutor | None = None
        self._started: Future[tuple[int, int]] | None = None  # the current child's first answer
        self._lock = threading.Lock()
        self.screened = 0
        self.refused = 0
        self.failures = 0

    @property
    def running(self) -> bool:
        """Whether a child is started (and not yet found broken or stopped)."""
        return self._pool is not None

    @property
    def state(self) -> str:
        """``off`` (no threshold), ``idle`` (no child yet: the next large body starts one),
        ``starting``, ``ready``, or ``failed`` (its start failed; the next large body starts another)."""
        started = self._started
        if self._threshold == 0:
            return "off"
        if self._pool is None or started is None:
            return "idle"
        if not started.done():
            return "starting"
        return "failed" if started.exception() is not None else "ready"

    def wants(self, raw: bytes, model: type[BaseModel]) -> bool:
        """Whether ``raw`` (a body for ``model``) goes through the intake."""
        return 0 < self._threshold <= len(raw) and model.__name__ in SCREENED and SCREENED[model.__name__] is model

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_start, initargs=self._spec)
                self._started = self._pool.submit(_ready)
            return self._pool

    def warm(self) -> tuple[int, int]:
        """Start the child now and wait for it (seconds: it imports the server and unpickles the
        tokenizer); its process id and niceness."""
        return self.start().result()

    def start(self) -> Future[tuple[int, int]]:
        """Start the child without waiting for it (``akv serve``: the server listens meanwhile, and
        a large body that comes before the child is up waits for it, as the first one would;
        :attr:`state` says when it is up)."""
        self._executor()
        started = self._started  # (the child's first answer, asked for when its pool was made)
        return started if started is not None else self._executor().submit(_ready)

    async def screen(self, raw: bytes, model: type[BaseModel]) -> None:
        """Raise the refusal the intake finds for ``raw``; return if it finds none or cannot answer.

        Raises:
            AKVError, RequestValidationError: the body's first refusal (the server answers it as
                if it had found it itself).
        """
        pool = self._executor()
        try:
            # submitting may start the child, which pickles the tokenizer: not on the event loop
            future = await asyncio.to_thread(pool.submit, _screen, raw, model.__name__)
            refusal = await asyncio.wrap_future(future)
        except (RuntimeError, OSError, pickle.PickleError, TypeError) as err:
            # a dead child (BrokenProcessPool), a pool shut down, a value that does not pickle: the
            # server parses the body itself; a broken child is replaced on the next large body
            self.failures += 1
            log.warning("intake: the child could not screen a %d-byte body (%s: %s); the server parses it",
                        len(raw), type(err).__name__, err)
            if isinstance(err, BrokenProcessPool):
                self._discard(pool)
            return
        self.screened += 1
        if refusal is not None:
            self.refused += 1
            raise refusal

    def _discard(self, pool: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool, self._started = None, None
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Stop the child (the app's lifespan calls this on shutdown)."""
        with self._lock:
            pool, self._pool, self._started = self._pool, None, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
