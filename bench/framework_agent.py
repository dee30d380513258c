"""A framework's agent under a served policy beside ``akv live`` with the same policy: pass rate and
cost per episode of each, paired over tasks, with the framework run's drops and its resend check.

    python -m bench.framework_agent runs/live-qwen-end-keep12 runs/framework-qwen-end-keep12 \
        [--out bench/results/framework-agent.json]

The first directory is an ``akv live`` run (its ``live.json``), the second a run of
``examples/framework_agent.py play`` (the same ``live.json`` rows, judged and priced by the same
functions, with each episode's ``dropped_tokens``) after its ``check`` (``check.json``: the recorded
requests resent to the plain model with the schedule computed client-side). The rows are
``bench.live_compare``'s, the ``akv live`` run the reference.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bench import RESULTS, write_result
from bench.live_compare import compare, load_run
from rsi.rundir import RunDirError, read_json

MEASURES = ["evals/cache", "engine/server", "examples/framework_agent.py"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""


def framework_extras(run_dir: Path) -> dict[str, Any]:
    """The framework run's framework, drops (requests with dropped tokens, tokens dropped) and resend check."""
    data = read_json(run_dir / "live.json", dict)
    dropped = [d for e in data["episodes"] for d in e["dropped_tokens"]]
    check = read_json(run_dir / "check.json", dict)
    return {"framework": data["framework"], "requests": len(dropped),
            "requests_with_drops": sum(d > 0 for d in dropped), "dropped_tokens": sum(dropped),
            "resend_check": {k: check[k] for k in ("policy", "model", "requests", "equal", "different",
                                                   "usage_equal")}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.framework_agent", description=__doc__.splitlines()[0])
    p.add_argument("live_run", type=Path, help="the akv live run directory (the reference)")
    p.add_argument("framework_run", type=Path, help="the examples/framework_agent.py play directory, checked")
    p.add_argument("--out", default=None, help=f"results JSON (default {RESULTS}/framework-agent.json)")
    args = p.parse_args(argv)
    try:
        runs = [load_run(args.live_run), load_run(args.framework_run)]
        extras = framework_extras(args.framework_run)
    except (RunDirError, KeyError, TypeError, ValueError) as err:
        raise SystemExit(f"bench.framework_agent: {err}") from None
    rows = compare(runs)
    print(f"{'agent':44s} {'n':>3s} {'pass (95% Wilson)':>22s} {'steps':>6s} {'cost c/episode':>15s}")
    for r in rows:
        print(f"{r['policy'][:44]:44s} {r['episodes']:3d} {r['pass_rate']:6.3f} [{r['pass_ci95'][0]:.2f}, "
              f"{r['pass_ci95'][1]:.2f}] {r['steps_mean']:6.1f} {r['cost_cents_mean']:15.4f}")
    framework = rows[1]
    if "versus" in framework:
        lo, hi = framework["cost_delta_ci95"]
        print(f"{extras['framework']} vs akv live: cost {framework['cost_delta_pct']:+.1f}% [{lo:+.1f}, {hi:+.1f}], "
              f"pass {framework['pass_delta']:+.3f} over {framework['paired_tasks']} tasks")
    c = extras["resend_check"]
    print(f"drops in {extras['requests_with_drops']} of {extras['requests']} requests ({extras['dropped_tokens']} "
          f"tokens); resent to {c['model']}: {c['equal']} of {c['requests']} replies equal, {c['usage_equal']} usages")
    out = Path(args.out) if args.out else RESULTS / "framework-agent.json"
    write_result(out, {"reference": runs[0]["policy"], "policies": rows, **extras,
                       "command": "python -m bench.framework_agent " + " ".join(argv or sys.argv[1:])},
                 measures=MEASURES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
