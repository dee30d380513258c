"""How fast the simulator runs at cluster scale: ``python -m bench.survival_sim_speed``.

    python -m bench.survival_sim_speed [--sessions 2000] [--kinds tool-heavy,memory-tight]
        [--families lru,ttl,...] [--out bench/results/survival-sim-speed.json]

Simulates ``--sessions`` sessions of each trace kind (arrivals at 3/s, a 150,000-token pool,
a 300,000-token host tier, batches of 64: the cluster setting of ``evals.survival.real_vs_sim``) under
each family, with the *assumed* GPU speeds of :func:`evals.survival.calibration.assumed_gpu`
(the wall time of the simulator hardly depends on them), and records the wall seconds of each
run, its turns and requests per second, with the machine's load average. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench import RESULTS, write_result
from evals.survival.calibration import assumed_gpu
from evals.survival.generate import generate_trace
from evals.survival.sim import SimConfig, simulate
from search_spaces.survival import SURVIVAL_FAMILIES

MEASURES = ["evals/survival"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""

RATE_PER_S, POOL, HOST, BATCH = 3.0, 150_000, 300_000, 64


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def run(sessions: int, kinds: Sequence[str], families: Sequence[str], seed: int = 0) -> dict[str, Any]:
    """Time ``simulate`` on each (kind, family); returns the rows and the setting."""
    cal = assumed_gpu()
    config = SimConfig(calibration=cal, pool_tokens=POOL, host_tokens=HOST, max_batch=BATCH)
    rows = []
    for kind in kinds:
        trace = generate_trace(kind, sessions, seed, arrival_rate_per_s=RATE_PER_S)
        for family in families:
            load = _load()
            t0 = time.perf_counter()
            r = simulate(trace, family, config)
            wall = time.perf_counter() - t0
            rows.append({"kind": kind, "family": family, "sessions": sessions, "turns": r.get("turns"),
                         "ok": r["ok"], "wall_s": round(wall, 2), "turns_per_s": round((r.get("turns") or 0) / wall, 1),
                         "load_before": load, "recompute_tokens": r.get("recompute_tokens"),
                         "jct_mean_s": r.get("jct_mean_s"), "evicted_tokens": r.get("evicted_tokens")})
            print(f"{kind:13s} {family:17s} {sessions} sessions, {r.get('turns')} turns: {wall:6.1f} s "
                  f"({rows[-1]['turns_per_s']} turns/s, load {load})", flush=True)
    return {"setting": {"sessions": sessions, "arrival_rate_per_s": RATE_PER_S, "pool_tokens": POOL,
                        "host_tokens": HOST, "max_batch": BATCH, "seed": seed, "speeds": cal.cost.source},
            "machine": {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
                        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
            "rows": rows}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.survival_sim_speed", description=__doc__.split("\n")[0])
    p.add_argument("--sessions", type=int, default=2000)
    p.add_argument("--kinds", default="tool-heavy,memory-tight")
    p.add_argument("--families", default=",".join(SURVIVAL_FAMILIES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(RESULTS / "survival-sim-speed.json"))
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    report = run(args.sessions, [k for k in args.kinds.split(",") if k], [f for f in args.families.split(",") if f],
                 args.seed)
    report["command"] = "python -m bench.survival_sim_speed " + " ".join(sys.argv[1:] if argv is None else argv)
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    write_result(args.out, report, measures=MEASURES)
    walls = [r["wall_s"] for r in report["rows"]]
    print(f"{len(walls)} runs, {min(walls):.1f}-{max(walls):.1f} s each", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
