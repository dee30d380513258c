"""Does one hostile client stall the others? ``python -m bench.server_limits [--model tiny-random]``.

Starts ``akv serve`` on 127.0.0.1 (default limits), measures a small chat request's latency when
the server is idle, then again while an attacker keeps sending requests the server must refuse:
a 10 MB body (over ``--max-body-bytes``: 413 before the body is read), a 3 MB prompt under the
body limit but far over the context window (413 from its length in bytes, before tokenizing:
``engine.tokenbound``), and 100,000 tiny messages (413 from their count, after parsing the JSON on
a pool thread). Before the limits, such requests were tokenized on the engine thread for 20-56 s
and a small request waited behind them.

The attacker runs in its own process and sends back to back; each of its bodies differs from the
last (a counter in the first message), so that no cache of the server answers a repeat, and the
small requests are timed only once its first refusal has come back (its start-up is not part of
the attack). On a machine with 2+ cores and ``taskset``, the server is pinned to CPU 0 and the
clients (victim and attacker) to CPU 1, in the idle phase too, so that the ratio measures what
refusing costs the server, not the load generator's own CPU (``--no-pin`` turns this off).

Prints a table and writes ``bench/results/server-limits.json`` with the load average at start
and end (other jobs on the machine inflate every ratio). Not a timed test: read the ratio of a
small request's median latency under attack to its idle median (the goal is at most 1.5x).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench import write_result
from bench.server_load import _free_port, _percentile, _rss_peak_mib

MEASURES = ["engine/server"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""

log = logging.getLogger("bench.server_limits")
ATTACKER_WAIT_S = 300.0
"""How long to wait for the attacker's first answer before timing the small requests."""
SMALL = {"messages": [{"role": "system", "content": "You are terse."},
                      {"role": "user", "content": "Name one colour."}], "max_tokens": 8, "temperature": 0}


MARK = b"@@@@@@@@"
"""Eight bytes in each attack body (inside its first message's content) that the attacker replaces
with its request counter, so that each body differs and has the same length."""


def numbered(body: bytes, i: int) -> bytes:
    """``body`` with its mark replaced by ``i`` as eight digits (``i`` below 10**8)."""
    if body.count(MARK) != 1 or not 0 <= i < 10**8:
        raise ValueError(f"an attack body holds its mark once and a counter has 8 digits (got {i})")
    return body.replace(MARK, b"%08d" % i, 1)


