"""Does one hostile client stall the others? ``python -m bench.server_limits [--model tiny-random]``.

Starts ``akv serve`` on 127.0.0.1 (default limits), measures a small chat request's latency when
the server is idle, then again while an attacker thread keeps sending requests the server must
refuse: a 10 MB body (over ``--max-body-bytes``: 413 before the body is read), a 3 MB prompt
under the body limit but far over the context window, and 100,000 tiny messages (both 413 after
tokenizing on a pool thread, never on the engine thread). Before the limits, such requests were
tokenized on the engine thread for 20-56 s and a small request waited behind them.

The attacker runs in its own process and sends back to back. On a machine with 2+ cores and
``taskset``, the server is pinned to CPU 0 and the clients (victim and attacker) to CPU 1, in the
idle phase too, so that the ratio measures what refusing costs the server, not the load
generator's own CPU (``--no-pin`` turns this off).

Prints a table and writes ``bench/results/server-limits.json``. Not a timed test: read the ratio
of a small request's median latency under attack to its idle median (the goal is under 2x).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import write_result
from bench.server_load import _free_port, _percentile, _rss_peak_mib

SMALL = {"messages": [{"role": "system", "content": "You are terse."},
                      {"role": "user", "content": "Name one colour."}], "max_tokens": 8, "temperature": 0}


def _attacks() -> dict[str, bytes]:
    words = "lorem ipsum dolor sit amet consectetur " * (3_000_000 // 40)
    return {
        "10 MB body (over --max-body-bytes)": b'{"messages": [{"role": "user", "content": "' + b"x" * 10_000_000
                                              + b'"}]}',
        "3 MB prompt (over the context window)": json.dumps(
            {"messages": [{"role": "user", "content": words}], "max_tokens": 8}).encode(),
        "100k messages (over the context window)": json.dumps(
            {"messages": [{"role": "user", "content": "m"}] * 100_000, "max_tokens": 8}).encode(),
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
    """The attacker process: send the body back to back, print "status seconds" per request."""
    body = Path(body_file).read_bytes()
    with httpx.Client(timeout=300) as client:
        while True:
            t = time.perf_counter()
            try:
                r = client.post(base + "/v1/chat/completions", content=body,
                                headers={"content-type": "application/json"})
                status = str(r.status_code)
            except httpx.HTTPError as err:  # the server may close before a huge upload ends
                status = type(err).__name__
            print(status, time.perf_counter() - t, flush=True)


def _attacker(base: str, body: bytes, tmp: Path) -> subprocess.Popen:
    """Start the attacker in its own process (so that its client work never slows the victim's)."""
    path = tmp / "body.json"
    path.write_bytes(body)
    return subprocess.Popen([*_pin(CLIENT_CPU), sys.executable, "-m", "bench.server_limits", "--attack", base,
                             str(path)], stdout=subprocess.PIPE, text=True)


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
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.5)


def run(model: str, n: int, pin: bool = True) -> dict[str, Any]:
    _PINNING["on"] = pin and (os.cpu_count() or 1) >= 2 and shutil.which("taskset") is not None
    if _PINNING["on"]:
        os.sched_setaffinity(0, {CLIENT_CPU})  # the victim client
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
                attacker = _attacker(base, body, Path(tmp))
                time.sleep(2.0)  # the attacker has started and its first requests are in flight
                lat = _small_latencies(base, n)
                attacker.terminate()
                lines = (attacker.communicate(timeout=60)[0] or "").split("\n")
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
            "server_peak_rss_mib": rss}


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
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
