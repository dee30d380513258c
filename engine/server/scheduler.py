"""The scheduler: one worker thread owns the engine; the HTTP loop only enqueues and awaits.

Continuous batching: each loop iteration admits waiting requests (prefill runs on admission),
then advances every in-flight generation by one token in a single forward pass, then finishes
the ones that are done. The queue is bounded (a full queue is a :class:`CapacityError`, 503 with
Retry-After), every request has a deadline (checked while queued and between tokens), and a
client that goes away sets the job's cancel flag, which ends its generation and frees its locks.
Other work on the engine (save, load) runs on the same thread as a ``call`` job, so the engine
is never touched by two threads. When idle, the worker checks the tree's integrity.

With a survival manager (``engine.survival``), a chat job that names a session resumes it before
its prefill and, when its reply ends in a tool call or the request gave a ``tool_gap``, pauses it
afterwards; the worker revisits expired survival decisions every iteration. Survival errors are
logged and never fail a request.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.engine import Engine
from engine.errors import AKVError, CapacityError
from engine.request import Request
from engine.results import ChatResult, Generation

if TYPE_CHECKING:
    from engine.survival import SurvivalManager, ToolGap

log = logging.getLogger("akv.scheduler")


class TimeoutError_(AKVError):
    """A request ran past its deadline (HTTP 504)."""

    status = 504


@dataclass(eq=False)
class Job:
    """One unit of work for the worker, resolved on the event loop that submitted it.

    Attributes:
        chat: the chat request to start (chat jobs; ``PREPARED`` off the engine thread by
            ``engine.server.prepare``, the same object from the route to the decoder), or ``None``.
        call: a function of the engine to run on the worker (other jobs).
        deadline: ``time.monotonic()`` after which the job is abandoned.
        on_text: streaming callback, invoked on the worker thread.
        session, tool_gap: the tenant's session key and the tool gap its reply opens (survival).
    """

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    deadline: float
    chat: Request | None = None
    call: Callable[[Engine], Any] | None = None
    on_text: Callable[[str], None] | None = None
    session: str | None = None
    tool_gap: ToolGap | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    enqueued: float = field(default_factory=time.monotonic)

    def expired(self) -> bool:
        return time.monotonic() > self.deadline

    def resolve(self, result: Any = None, error: BaseException | None = None) -> None:
        def settle() -> None:
            if self.future.done():
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(result)

        self.loop.call_soon_threadsafe(settle)


class Scheduler:
    """Runs an engine on a worker thread.

    Args:
        engine: the engine (used only by the worker from now on).
        max_queue: waiting jobs beyond which submissions are refused.
        max_batch: most generations advanced together.
        timeout: default per-request deadline in seconds.
        survival: the survival manager over ``engine.tree`` (``None``: no pause tracking).
    """

    def __init__(self, engine: Engine, max_queue: int = 64, max_batch: int = 8, timeout: float = 600.0,
                 survival: SurvivalManager | None = None):
        for name, value, ok in (("max_queue", max_queue, isinstance(max_queue, int) and max_queue >= 1),
                                ("max_batch", max_batch, isinstance(max_batch, int) and max_batch >= 1),
                                ("timeout", timeout, isinstance(timeout, int | float) and 0 < timeout < float("inf"))):
            if isinstance(value, bool) or not ok:
                kind = "a positive number of seconds" if name == "timeout" else "an integer >= 1"
                raise AKVError(f"{name} must be {kind}, got {value!r}", field=name, value=value)
        self.engine = engine
        self.survival = survival
        self._service: dict[str, tuple[int, float]] = {}  # session -> (turns, service seconds)
        self.max_batch = max_batch
        self.timeout = timeout
        self.queue: queue.Queue[Job] = queue.Queue(maxsize=max_queue)
        self.active: list[tuple[Job, Generation]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="akv-engine", daemon=True)
        self.integrity_checks = 0
        self.last_error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    @property
    def depth(self) -> int:
        """Jobs waiting plus generations in flight."""
        return self.queue.qsize() + len(self.active)

    def submit(self, job: Job) -> None:
        """Enqueue ``job`` or raise :class:`CapacityError` when the queue is full."""
        try:
            self.queue.put_nowait(job)
        except queue.Full:
            raise CapacityError(f"the server is busy: {self.queue.maxsize} requests are already waiting; retry later",
                                field="queue", value=self.queue.maxsize) from None

    # ---------------------------------------------------------------- worker

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.survival is not None:
                    self._survival(lambda m: m.tick(time.monotonic()))
                self._admit()
                self._advance()
            except Exception:  # the worker must survive anything and fail its jobs instead
                log.exception("scheduler iteration failed")
                self._fail_all("internal error in the engine worker")

    def _admit(self) -> None:
        while len(self.active) < self.max_batch:
            try:
                job = self.queue.get(timeout=0.05) if not self.active else self.queue.get_nowait()
            except queue.Empty:
                if not self.active:
                    self._idle()
                return
            self._start(job)
            if self.active:
                return  # admit one prefill per iteration so running decodes keep flowing

    def _start(self, job: Job) -> None:
        if job.cancel.is_set():
            job.resolve(error=AKVError("the client went away", field="request", value=None))
            return
        if job.expired():
            job.resolve(error=TimeoutError_("the request waited past its deadline", field="timeout", value=None))
            return
        try:
            if job.call is not None:
                job.resolve(job.call(self.engine))
                return
            assert job.chat is not None
            if self.survival is not None and job.session is not None:
                session, waited = job.session, time.monotonic() - job.enqueued

                def resume(m: SurvivalManager) -> None:
                    m.resume(session, time.monotonic())
                    m.admitted(session, waited)

                self._survival(resume)
            gen = self.engine.start_request(job.chat, job.on_text, lambda: job.cancel.is_set() or job.expired())
        except AKVError as err:
            job.resolve(error=err)
            return
        except Exception as err:  # reported to the client as a server error
            log.exception("request failed")
            job.resolve(error=RuntimeError(f"internal error: {type(err).__name__}: {err}"))
            return
        self.active.append((job, gen))

    def _advance(self) -> None:
        if not self.active:
            return
        self.engine.step([g for _, g in self.active])
        still = []
        for job, gen in self.active:
            if gen.done:
                self._finish(job, gen)
            else:
                still.append((job, gen))
        self.active = still

    def _finish(self, job: Job, gen: Generation) -> None:
        result: ChatResult = self.engine.finish(gen)
        if self.survival is not None and job.session is not None and result.finish_reason != "cancelled":
            self._pause(job, gen, result)
        if result.finish_reason == "cancelled" and job.expired() and not job.cancel.is_set():
            job.resolve(error=TimeoutError_(f"the request ran past its deadline after {len(result.token_ids)} "
                                            "tokens", field="timeout", value=None))
        else:
            job.resolve(result)

    def _fail_all(self, message: str) -> None:
        for job, gen in self.active:
            try:
                if not gen.finished:
                    self.engine.finish(gen)
            except Exception:
                log.exception("could not finish a generation while failing")
            job.resolve(error=RuntimeError(message))
        self.active = []
        self.last_error = message

    def _survival(self, action: Callable[[SurvivalManager], Any]) -> None:
        assert self.survival is not None
        try:
            action(self.survival)
        except AKVError:
            log.exception("survival layer")

    def _pause(self, job: Job, gen: Generation, result: ChatResult) -> None:
        from engine.survival import ToolGap, TreeBackend, tool_call_name

        assert job.session is not None and self.survival is not None
        turns, service = self._service.get(job.session, (0, 0.0))
        self._service[job.session] = (turns + 1, service + result.timings.total_s)
        while len(self._service) > 10_000:
            self._service.pop(next(iter(self._service)))
        name = tool_call_name(result.text)
        gap = job.tool_gap or (ToolGap(name) if name is not None else None)
        backend = self.survival.backend
        if gap is None or not isinstance(backend, TreeBackend):
            return
        items = [*gen.items, *gen.tokens[:-1]]
        session = job.session
        self._survival(lambda m: m.pause(session, backend.handle_for(items), now=time.monotonic(), turn=turns,
                                         context_tokens=sum(1 for it in items if isinstance(it, int)), gap=gap,
                                         service_s=service + result.timings.total_s))

    def _idle(self) -> None:
        self.engine.check_integrity()
        self.integrity_checks += 1
