"""Live episodes per hour: ``akv live`` against ``akv serve``, one episode after another against several
at once, in dense bfloat16 and in the GGUF's own bits (issue 52, item 4).

    python -m bench.live_throughput [--model qwen2.5-coder-1.5b] [--arms dense:1 dense:4 gguf:4] \
        [--suite examples/live-pages-end.jsonl --split heldout --limit 8 --max-steps 18 --max-tokens 48]

Writes ``bench/results/live-throughput-<model>.json``. Run it alone on the machine: it is a timing.

Each arm ``WEIGHTS:N`` starts its own server (``akv serve --dtype bfloat16 --weights WEIGHTS``: a fresh
prefix tree, so no arm reuses what an earlier one prefilled), waits until it answers, then times one
``akv live --policy full --concurrency N`` over the tasks as a user runs it (a child process: its
start, a few seconds, is counted; the server's load is not). Episodes per hour are the episodes over
that wall time. The first arm is the reference: every later arm is run with ``--reference`` on its
run directory, so its row counts the answers, verdicts and reply tokens that differ from it (greedy
decoding, so a difference comes from batching or from the weights, never from sampling). The goal:
the best arm at least 4x the first arm's episodes per hour at the same pass rate.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import RESULTS, write_result
from bench.engine_speed import machine_info
from rsi.cache.executors.launcher import ServerProcess
from rsi.rundir import read_json

MEASURES = ["engine", "evals/cache"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""

GOAL = 4.0
"""The best arm's episodes per hour over the first arm's (issue 52)."""


@dataclass(frozen=True)
class Arm:
    """One timed ``akv live`` run: the server's decode weights and the episodes in flight."""

    weights: str
    concurrency: int

    @property
    def label(self) -> str:
        return f"{self.weights}:{self.concurrency}"

    @classmethod
    def parse(cls, text: str) -> Arm:
        weights, _, n = text.partition(":")
        if weights not in ("dense", "gguf") or not n.isdigit() or int(n) < 1:
            raise argparse.ArgumentTypeError(f"an arm is WEIGHTS:N with WEIGHTS dense or gguf and N >= 1, got {text!r}")
        return cls(weights, int(n))


@contextlib.contextmanager
def served(model: str, weights: str, log: Path, *, dtype: str = "bfloat16", max_batch: int = 8) -> Iterator[str]:
    """``akv serve`` of ``model`` as a :class:`rsi.cache.executors.launcher.ServerProcess` (output to
    ``log``), yielding its base URL once ``/health`` answers and its intake child is up (so no arm's
    timing includes that child's start); stopped on exit."""
    command = (f"{{python}} -m rsi.cli serve --model {{model}} --dtype {dtype} --weights {weights} "
               f"--host {{host}} --port {{port}} --max-batch {max_batch}")
    with ServerProcess(command, model=model, log_path=log) as server:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                if httpx.get(server.base_url + "/health", timeout=2).json().get("intake") != "starting":
                    break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"akv serve --model {model} --weights {weights}: its intake did not start (log: {log})")
        yield server.base_url


def live_command(base: str, args: argparse.Namespace, arm: Arm, run_dir: Path, reference: Path | None) -> list[str]:
    """The ``akv live`` command line of ``arm``, as a user types it."""
    cmd = [sys.executable, "-m", "rsi.cli", "live", "--endpoint", base, "--model", args.model, "--policy", "full",
           "--suite", args.suite, "--split", args.split, "--limit", str(args.limit), "--max-steps",
           str(args.max_steps), "--max-tokens", str(args.max_tokens), "--concurrency", str(arm.concurrency),
           "--run-dir", str(run_dir)]
    return cmd + (["--reference", str(reference)] if reference is not None else [])


def arm_row(arm: Arm, wall_s: float, live: dict[str, Any]) -> dict[str, Any]:
    """One arm's row from its wall time and its ``live.json``."""
    s = live["summary"]
    episodes = int(s["episodes"])
    row = {"arm": arm.label, "weights": arm.weights, "concurrency": arm.concurrency, "episodes": episodes,
           "wall_s": wall_s, "episodes_per_hour": 3600.0 * episodes / wall_s if wall_s > 0 else 0.0,
           "pass_rate": s["pass_rate"], "pass_ci95": s["pass_rate_ci95"], "steps_mean": s["steps_mean"],
           "invalid_calls": s["invalid_calls"], "errors": s["errors"]}
    if "versus_reference" in s:
        v = s["versus_reference"]
        row["versus_first"] = {k: v[k] for k in ("episodes", "answers_differ", "verdicts_differ", "turns",
                                                  "turns_differ", "tokens_differ") if k in v}
    return row


