"""The simulator against the real engine on this machine: ``python -m bench.survival_conformance``.

    python -m bench.survival_conformance --model gemma-3-270m [--kinds tool-heavy,memory-tight]
        [--sessions 6,12] [--families lru,ttl,...] [--replays 2] [--calibration FILE] [--calibrate]
        [--time-scale 1.0] [--token-scale 1.0] [--max-batch 4] [--seed 0] [--out FILE] [--fresh]

For every trace (each kind at each session count, generated with ``--seed``) and every family:
replay on the real engine, wall clock, ``--replays`` times one after the other, then simulate
once with the calibration (default: the stored one of ``--model``; ``--calibrate`` measures a
fresh one first and stores it). Each row has

- the simulator's relative error on ``jct_mean_s``, ``jct_p95_s`` and ``resume_ttft_p50_s``
  against the replays' mean, and whether all three are within the 20% goal;
- the replays' own spread (``(max - min) / mean``: the noise floor);
- how the engine's calls inside each replay compared with the calibration (median measured /
  modelled seconds of a request's start and of a decode step; 1.0 is as calibrated);
- the token metrics of both: on the wall clock the engine's order can differ from the
  simulator's, so these may differ; beside them, the range the simulator's own token metrics
  span when every modelled time is scaled by 0.8 to 1.25 (how much they depend on timing).

Rows are written to ``--out`` as they finish; rows of other cells already there are kept
(``--fresh`` starts over), so the benchmark can be run in parts. A benchmark, not a test: run
it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import RESULTS, write_result
from evals.survival.calibration import Calibration, load_calibration, stored_path
from evals.survival.generate import generate_trace
from evals.survival.metrics import METRIC_KEYS, TOKEN_KEYS
from evals.survival.replay import ReplayConfig, replay
from evals.survival.sim import SimConfig, simulate
from search_spaces.survival import SURVIVAL_FAMILIES

MEASURES = ["engine/survival", "evals/survival"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""

TIME_KEYS = ("jct_mean_s", "jct_p95_s", "resume_ttft_p50_s")
GOAL = 0.20
KEEP = (*METRIC_KEYS, *TOKEN_KEYS, "makespan_s", "hol_wait_mean_s", "first_ttft_p50_s", "actions", "overlap_tokens",
        "short_turns")


def rel(a: float | None, b: float | None) -> float | None:
    """|a - b| / |b| (0.0 when both are 0; None when undefined)."""
    if a is None or b is None:
        return None
    if b == 0:
        return 0.0 if a == 0 else None
    return abs(a - b) / abs(b)


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


SCALES = (0.8, 0.9, 1.1, 1.25)


def timing_band(trace: Any, family: str, cal: Calibration, max_batch: int) -> dict[str, list[float]]:
    """Per token metric, the [min, max] the simulator gives with every modelled time scaled by ``SCALES``."""
    runs = [simulate(trace, family, SimConfig(calibration=replace(cal, timing=cal.timing.scaled(f)),
                                             max_batch=max_batch)) for f in SCALES]
    return {k: [min(r[k] for r in runs), max(r[k] for r in runs)] for k in TOKEN_KEYS if all(r.get("ok") for r in runs)}


def in_situ(result: dict[str, Any], cal: Calibration) -> dict[str, float | None]:
    """How the engine's calls inside a replay compare with the calibration: the median ratio of
    measured to modelled seconds of a request's start and of a decode step (1.0: as calibrated)."""
    t, samples = cal.timing, result.get("samples") or {}
    start = [sec / t.t_start(c, p) for c, p, sec in samples.get("prefill", []) if t.t_start(c, p) > 0]
    step = [sec / t.t_step(b, f, ctx) for b, f, ctx, sec in samples.get("decode", []) if t.t_step(b, f, ctx) > 0]
    return {"start_ratio": round(statistics.median(start), 3) if start else None,
            "step_ratio": round(statistics.median(step), 3) if step else None}


