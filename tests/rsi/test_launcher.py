"""The server launcher: command templates, health waits, crashes and restarts, clean stops, no orphans.

The real-server test launches ``akv serve --model tiny-random`` as the external process (what a
Ray replica does with SGLang on a GPU). The others use a stand-in server that starts in well under
a second: ``python -m http.server`` serving a directory that holds a file named ``health``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import httpx
import pytest

from engine.errors import AKVError
from rsi.cache.command import CommandError, CommandTemplate
from rsi.cache.executors.launcher import LaunchError, ServerProcess, ServerState
from tests.engine.agent import trajectory
from tests.procs import gone

# (--intake-bytes 0: these launch, crash and restart servers; the intake has its own tests and a child per start)
AKV_SERVE = ("{python} -m rsi.cli serve --model {model} --port {port} --host {host} --template plain --threads 1 "
             "--intake-bytes 0")


@pytest.fixture
def stand_in(tmp_path):
    """A command template for a server that is healthy as soon as it listens."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "health").write_text("ok")
    return f"{{python}} -m http.server {{port}} --bind {{host}} --directory {root}"


@pytest.mark.parametrize(("text", "message"), [
    ("akv serve --model {model}", "must contain {port}"),
    ("akv serve --port {prot}", "unknown placeholder {prot}"),
    ("akv serve --port {port} --gpu {}", "unknown placeholder {}"),
    ("akv serve --port {port!r}", "no format spec or conversion"),
    ("akv serve --port {port:05d}", "no format spec or conversion"),
    ("akv serve --port {port", "bad braces"),
    ("akv serve --name 'unbalanced --port {port}", "cannot split"),
    ("   ", "non-empty"),
])
def test_bad_templates_are_refused_with_the_valid_names(text, message):
    with pytest.raises(CommandError, match=message.replace("{", r"\{").replace("}", r"\}")) as err:
        CommandTemplate(text)
    assert err.value.field == "executor.server_command"
    if "unknown" in message:
        assert "{port}, {model}, {gpu}, {host}, {python}" in str(err.value)


def test_template_words_are_formatted_one_argument_each():
    t = CommandTemplate("serve --model {model} --port={port} --json '{{\"gpu\": \"{gpu}\"}}'")
    argv = t.argv({"model": "/models/a b", "port": 31, "gpu": "2,3"})
    assert argv == ["serve", "--model", "/models/a b", "--port=31", '--json', '{"gpu": "2,3"}']
    with pytest.raises(CommandError, match=r"no value for placeholder \{gpu\}"):
        t.argv({"model": "m", "port": 1})


def test_a_server_that_never_becomes_healthy_times_out_naming_command_and_log(tmp_path):
    log = tmp_path / "logs" / "never.log"
    cmd = '{python} -c "import time; print(\'loading forever\', flush=True); time.sleep(600)" --port {port}'
    server = ServerProcess(cmd, model="m", log_path=log, health_timeout_s=1.5, grace_s=2)
    t0 = time.monotonic()
    with pytest.raises(LaunchError) as err:
        server.start()
    assert time.monotonic() - t0 < 15
    text = str(err.value)
    assert "did not answer GET" in text and "within 1.5s" in text and str(log) in text and "time.sleep(600)" in text
    assert "loading forever" in text  # the log's last lines
    assert server.state is ServerState.CRASHED and server.pid is not None and gone(server.pid)


def test_a_server_that_exits_at_once_is_reported_with_its_log(tmp_path):
    cmd = '{python} -c "import sys; print(\'no GPU found\'); sys.exit(3)" {port}'
    server = ServerProcess(cmd, model="m", log_path=tmp_path / "exit.log", health_timeout_s=30)
    with pytest.raises(LaunchError, match="exited with code 3 before becoming healthy") as err:
        server.start()
    assert "no GPU found" in str(err.value) and str(tmp_path / "exit.log") in str(err.value)
    missing = ServerProcess("/no/such/server --port {port}", model="m", log_path=tmp_path / "missing.log",
                            health_timeout_s=30)
    with pytest.raises(LaunchError, match="/no/such/server"):
        missing.start()