def _attacks() -> dict[str, bytes]:
    words = "lorem ipsum dolor sit amet consectetur " * (3_000_000 // 40)
    mark = MARK.decode()
    return {
        "10 MB body (over --max-body-bytes)": b'{"messages": [{"role": "user", "content": "' + MARK + b"x" * 10_000_000
                                              + b'"}]}',
        "3 MB prompt (over the context window)": json.dumps(
            {"messages": [{"role": "user", "content": mark + words}], "max_tokens": 8}).encode(),
        "100k messages (over the context window)": json.dumps(
            {"messages": [{"role": "user", "content": mark}] + [{"role": "user", "content": "m"}] * 99_999,
             "max_tokens": 8}).encode(),
    }


def _small_latencies(base: str, n: int) -> list[float]:
    out = []
    with httpx.Client(timeout=300) as client:
        for _ in range(n):
            t = time.perf_counter()
            r = client.post(base + "/v1/chat/completions", json=SMALL)
            out.append(time.perf_counter() - t)
            if r.status_code != 200:
                raise RuntimeError(f"small request failed: {r.status_code} {r.text[:200]}")
    return out


def _attack(base: str, body_file: str) -> None:
    """The attacker process: send the body back to back (its counter changed each time), print
    "status seconds" per request."""
    body = Path(body_file).read_bytes()
    with httpx.Client(timeout=300) as client:
        for i in itertools.count():
            content = numbered(body, i % 10**8)
            t = time.perf_counter()
            try:
                r = client.post(base + "/v1/chat/completions", content=content,
                                headers={"content-type": "application/json"})
                status = str(r.status_code)
            except httpx.HTTPError as err:  # the server may close before a huge upload ends
                status = type(err).__name__
            print(status, time.perf_counter() - t, flush=True)


class _Attacker:
    """The attacker in its own process (so that its client work never slows the victim's), and a
    thread that collects its lines; ``first`` is set when its first answer came back."""

    def __init__(self, base: str, body: bytes, tmp: Path):
        path = tmp / "body.json"
        path.write_bytes(body)
        self.proc = subprocess.Popen([*_pin(CLIENT_CPU), sys.executable, "-m", "bench.server_limits", "--attack",
                                      base, str(path)], stdout=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.first = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            self.first.set()

    def stop(self) -> list[str]:
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self._reader.join(timeout=60)
        return self.lines


SERVER_CPU, CLIENT_CPU = 0, 1
_PINNING = {"on": False}


def _pin(cpu: int) -> list[str]:
    taskset = shutil.which("taskset")
    return [taskset, "-c", str(cpu)] if _PINNING["on"] and taskset else []


def _start(model: str, port: int) -> subprocess.Popen:
    cmd = [*_pin(SERVER_CPU), sys.executable, "-m", "rsi.cli", "serve", "--model", model, "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    deadline = time.monotonic() + 300
    while True:
        try:
            health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            if health.status_code == 200 and health.json().get("intake") != "starting":
                return proc  # (measured once the intake child is up, not while it imports on the server's core)
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.5)


def run(model: str, n: int, pin: bool = True) -> dict[str, Any]:
    _PINNING["on"] = pin and (os.cpu_count() or 1) >= 2 and shutil.which("taskset") is not None
    if _PINNING["on"]:
        os.sched_setaffinity(0, {CLIENT_CPU})  # the victim client
    t_start, load_start = time.time(), os.getloadavg()
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _start(model, port)
    rows: list[dict[str, Any]] = []
    try:
        _small_latencies(base, 3)  # warm-up
        idle = _small_latencies(base, n)
        idle_p50 = statistics.median(idle)
        rows.append({"scenario": "idle", "small_p50_s": idle_p50, "small_p95_s": _percentile(idle, 0.95),
                     "ratio_vs_idle": 1.0, "attacker_statuses": {}, "refusal_p50_s": None})
        for name, body in _attacks().items():
            with tempfile.TemporaryDirectory() as tmp:
                attacker = _Attacker(base, body, Path(tmp))
                if not attacker.first.wait(timeout=ATTACKER_WAIT_S):
                    log.warning("no answer to the attacker's first request after %s s: timing anyway",
                                ATTACKER_WAIT_S)
                lat = _small_latencies(base, n)
                lines = attacker.stop()
            counts: dict[str, int] = {}
            refusals = []
            for line in lines:
                if len(line.split()) == 2:
                    status, seconds = line.split()
                    counts[status] = counts.get(status, 0) + 1
                    refusals.append(float(seconds))
            rows.append({"scenario": name, "small_p50_s": statistics.median(lat),
                         "small_p95_s": _percentile(lat, 0.95), "ratio_vs_idle": statistics.median(lat) / idle_p50,
                         "attacker_statuses": counts, "refusal_p50_s": _percentile(refusals, 0.5)})
        rss = _rss_peak_mib(proc.pid)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    return {"model": model, "small_requests_per_scenario": n, "pinned": _PINNING["on"], "rows": rows,
            "server_peak_rss_mib": rss, "attack_bodies_vary": True, "cpus": os.cpu_count(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t_start)),
            "load_average_start": load_start, "load_average_end": os.getloadavg()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.server_limits", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="tiny-random")
    p.add_argument("--requests", type=int, default=16, help="small requests per scenario")
    p.add_argument("--no-pin", action="store_true", help="do not pin the server and the clients to separate CPUs")
    p.add_argument("--out", default="bench/results/server-limits.json")
    p.add_argument("--attack", nargs=2, metavar=("URL", "BODY_FILE"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.attack:
        _attack(*args.attack)
        return 0
    result = run(args.model, args.requests, pin=not args.no_pin)
    print(f"{'scenario':42s} {'small p50 s':>11s} {'p95 s':>7s} {'x idle':>7s} {'refusal p50 s':>13s}  attacker got")
    for r in result["rows"]:
        refusal = f"{r['refusal_p50_s']:.3f}" if r["refusal_p50_s"] is not None else "-"
        print(f"{r['scenario']:42s} {r['small_p50_s']:11.3f} {r['small_p95_s']:7.3f} {r['ratio_vs_idle']:7.2f} "
              f"{refusal:>13s}  {r['attacker_statuses'] or '-'}")
    start, end = ("/".join(f"{x:.2f}" for x in result[k]) for k in ("load_average_start", "load_average_end"))
    print(f"load average (1/5/15 min) {start} at start, {end} at end, on {result['cpus']} CPUs "
          "(other jobs inflate every ratio)")
    write_result(args.out, result, measures=MEASURES)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
