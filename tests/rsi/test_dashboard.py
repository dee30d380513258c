"""``akv dashboard``: a real optuna-dashboard that cannot start is reported, not waited on in silence."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from rsi.cli import main
from rsi.tuning import make_storage


def test_a_dashboard_that_exits_is_reported_with_its_error(tmp_path, capsys):
    optuna.create_study(study_name="m", storage=make_storage("sqlite", tmp_path))
    with socket.socket() as taken:  # the port is held: optuna-dashboard fails to bind and exits
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["dashboard", str(tmp_path), "--optuna-port", str(port)]) == 1
    out, err = capsys.readouterr()
    assert f"optuna-dashboard: http://127.0.0.1:{port}" in out
    assert f"optuna-dashboard (http://127.0.0.1:{port}) exited with status" in err
    last = err.split("exited with status 1: ")[1]  # the dashboard's own last error line, naming the address
    assert str(port) in last and "no output" not in last


def test_ports_outside_the_range_are_refused(tmp_path, capsys):
    optuna.create_study(study_name="m", storage=make_storage("sqlite", tmp_path))
    assert main(["dashboard", str(tmp_path), "--optuna-port", "70000"]) == 2
    assert "--optuna-port must be in [0, 65535] (0: a free port), got 70000" in capsys.readouterr().err


def _groups() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process, from /proc (Linux)."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        out[int(stat.parent.name)] = (int(fields[1]), int(fields[2]))
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc (Linux)")
def test_sigterm_stops_every_dashboard_process(tmp_path):
    """SIGTERM (a process manager, a closed session) stops the dashboards and every process they
    started; it used to kill `akv dashboard` alone and leave them running."""
    optuna.create_study(study_name="m", storage=make_storage("sqlite", tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "rsi.cli", "dashboard", str(tmp_path)], stdout=subprocess.PIPE,
                            text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().rsplit(":", 1)[1])
        deadline = time.monotonic() + 120
        while True:  # until the dashboard answers
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline and proc.poll() is None, "the dashboard never answered"
            time.sleep(0.5)
        groups = {g for pid, (ppid, g) in _groups().items() if ppid == proc.pid}
        assert groups and proc.pid not in groups  # the dashboards run in their own groups
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert not [pid for pid, (_, g) in _groups().items() if g in groups]  # nothing of theirs is left
    finally:
        if proc.poll() is None:
            proc.kill()
