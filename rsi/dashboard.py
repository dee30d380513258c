"""``akv dashboard``: the MLflow UI and optuna-dashboard of a run, on 127.0.0.1."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path


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
    cmds = dashboard_commands(run_dir, mlflow_port, optuna_port)
    if not cmds:
        print(f"{run_dir} has no MLflow or Optuna store yet")
        return 1
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _, cmd, _ in cmds]
    for name, _, url in cmds:
        print(f"{name}: {url}", flush=True)
    try:
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=20)
    return 0