def test_watchdog_restarts_a_killed_server_on_the_same_port(stand_in, tmp_path):
    server = ServerProcess(stand_in, model="m", log_path=tmp_path / "w.log", gpu="", watch=True, poll_s=0.1,
                           health_timeout_s=30, grace_s=2)
    with server:
        url, first = server.base_url, server.pid
        assert httpx.get(url + "/health").status_code == 200
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while server.restarts < 1 or server.state is not ServerState.HEALTHY:
            assert time.monotonic() < deadline, "the watchdog did not restart the server"
            time.sleep(0.1)
        assert server.pid != first and server.base_url == url
        assert httpx.get(url + "/health").status_code == 200
        assert (tmp_path / "w.log").read_text().count("=== ") == 2  # one header per start
    assert server.state is ServerState.STOPPED and gone(server.pid)


def test_max_restarts_bounds_a_crash_loop(stand_in, tmp_path):
    server = ServerProcess(stand_in, model="m", log_path=tmp_path / "loop.log", max_restarts=1, health_timeout_s=30)
    server.start()
    try:
        os.kill(server.pid, signal.SIGKILL)
        gone(server.pid)
        assert server.ensure_running() and server.restarts == 1
        os.kill(server.pid, signal.SIGKILL)
        gone(server.pid)
        with pytest.raises(LaunchError, match="already restarted 1 times"):
            server.ensure_running()
    finally:
        server.stop()


def test_a_dead_launcher_leaves_no_server_behind(stand_in, tmp_path):
    """SIGKILL the process that launched a server (a Ray actor, say): the server gets SIGTERM too."""
    script = textwrap.dedent(f"""
        import sys, time
        from rsi.cache.executors.launcher import ServerProcess
        s = ServerProcess({stand_in!r}, model="m", log_path={str(tmp_path / 'orphan.log')!r}, health_timeout_s=30)
        s.start()
        print(s.pid, flush=True)
        time.sleep(600)
    """)
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             cwd=os.getcwd(), env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert owner.stdout is not None
        server_pid = int(owner.stdout.readline())
        os.kill(server_pid, 0)  # it runs
        owner.kill()
        owner.wait()
        assert gone(server_pid), "the server outlived the process that launched it"
    finally:
        owner.kill()


@pytest.mark.slow
def test_real_server_health_request_crash_restart_and_clean_stop(tmp_path):
    """`akv serve` as the external process: a real request, SIGKILL, restart, request, stop."""
    from engine.remote import RemoteEngine

    log = tmp_path / "akv.log"
    server = ServerProcess(AKV_SERVE, model="tiny-random", log_path=log, gpu="", health_timeout_s=240, grace_s=10,
                           env={"HF_HUB_OFFLINE": "1"})
    server.start()
    try:
        assert server.state is ServerState.HEALTHY
        remote = RemoteEngine(server.base_url, "tiny-random", template="plain", check_usage="raise", timeout=60)
        msgs = trajectory(2)
        first = remote.chat(msgs, max_tokens=3)
        assert first.usage.prompt_tokens == len(remote.render(msgs).token_ids) and first.token_ids
        pid = server.pid
        os.kill(pid, signal.SIGKILL)
        assert gone(pid)
        with pytest.raises(AKVError) as err:
            remote.chat(msgs, max_tokens=3)
        assert err.value.transient and server.base_url in str(err.value)
        assert server.ensure_running() and server.restarts == 1 and server.pid != pid
        again = remote.chat(msgs, max_tokens=3)
        assert again.text == first.text  # greedy, on a fresh server: the same answer
        assert again.usage.cached_tokens == 0  # the restarted server's tree starts cold
        remote.close()
    finally:
        server.stop()
    assert gone(server.pid) and server.state is ServerState.STOPPED
    assert "serving tiny-random" in log.read_text()


def test_stop_kills_a_server_that_ignores_sigterm_after_the_grace_period(tmp_path):
    cmd = ('{python} -c "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); '
           'print(\'ready\', flush=True); time.sleep(600)" {port}')
    server = ServerProcess(cmd, model="m", log_path=tmp_path / "stubborn.log", grace_s=1.0)
    server.start(wait=False)
    deadline = time.monotonic() + 20
    # The log's header repeats the command (which says 'ready'): wait for the line the child prints.
    while "ready" not in (tmp_path / "stubborn.log").read_text().splitlines():  # SIGTERM is ignored from here on
        assert time.monotonic() < deadline
        time.sleep(0.05)
    t0 = time.monotonic()
    server.stop()
    assert 0.9 < time.monotonic() - t0 < 15 and gone(server.pid, timeout=5)
    assert server.proc is not None and server.proc.returncode == -signal.SIGKILL
