"""Launch, watch and stop one engine server process (``akv serve``, SGLang, AKV's SGLang).

:class:`ServerProcess` is plain Python (tested without Ray); ``rsi.cache.executors.remote`` runs it
inside each Ray replica actor, on the actor's GPU. Lifecycle::

    NEW --start()--> STARTING --/health 200--> HEALTHY --process exits--> CRASHED
                        |  (timeout or exit: LaunchError, process killed)      |
                        v                                   ensure_running() / watchdog: restart
    STOPPED <--stop(): SIGTERM to the process group, SIGKILL after grace_s--- any state

- The command comes from a :class:`rsi.cache.command.CommandTemplate` (``{port}``, ``{gpu}``,
  ``{model}``, ``{host}``, ``{python}``); ``CUDA_VISIBLE_DEVICES`` is set to the replica's GPU.
- stdout and stderr are appended to ``log_path`` (one header line per start), never to a pipe
  that could fill up.
- The server runs in its own process group, so stop() also ends its children (SGLang starts
  scheduler and detokenizer processes). On Linux the server also gets SIGTERM when the process
  that started it dies (``PR_SET_PDEATHSIG``), so a SIGKILLed Ray actor leaves no server behind.
- A restart keeps the port, so clients keep their URL.

Not for: choosing GPUs (Ray does), or talking to the server (``engine.remote.RemoteEngine``).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.errors import AKVError
from rsi.cache.command import CommandTemplate

log = logging.getLogger("akv.launcher")

# Runs between fork and the server (a fresh single-threaded interpreter, so prctl is safe here):
# ask for SIGTERM when the launching process dies, then become the server.
_SHIM = ("import ctypes, os, signal, sys\n"
         "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)\n"
         "if os.getppid() != int(sys.argv[1]): os._exit(70)\n"
         "os.execvp(sys.argv[2], sys.argv[2:])\n")


class LaunchError(AKVError):
    """A server that would not start, become healthy, or stay up."""

    status = 503


class ServerState(enum.Enum):
    NEW = "new"
    STARTING = "starting"
    HEALTHY = "healthy"
    CRASHED = "crashed"
    STOPPED = "stopped"


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS chooses it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """One server process for one replica (see the module docstring).

    Args:
        command: the command template.
        model: value of ``{model}``.
        gpu: GPU id(s) for ``{gpu}`` and ``CUDA_VISIBLE_DEVICES`` (``None``: leave the variable alone).
        log_path: file that receives the server's output.
        port: 0 chooses a free port once (kept across restarts).
        host: value of ``{host}`` and the address health checks use.
        health_timeout_s: how long one start may take to answer ``GET /health`` with 200.
        grace_s: seconds between SIGTERM and SIGKILL when stopping.
        max_restarts: restarts after crashes before :meth:`ensure_running` gives up.
        env: extra environment variables for the server.
        watch: run a watchdog thread that restarts the server as soon as it exits.
    """

    def __init__(self, command: str | CommandTemplate, *, model: str, log_path: str | Path, gpu: str | None = None,
                 port: int = 0, host: str = "127.0.0.1", health_timeout_s: float = 600.0, grace_s: float = 10.0,
                 max_restarts: int = 10, env: Mapping[str, str] | None = None, watch: bool = False,
                 poll_s: float = 0.5):
        self.template = command if isinstance(command, CommandTemplate) else CommandTemplate(command)
        self.model, self.gpu, self.host = model, gpu, host
        self.port = port or free_port(host)
        self.log_path = Path(log_path)
        self.health_timeout_s, self.grace_s, self.max_restarts = health_timeout_s, grace_s, max_restarts
        self.env = dict(env or {})
        self.argv = self.template.argv({"port": self.port, "model": model, "gpu": gpu or "", "host": host,
                                        "python": sys.executable})
        self.state = ServerState.NEW
        self.restarts = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._poll_s = poll_s
        self._watcher = threading.Thread(target=self._watch, name="akv-server-watch", daemon=True) if watch else None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def command_line(self) -> str:
        return " ".join(self.argv)

    def alive(self) -> bool:
        """Whether the server process runs. A killed multi-threaded process stays a zombie until its
        last thread exits (and holds its port until then): that counts as exited, once reaped."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        if _zombie(self.proc.pid):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
            return self.proc.poll() is None
        return True

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ lifecycle

    def start(self, wait: bool = True) -> None:
        """Spawn the server and (``wait``) wait until ``GET /health`` answers 200.

        ``wait=False`` returns at once (do other start-up work meanwhile), then call :meth:`wait`.

        Raises:
            LaunchError: the process exited, or stayed unhealthy past ``health_timeout_s`` (it is
                then killed); the message names the command and the log file.
        """
        with self._lock:
            if self.alive():
                if wait and self.state is ServerState.STARTING:
                    self.wait()
                return
            self._spawn()
        if wait:
            self.wait()

    def wait(self) -> None:
        """Wait for a spawned server to become healthy (see :meth:`start`), then start the watchdog."""
        with self._lock:
            if self.state is not ServerState.HEALTHY:
                self._wait_healthy()
            if self._watcher is not None and not self._watcher.is_alive():
                self._watcher.start()

    def ensure_running(self) -> bool:
        """Restart the server if its process has exited; returns whether it restarted.

        Raises:
            LaunchError: the restart failed, or the server crashed more than ``max_restarts`` times.
        """
        with self._lock:
            if self._stop.is_set() or self.alive():
                return False
            self._restart(f"exited with code {self.proc.returncode if self.proc else None}")
            return True

    def recover(self) -> bool:
        """After a failed request: restart if the process exited or ``/health`` fails; returns whether it did."""
        with self._lock:
            if self.ensure_running():
                return True
            if self._healthy(timeout=10.0):
                return False
            self._kill()
            self._restart("stopped answering /health")
            return True

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL it after ``grace_s``; idempotent and final
        (no restart after it; make a new ``ServerProcess``)."""
        self._stop.set()
        with self._lock:
            self._kill()
            self.state = ServerState.STOPPED
        if self._watcher is not None and self._watcher.is_alive() and threading.current_thread() is not self._watcher:
            self._watcher.join(timeout=5)

    # ------------------------------------------------------------------ internals

    def _restart(self, why: str) -> None:
        self.state = ServerState.CRASHED
        if self.restarts >= self.max_restarts:
            raise LaunchError(f"server `{self.command_line}` {why} and was already restarted {self.restarts} times "
                              f"(max_restarts); log: {self.log_path}", field="executor.server_command",
                              value=self.restarts)
        self.restarts += 1
        log.warning("server on port %d %s; restart %d (log %s)", self.port, why, self.restarts, self.log_path)
        self._spawn()
        self._wait_healthy()

    def _spawn(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env}
        if self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.gpu
        argv = self.argv
        if sys.platform.startswith("linux"):
            argv = [sys.executable, "-c", _SHIM, str(os.getpid()), *argv]
        with open(self.log_path, "ab") as logf:
            logf.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} start (restart {self.restarts}): "
                       f"{self.command_line}\n".encode())
            logf.flush()
            try:
                self.proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=env, start_new_session=True)
            except OSError as err:
                self.state = ServerState.CRASHED
                raise LaunchError(f"cannot run `{self.command_line}`: {err}; log: {self.log_path}",
                                  field="executor.server_command", value=self.argv[0]) from err
        self.state = ServerState.STARTING

    def _healthy(self, timeout: float = 2.0) -> bool:
        import httpx

        try:
            return httpx.get(self.base_url + "/health", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False

    def _wait_healthy(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.health_timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                self.state = ServerState.CRASHED
                self._kill()
                raise LaunchError(f"server `{self.command_line}` exited with code {code} before becoming healthy; "
                                  f"log: {self.log_path}{self._tail()}", field="executor.server_command", value=code)
            if self._healthy():
                self.state = ServerState.HEALTHY
                return
            if time.monotonic() > deadline:
                self._kill()
                self.state = ServerState.CRASHED
                raise LaunchError(f"server `{self.command_line}` did not answer GET {self.base_url}/health with 200 "
                                  f"within {self.health_timeout_s:g}s; it was stopped; log: {self.log_path}"
                                  f"{self._tail()}", field="executor.server_health_timeout_s",
                                  value=self.health_timeout_s)
            time.sleep(0.25)

    def _kill(self) -> None:
        if self.proc is not None:
            stop_process_group(self.proc, self.grace_s)

    def _tail(self, lines: int = 8) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return "; last lines:\n" + "\n".join(text) if text else ""

    def _watch(self) -> None:
        while not self._stop.wait(self._poll_s):
            try:
                self.ensure_running()
            except LaunchError:
                log.exception("watchdog could not restart the server; it stops watching")
                return


def stop_process_group(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """Stop the process group ``proc`` leads (it was started with ``start_new_session=True``): SIGTERM,
    SIGKILL after ``grace_s``, then SIGKILL to whatever of the group outlived its leader."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)  # the group: the process and any children it started
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # children that outlived their parent
