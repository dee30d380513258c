"""Compare ``akv live`` runs of several policies on the same tasks: one row per policy, each paired
over tasks with the first run (the reference, usually the full cache).

    python -m bench.live_compare runs/live-qwen-end-full runs/live-qwen-end-keep12 ... \
        [--out bench/results/live-compare.json]

Per policy: episodes, exact-match pass with its 95% Wilson interval, tool calls, invalid calls,
steps and cost per episode (its ``live.json``); against the reference, the paired cost change (%)
and pass difference with 95% percentile-bootstrap intervals over tasks (``evals.paired``), and the
tasks on which the two verdicts differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bench import RESULTS, write_result
from evals.cache.scoring import wilson_interval
from evals.paired import PairedTasks, paired_bootstrap
from rsi.rundir import RunDirError, read_json

MEASURES = ["evals/cache"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""


def load_run(run_dir: Path) -> dict[str, Any]:
    """``run_dir/live.json``: its policy label and one row per episode, keyed by (task, probe)."""
    data = read_json(run_dir / "live.json", dict)
    rows = {(r["task_id"], int(r["probe"])): r for r in data["episodes"]}
    return {"dir": str(run_dir), "policy": data["policy"], "rows": rows, "summary": data["summary"]}


def compare(runs: list[dict[str, Any]], samples: int = 2000) -> list[dict[str, Any]]:
    """One row per run (see the module docstring); the first run is the reference."""
    ref = runs[0]
    out = []
    for run in runs:
        rows = list(run["rows"].values())
        passed = sum(bool(r["exact"]) for r in rows)
        ci = wilson_interval(passed, len(rows))
        row: dict[str, Any] = {
            "policy": run["policy"], "run_dir": run["dir"], "episodes": len(rows), "pass_rate": passed / len(rows),
            "pass_ci95": [ci.low, ci.high], "tool_calls": sum(len(r["tool_calls"]) for r in rows),
            "invalid_calls": sum(int(r["invalid_calls"]) for r in rows),
            "steps_mean": sum(int(r["steps"]) for r in rows) / len(rows),
            "cost_cents_mean": sum(float(r["cost_cents"]) for r in rows) / len(rows),
            "errors": sum(r.get("error") is not None for r in rows)}
        keys = sorted(set(run["rows"]) & set(ref["rows"]))
        if run is not ref and keys:
            a, b = [run["rows"][k] for k in keys], [ref["rows"][k] for k in keys]
            d = paired_bootstrap(PairedTasks(
                tuple(f"{t}#{p}" for t, p in keys), tuple(float(r["cost_cents"]) for r in a),
                tuple(float(r["cost_cents"]) for r in b), tuple(int(bool(r["exact"])) for r in a),
                tuple(int(bool(r["exact"])) for r in b), (1,) * len(keys), (1,) * len(keys)), samples=samples)
            row |= {"versus": ref["policy"], "paired_tasks": len(keys), "cost_delta_pct": d.cost_delta_pct,
                    "cost_delta_ci95": list(d.cost_delta_ci95), "pass_delta": d.pass_delta,
                    "pass_delta_ci95": list(d.pass_delta_ci95),
                    "verdicts_differ": [f"{t} (this {x['answer']!r}, {ref['policy']} {y['answer']!r}, gold "
                                        f"{x['gold']!r})" for (t, _), x, y in zip(keys, a, b, strict=True)
                                        if bool(x["exact"]) != bool(y["exact"])]}
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.live_compare", description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", nargs="+", type=Path, help="akv live run directories; the first is the reference")
    p.add_argument("--out", default=None, help=f"results JSON (default {RESULTS}/live-compare.json)")
    args = p.parse_args(argv)
    try:
        runs = [load_run(d) for d in args.run_dirs]
    except (RunDirError, KeyError, TypeError, ValueError) as err:
        raise SystemExit(f"bench.live_compare: {err}") from None
    rows = compare(runs)
    print(f"{'policy':44s} {'n':>3s} {'pass (95% Wilson)':>22s} {'calls':>6s} {'inval':>5s} {'steps':>6s} "
          f"{'cost c':>8s} {'vs ' + runs[0]['policy'][:20]:>46s}")
    for r in rows:
        versus = ""
        if "versus" in r:
            lo, hi = r["cost_delta_ci95"]
            plo, phi = r["pass_delta_ci95"]
            versus = f"{r['cost_delta_pct']:+6.1f}% [{lo:+6.1f}, {hi:+6.1f}] pass {r['pass_delta']:+.3f} " \
                     f"[{plo:+.2f}, {phi:+.2f}]"
        print(f"{r['policy'][:44]:44s} {r['episodes']:3d} {r['pass_rate']:6.3f} [{r['pass_ci95'][0]:.2f}, "
              f"{r['pass_ci95'][1]:.2f}] {r['tool_calls']:6d} {r['invalid_calls']:5d} {r['steps_mean']:6.1f} "
              f"{r['cost_cents_mean']:8.4f} {versus:>46s}")
        for line in r.get("verdicts_differ", []):
            print(f"    differs: {line}")
    out = Path(args.out) if args.out else RESULTS / "live-compare.json"
    write_result(out, {"reference": runs[0]["policy"], "policies": rows,
                       "command": "python -m bench.live_compare " + " ".join(argv or sys.argv[1:])}, measures=MEASURES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