def goal(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The best later arm's speedup over the first among those that pass at least as often as the first;
    ``met`` is ``None`` (not measured) with one arm."""
    first = rows[0]
    out: dict[str, Any] = {"target": f">= {GOAL:g}x the episodes per hour of {first['arm']} at its pass rate",
                           "best_arm": None, "speedup": None, "met": None, "reason": None}
    if len(rows) < 2:
        return out | {"reason": "one arm: nothing to compare with the first"}
    same_pass = [r for r in rows[1:] if r["pass_rate"] >= first["pass_rate"]]
    if not same_pass:
        return out | {"met": False, "reason": f"no arm passed as often as {first['arm']}"}
    best = max(same_pass, key=lambda r: r["episodes_per_hour"])
    speedup = best["episodes_per_hour"] / first["episodes_per_hour"]
    return out | {"best_arm": best["arm"], "speedup": speedup, "met": speedup >= GOAL}


def run(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    first_dir: Path | None = None
    for arm in args.arms:
        run_dir = work / arm.label.replace(":", "-")
        with served(args.model, arm.weights, work / f"serve-{arm.weights}-{arm.concurrency}.log") as base:
            cmd = live_command(base, args, arm, run_dir, first_dir)
            print(f"{arm.label}: {' '.join(cmd[1:])}", flush=True)
            t0 = time.perf_counter()
            done = subprocess.run(cmd, env=os.environ.copy(), check=False)
            wall = time.perf_counter() - t0
        live = read_json(run_dir / "live.json", dict)
        row = arm_row(arm, wall, live)
        row["exit_code"] = done.returncode
        rows.append(row)
        first_dir = first_dir or run_dir
        print(f"{arm.label}: {row['episodes']} episodes in {wall:.0f} s = {row['episodes_per_hour']:.1f}/hour, "
              f"pass {row['pass_rate']:.3f}", flush=True)
    return rows


def table(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["arm        episodes  wall s  per hour  x first  pass   replies differ (tokens)"]
    for r in rows:
        v = r.get("versus_first")
        differ = f"{v['turns_differ']}/{v['turns']} ({v['tokens_differ']})" if v else "-"
        lines.append(f"{r['arm']:<10} {r['episodes']:>8} {r['wall_s']:>7.0f} {r['episodes_per_hour']:>9.1f} "
                     f"{r['episodes_per_hour'] / rows[0]['episodes_per_hour']:>8.2f} {r['pass_rate']:>5.3f}  {differ}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.live_throughput", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--arms", nargs="+", type=Arm.parse, default=[Arm("dense", 1), Arm("dense", 4), Arm("gguf", 4)],
                   metavar="WEIGHTS:N", help="dense:1 dense:4 gguf:4 (the first is the reference)")
    p.add_argument("--suite", default="examples/live-pages-end.jsonl")
    p.add_argument("--split", default="heldout")
    p.add_argument("--limit", type=int, default=8)
    p.add_argument("--max-steps", type=int, default=18)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--work-dir", default=None, help="keep the arms' run directories and server logs here")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    load_start = os.getloadavg()
    with contextlib.ExitStack() as stack:
        work = Path(args.work_dir) if args.work_dir else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        work.mkdir(parents=True, exist_ok=True)
        rows = run(args, work)
    report = {"model": args.model, "dtype": "bfloat16", **machine_info(), "started": started,
              "load_average_start": load_start, "load_average_end": os.getloadavg(),
              "workload": {"suite": args.suite, "split": args.split, "limit": args.limit, "policy": "full",
                           "max_steps": args.max_steps, "max_tokens": args.max_tokens},
              "command": "python -m bench.live_throughput " + " ".join(argv if argv is not None else sys.argv[1:]),
              "arms": rows, "goal": goal(rows)}
    print(table(rows))
    g = report["goal"]
    verdict = {True: "met", False: "not met", None: "not measured"}[g["met"]]
    speedup = "" if g["speedup"] is None else f", best {g['best_arm']} at {g['speedup']:.2f}x"
    print(f"goal {g['target']}: {verdict}{speedup}" + (f" ({g['reason']})" if g["reason"] else ""))
    write_result(args.out or RESULTS / f"live-throughput-{args.model}.json", report, measures=MEASURES)
    return 1 if any(r["errors"] or r["exit_code"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
