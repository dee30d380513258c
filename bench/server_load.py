"""Loopback load test of ``akv serve``: ``python -m bench.server_load [--sessions 4] [--turns 6]``.

N concurrent agent sessions x M turns each (a tool response appended every turn, rolling drop
schedule keeping the last K tool responses), against a real server process on 127.0.0.1, once
with prefix reuse on and once in full-recompute mode (``--no-reuse``), in the same run. Reports
p50/p95 time to first token and turn latency, tokens reused vs prefilled, errors (must be 0)
and the server's peak RSS; writes ``bench/results/server-load.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench import write_result

MEASURES = ["engine"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def _rss_peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _tool_text(session: int, turn: int, words: int) -> str:
    return " ".join(f"s{session}t{turn} item {j} costs {(session * 31 + turn * 7 + j) % 97} dollars."
                    for j in range(words))


def _schedule(n_msgs: int, keep: int) -> dict[str, Any]:
    tools = list(range(3, n_msgs, 2))
    return {"drop_message": {str(t): [tools[j - keep]] for j, t in enumerate(tools) if j >= keep}}


def _session(base: str, sid: int, turns: int, keep: int, words: int, max_tokens: int, out: dict[str, Any]) -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent with a shopping tool."},
        {"role": "user", "content": f"Session {sid}: collect the prices."},
    ]
    with httpx.Client(base_url=base, timeout=600) as http:
        for turn in range(turns):
            msgs.append({"role": "assistant", "content": f"Looking up page {turn}.",
                         "tool_calls": [{"id": f"c{turn}", "type": "function",
                                         "function": {"name": "shop", "arguments": f'{{"page": {turn}}}'}}]})
            msgs.append({"role": "tool", "tool_call_id": f"c{turn}", "name": "shop",
                         "content": _tool_text(sid, turn, words)})
            body = {"messages": msgs, "max_tokens": max_tokens, "stream": True, "stop": [],
                    "stream_options": {"include_usage": True}, "session_id": f"s{sid}",
                    **_schedule(len(msgs), keep)}
            t0 = time.perf_counter()
            ttft = None
            usage = None
            try:
                with http.stream("POST", "/v1/chat/completions", json=body) as r:
                    if r.status_code != 200:
                        out["errors"].append(f"HTTP {r.status_code}")
                        continue
                    for line in r.iter_lines():
                        if not line.startswith("data: ") or line == "data: [DONE]":
                            continue
                        ev = json.loads(line[6:])
                        if "error" in ev:
                            out["errors"].append(ev["error"]["message"])
                        if ev.get("choices") and ev["choices"][0]["delta"].get("content") and ttft is None:
                            ttft = time.perf_counter() - t0
                        if ev.get("usage"):
                            usage = ev["usage"]
            except httpx.HTTPError as err:
                out["errors"].append(repr(err))
                continue
            out["turn_s"].append(time.perf_counter() - t0)
            if ttft is not None:
                out["ttft_s"].append(ttft)
            if usage:
                out["reused"] += usage["prompt_tokens_details"]["cached_tokens"]
                out["prefilled"] += usage["prefill_tokens"]


def run_mode(model: str, reuse: bool, sessions: int, turns: int, keep: int, words: int,
             max_tokens: int) -> dict[str, Any]:
    port = _free_port()
    cmd = [sys.executable, "-m", "rsi.cli", "serve", "--model", model, "--port", str(port), "--max-batch",
           str(sessions)]
    if not reuse:
        cmd.append("--no-reuse")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.5)
        out: dict[str, Any] = {"ttft_s": [], "turn_s": [], "errors": [], "reused": 0, "prefilled": 0}
        t0 = time.perf_counter()
        threads = [threading.Thread(target=_session, args=(base, s, turns, keep, words, max_tokens, out))
                   for s in range(sessions)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        rss = _rss_peak_mib(proc.pid)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    return {
        "mode": "reuse" if reuse else "full-recompute", "sessions": sessions, "turns": turns, "wall_s": wall,
        "ttft_p50_s": _percentile(out["ttft_s"], 0.5), "ttft_p95_s": _percentile(out["ttft_s"], 0.95),
        "turn_p50_s": _percentile(out["turn_s"], 0.5), "turn_p95_s": _percentile(out["turn_s"], 0.95),
        "tokens_reused": out["reused"], "tokens_prefilled": out["prefilled"], "errors": len(out["errors"]),
        "error_messages": out["errors"][:5], "peak_rss_mib": rss,
        "turns_completed": len(out["turn_s"]), "mean_turn_s": statistics.mean(out["turn_s"]) if out["turn_s"] else 0,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--sessions", type=int, default=4)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--keep", type=int, default=3, help="rolling drop keeps the last K tool responses")
    p.add_argument("--words", type=int, default=12, help="size of each tool response")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--out", default="bench/results/server-load.json")
    args = p.parse_args(argv)
    rows = [run_mode(args.model, reuse, args.sessions, args.turns, args.keep, args.words, args.max_tokens)
            for reuse in (True, False)]
    print(f"{'mode':15s} {'ttft p50':>9s} {'ttft p95':>9s} {'turn p50':>9s} {'turn p95':>9s} "
          f"{'reused':>8s} {'prefilled':>9s} {'errors':>6s} {'RSS MiB':>8s}")
    for r in rows:
        print(f"{r['mode']:15s} {r['ttft_p50_s']:9.2f} {r['ttft_p95_s']:9.2f} {r['turn_p50_s']:9.2f} "
              f"{r['turn_p95_s']:9.2f} {r['tokens_reused']:8d} {r['tokens_prefilled']:9d} {r['errors']:6d} "
              f"{r['peak_rss_mib']:8.0f}")
    reuse, cold = rows
    ratios = {k: cold[k] / reuse[k] if reuse[k] else float("nan")
              for k in ("ttft_p50_s", "ttft_p95_s", "turn_p50_s", "turn_p95_s", "wall_s")}
    print("full-recompute / reuse: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    write_result(args.out, {"model": args.model, "rows": rows, "ratios_cold_over_reuse": ratios}, measures=MEASURES)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
