"""``akv workload``: generate, import, replay and simulate agent workloads (thin wrappers).

    akv workload generate --kind tool-heavy --sessions 8 --out trace.jsonl [--seed 0] [--time-scale 1]
    akv workload import recorded.jsonl --out trace.jsonl
    akv workload replay trace.jsonl --survival ttl --out r.json [--model gemma-3-270m] [--clock wall|model]
    akv workload simulate trace.jsonl --survival ttl --out r.json [--model M] [--calibration cal.json] [--force]
    akv workload calibrate --model gemma-3-270m [--out cal.json] [--repeats 5] [--max-batch 4]

``--survival`` takes a policy name (lru, ttl, min_waste, program_priority, next_ref, intent,
weighted); ``--params ttl_s=2`` (or a JSON object) sets its parameters; ``--program FILE`` runs a survival
program instead. ``simulate`` uses the stored calibration of ``--model`` (default gemma-3-270m) or
``--calibration FILE``, and refuses a calibration made for another model unless ``--force``.
``add_parser(subparsers)`` registers the ``workload`` command on an existing
``argparse`` parser (``rsi/cli.py``); ``main(argv)`` serves ``python -m evals.survival.cli``.
Errors are one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.errors import AKVError


def _spec(args: argparse.Namespace) -> Any:
    from evals.survival.trace import read_text
    from search_spaces.lookup import parse_params
    from search_spaces.survival import survival_policy_names

    params = parse_params(args.params or [])
    if args.program:
        return {"source": read_text(args.program, "survival program"), "params": params}
    if args.survival is None:
        raise AKVError(f"give --survival NAME ({', '.join(survival_policy_names()[:-1])}) or --program FILE",
                       field="survival", value=None)
    return {"name": args.survival, "params": params}


def _write(result: dict[str, Any], out: str) -> int:
    from engine.files import atomic_write

    atomic_write(Path(out), (json.dumps(result, indent=1, default=str) + "\n").encode("utf-8"))
    keys = ("jct_mean_s", "jct_p95_s", "resume_ttft_p50_s", "resume_ttft_p95_s", "recompute_tokens", "peak_pool_bytes")
    if result.get("ok", True):
        print(" ".join(f"{k}={result.get(k)}" for k in keys), flush=True)
        return 0
    print(f"policy failed: {result.get('error')}", file=sys.stderr, flush=True)
    return 1


def _generate(args: argparse.Namespace) -> int:
    from evals.survival.generate import generate_trace
    from evals.survival.trace import save_trace

    trace = generate_trace(args.kind, args.sessions, args.seed, args.time_scale, args.arrival_rate, args.token_scale)
    path = save_trace(trace, args.out)
    print(f"wrote {path}: {len(trace.sessions)} sessions, {trace.n_turns} turns, pool_tokens="
          f"{trace.header.pool_tokens}, host_tokens={trace.header.host_tokens}", flush=True)
    return 0


def _import(args: argparse.Namespace) -> int:
    from evals.survival.importer import import_recorded_file
    from evals.survival.trace import save_trace

    trace = import_recorded_file(args.recorded)
    path = save_trace(trace, args.out)
    print(f"wrote {path}: {len(trace.sessions)} sessions, {trace.n_turns} turns", flush=True)
    return 0


def _replay(args: argparse.Namespace) -> int:
    from evals.survival.calibration import load_calibration
    from evals.survival.replay import ReplayConfig, replay

    cal = load_calibration(args.calibration) if args.calibration else None
    if cal is not None:
        cal.check_model(args.model, args.force, f"calibration {args.calibration}")
    config = ReplayConfig(model=args.model, pool_tokens=args.pool_tokens, host_tokens=args.host_tokens,
                          max_batch=args.max_batch, calibration=cal, threads=args.threads, clock=args.clock)
    return _write(replay(args.trace, _spec(args), config), args.out)


def _simulate(args: argparse.Namespace) -> int:
    from evals.survival.calibration import default_calibration, load_calibration
    from evals.survival.sim import SimConfig, simulate

    if args.calibration:
        cal = load_calibration(args.calibration)
        cal.check_model(args.model, args.force, f"calibration {args.calibration}")
    else:
        cal = default_calibration(args.model)
    config = SimConfig(calibration=cal, pool_tokens=args.pool_tokens, host_tokens=args.host_tokens,
                       max_batch=args.max_batch)
    return _write(simulate(args.trace, _spec(args), config), args.out)


def _calibrate(args: argparse.Namespace) -> int:
    import time

    from engine.engine import Engine
    from evals.survival.calibrate import calibrate
    from evals.survival.calibration import stored_path
    from evals.survival.trace import WorkloadError

    t0 = time.perf_counter()
    engine = Engine.from_pretrained(args.model, threads=args.threads)
    cal = calibrate(engine, quick=args.quick, repeats=args.repeats, max_batch=args.max_batch,
                    progress=lambda msg: print(f"calibrate: {msg}", flush=True))
    warnings = cal.machine.get("warnings") or []
    if warnings and not args.force:
        raise WorkloadError(f"the machine looks busy ({'; '.join(warnings)}): calibration not written; rerun on an "
                            "idle machine, or pass --force", field="calibration", value=warnings[0])
    path = cal.save(args.out or stored_path(engine.name))
    print(f"wrote {path} in {time.perf_counter() - t0:.0f} s: {cal.summary()}", flush=True)
    return 0


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="a trace file (JSON lines, akv-workload/1)")
    p.add_argument("--survival", default=None, help="survival policy name")
    p.add_argument("--params", nargs="*", default=[],
                   help="policy parameters: k=v k=v (as akv eval), or one JSON object")
    p.add_argument("--program", default=None, help="a survival program file (instead of --survival)")
    p.add_argument("--out", required=True, help="where to write the result JSON")
    p.add_argument("--pool-tokens", type=int, default=None, help="KV pool budget (default: the trace's)")
    p.add_argument("--host-tokens", type=int, default=None, help="host-tier budget (default: the trace's)")
    p.add_argument("--max-batch", type=int, default=4)
    p.add_argument("--model", default="gemma-3-270m", help="the model (the calibration must be made for it)")
    p.add_argument("--calibration", default=None, help="calibration JSON (default: the stored one of --model)")
    p.add_argument("--force", action="store_true", help="use a calibration made for another model")


def _safe(handler: Any) -> Any:
    """``handler`` with caller mistakes turned into one line on stderr and status 2."""

    def run_handler(args: argparse.Namespace) -> int:
        try:
            return int(handler(args))
        except (AKVError, OSError) as err:
            if getattr(args, "debug", False):  # akv --debug: the traceback instead
                raise
            print(f"error: {err}", file=sys.stderr, flush=True)
            return 2

    return run_handler


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``workload`` (``generate``, ``import``, ``replay``, ``simulate``, ``calibrate``) on ``subparsers``.

    Each subcommand sets ``func``: ``args.func(args) -> exit status`` (errors already handled).
    """
    w = subparsers.add_parser("workload", help="agent workloads: generate, replay on the engine, simulate")
    sub = w.add_subparsers(dest="workload_command", required=True)
    g = sub.add_parser("generate", help="generate a multi-session trace")
    g.add_argument("--kind", required=True, help="tool-heavy or memory-tight")
    g.add_argument("--sessions", type=int, required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--time-scale", type=float, default=1.0, help="multiply every gap and arrival time")
    g.add_argument("--arrival-rate", type=float, default=None, help="sessions per second (default: the kind's)")
    g.add_argument("--token-scale", type=float, default=1.0, help="multiply every message length")
    g.set_defaults(func=_safe(_generate))
    i = sub.add_parser("import", help="convert a recorded run (akv-recorded/1) into a trace")
    i.add_argument("recorded")
    i.add_argument("--out", required=True)
    i.set_defaults(func=_safe(_import))
    r = sub.add_parser("replay", help="replay a trace on the real engine (wall clock)")
    _run_options(r)
    r.add_argument("--threads", type=int, default=None)
    r.add_argument("--clock", choices=("wall", "model"), default="wall",
                   help="model: run on the calibration's clock, in lockstep with the simulator")
    r.set_defaults(func=_safe(_replay))
    s = sub.add_parser("simulate", help="simulate a trace (model clock, no model needed)")
    _run_options(s)
    s.set_defaults(func=_safe(_simulate))
    c = sub.add_parser("calibrate", help="measure this machine's engine speeds for the simulator")
    c.add_argument("--model", default="gemma-3-270m")
    c.add_argument("--out", default=None, help="default: bench/results/survival-calibration-<model>.json")
    c.add_argument("--repeats", type=int, default=5, help="runs per measured point (their median is kept)")
    c.add_argument("--max-batch", type=int, default=4, help="largest decode batch measured")
    c.add_argument("--threads", type=int, default=None)
    c.add_argument("--quick", action="store_true", help="a small grid (a smoke test, not a calibration to keep)")
    c.add_argument("--force", action="store_true", help="write the calibration even if the machine looked busy")
    c.set_defaults(func=_safe(_calibrate))
    return w


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="akv", description="AKV-RSI agent workloads")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