def row(kind: str, sessions: int, family: str, reals: list[dict[str, Any]], sim: dict[str, Any]) -> dict[str, Any]:
    """One cell: errors against the replays' mean, the replays' spread, token metrics of both."""
    out: dict[str, Any] = {"kind": kind, "sessions": sessions, "family": family,
                           "real": [{k: r.get(k) for k in (*KEEP, "load_before", "wall_s", "in_situ")} for r in reals],
                           "sim": {k: sim.get(k) for k in KEEP}, "error": {}, "noise": {}, "token_diff": {}}
    ok = all(r.get("ok") for r in reals) and sim.get("ok")
    out["ok"] = bool(ok)
    if not ok:
        out["failure"] = [r.get("error") for r in [*reals, sim] if not r.get("ok")]
        return out
    for k in TIME_KEYS:
        vals = [r[k] for r in reals if r.get(k) is not None]
        mean = statistics.fmean(vals) if vals else None
        out["error"][k] = rel(sim.get(k), mean)
        out["noise"][k] = (max(vals) - min(vals)) / mean if len(vals) > 1 and mean else None
    for k in TOKEN_KEYS:
        out["token_diff"][k] = sim[k] - statistics.fmean(r[k] for r in reals)
    errs = [e for e in out["error"].values()]
    out["within_goal"] = all(e is not None and e <= GOAL for e in errs)
    return out


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def table(rows: Sequence[dict[str, Any]]) -> str:
    head = ("| trace | family | " + " | ".join(f"{k} err (noise)" for k in TIME_KEYS)
            + " | recompute real / sim [band] | prefill real / sim | within 20% |")
    lines = [head, "|---" * (len(TIME_KEYS) + 5) + "|"]
    for r in sorted(rows, key=lambda r: (r["kind"], r["sessions"], r["family"])):
        name = f"{r['kind']}-{r['sessions']}"
        if not r["ok"]:
            lines.append(f"| {name} | `{r['family']}` | failed: {r.get('failure')} |")
            continue
        real_rc = statistics.fmean(x["recompute_tokens"] for x in r["real"])
        real_pf = statistics.fmean(x["prefill_tokens"] for x in r["real"])
        cells = [f"{_pct(r['error'][k])} ({_pct(r['noise'][k])})" for k in TIME_KEYS]
        sim, band = r["sim"], r.get("sim_timing_band", {}).get("recompute_tokens")
        rc = f"{real_rc:.0f} / {sim['recompute_tokens']}" + (f" [{band[0]}-{band[1]}]" if band else "")
        lines.append(f"| {name} | `{r['family']}` | " + " | ".join(cells)
                     + f" | {rc} | {real_pf:.0f} / {sim['prefill_tokens']}"
                     + f" | {'yes' if r['within_goal'] else 'no'} |")
    return "\n".join(lines)


def _calibration(args: argparse.Namespace, engine: Any) -> Calibration:
    if args.calibrate:
        from evals.survival.calibrate import calibrate

        cal = calibrate(engine, max_batch=args.max_batch, progress=lambda m: print(f"calibrate: {m}", flush=True))
        if cal.machine.get("warnings"):
            raise SystemExit(f"error: the machine looks busy ({'; '.join(cal.machine['warnings'])}); rerun when idle")
        path = cal.save(args.calibration or stored_path(engine.name))
        print(f"calibration written to {path}", flush=True)
        return cal
    cal = load_calibration(args.calibration or stored_path(engine.name))
    cal.check_model(engine.name, where="the calibration")
    for w in cal.machine.get("warnings") or []:
        print(f"warning: the calibration was taken on a busy machine: {w}", flush=True)
    return cal


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.survival_conformance", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--kinds", default="tool-heavy,memory-tight")
    p.add_argument("--sessions", default="6,12", help="comma-separated session counts")
    p.add_argument("--families", default=",".join(SURVIVAL_FAMILIES))
    p.add_argument("--replays", type=int, default=2, help="real replays per cell (2 or more give the noise)")
    p.add_argument("--calibration", default=None, help="calibration file (default: the stored one of --model)")
    p.add_argument("--calibrate", action="store_true", help="measure a fresh calibration first (and store it)")
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--token-scale", type=float, default=1.0)
    p.add_argument("--max-batch", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=None, help="default: bench/results/survival-conformance-<model>.json")
    p.add_argument("--fresh", action="store_true", help="drop the rows already in --out")
    args = p.parse_args(argv)
    from engine.engine import Engine

    engine = Engine.from_pretrained(args.model, threads=args.threads)
    cal = _calibration(args, engine)
    out = Path(args.out or RESULTS / f"survival-conformance-{Path(engine.name).name}.json")
    report: dict[str, Any] = {"rows": []}
    if out.is_file() and not args.fresh:
        report = json.loads(out.read_text(encoding="utf-8"))
    report.update({"model": engine.name, "calibration": {"machine": dict(cal.machine), "timing": cal.timing.wire()},
                   "goal": GOAL, "time_keys": list(TIME_KEYS)})
    commands = report.setdefault("commands", [])
    commands.append("python -m bench.survival_conformance " + " ".join(sys.argv[1:] if argv is None else argv))
    families = [f for f in args.families.split(",") if f]
    for kind in [k for k in args.kinds.split(",") if k]:
        for n in [int(x) for x in args.sessions.split(",") if x]:
            trace = generate_trace(kind, n, args.seed, args.time_scale, token_scale=args.token_scale)
            for family in families:
                reals = []
                for _ in range(args.replays):
                    load = _load()
                    t0 = time.perf_counter()
                    config = ReplayConfig(model=engine.name, calibration=cal, max_batch=args.max_batch)
                    r = replay(trace, family, config, engine=engine)
                    reals.append({**r, "load_before": load, "wall_s": round(time.perf_counter() - t0, 1),
                                  "in_situ": in_situ(r, cal)})
                sim = simulate(trace, family, SimConfig(calibration=cal, max_batch=args.max_batch))
                cell = row(kind, n, family, reals, sim)
                cell["sim_timing_band"] = timing_band(trace, family, cal, args.max_batch)
                cell["setting"] = {"seed": args.seed, "time_scale": args.time_scale, "token_scale": args.token_scale,
                                   "max_batch": args.max_batch, "replays": args.replays}
                report["rows"] = [x for x in report["rows"]
                                  if (x["kind"], x["sessions"], x["family"]) != (kind, n, family)] + [cell]
                write_result(out, report,
                             measures=MEASURES)  # after every cell: a long run killed keeps what it measured
                print(table([cell]).splitlines()[-1], flush=True)
    print(table(report["rows"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
