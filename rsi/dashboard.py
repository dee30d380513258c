"""``akv dashboard``: the MLflow UI and optuna-dashboard of a run, on 127.0.0.1."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from engine.errors import AKVError
from rsi.cache.executors.launcher import stop_process_group


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dashboard_commands(run_dir: Path, mlflow_port: int, optuna_port: int) -> list[tuple[str, list[str], str]]:
    """(name, command, URL) of each dashboard this run has a store for."""
    out = []
    bin_dir = Path(sys.executable).parent
    if (run_dir / "mlflow.db").exists():
        port = mlflow_port or _free_port()
        out.append(("mlflow", [str(bin_dir / "mlflow"), "ui", "--backend-store-uri",
                               f"sqlite:///{(run_dir / 'mlflow.db').resolve()}", "--host", "127.0.0.1",
                               "--port", str(port)], f"http://127.0.0.1:{port}"))
    storage = None
    if (run_dir / "optuna.db").exists():
        storage = f"sqlite:///{(run_dir / 'optuna.db').resolve()}"
    elif (run_dir / "optuna.journal").exists():
        storage = str((run_dir / "optuna.journal").resolve())
    screens = run_dir / "optuna-proxy.journal"  # the cascade's proxy studies
    for name, store, port in (("optuna-dashboard", storage, optuna_port),
                              ("optuna-dashboard (proxy screens)",
                               str(screens.resolve()) if screens.exists() else None, 0)):
        if store:
            port = port or _free_port()
            out.append((name, [str(bin_dir / "optuna-dashboard"), store, "--host", "127.0.0.1", "--port", str(port)],
                        f"http://127.0.0.1:{port}"))
    return out


def run_dashboards(run_dir: Path, mlflow_port: int = 0, optuna_port: int = 0) -> int:
    """Serve the run's dashboards until Ctrl-C or SIGTERM (0), or until one of them exits (1, with its
    last error line). Each dashboard runs in its own process group, which is stopped whole (the MLflow
    UI starts workers of its own): nothing is left running when this returns.

    Raises:
        AKVError: a port outside [0, 65535] (0: a free one).
    """
    for flag, port in (("--mlflow-port", mlflow_port), ("--optuna-port", optuna_port)):
        if not 0 <= port <= 65535:
            raise AKVError(f"{flag} must be in [0, 65535] (0: a free port), got {port}", field=flag, value=port)
    cmds = dashboard_commands(run_dir, mlflow_port, optuna_port)
    if not cmds:
        print(f"{run_dir} has no MLflow or Optuna store yet")
        return 1
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(tempfile.TemporaryFile()) for _ in cmds]  # a pipe could fill and stall them
        procs: list[subprocess.Popen[bytes]] = []
        stack.callback(_stop_all, procs)
        previous = signal.signal(signal.SIGTERM, _interrupt)
        stack.callback(signal.signal, signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        for (_, cmd, _), log in zip(cmds, logs):
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True))
        for name, _, url in cmds:
            print(f"{name}: {url}", flush=True)
        try:
            while all(p.poll() is None for p in procs):
                time.sleep(0.5)
        except KeyboardInterrupt:
            return 0
        for (name, _, url), p, log in zip(cmds, procs, logs):
            if p.poll() is not None:
                log.seek(0)
                lines = [ln for ln in log.read().decode("utf-8", "replace").splitlines() if ln.strip()]
                last = lines[-1].strip() if lines else "no output"
                print(f"{name} ({url}) exited with status {p.returncode}: {last}", file=sys.stderr, flush=True)
        return 1


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        stop_process_group(p, grace_s=20.0)
