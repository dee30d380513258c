"""What a search's screen costs, everything included: ``python -m bench.screen_speed [--suite horizon]
[--tasks 6] [--trials 32]``.

For each seed program, a real proxy study (:func:`rsi.tuning.tune` with a :class:`Screen`, TPE, the
study written to a journal when it ends and the model study in sqlite, as in a search) of
``--trials`` trials on the first ``--tasks`` train tasks, each trial drawing its parameters with
``space()`` in the sandbox and predicting every task at the zero-forward fidelity.
The first trial of a program starts its sandbox process; later ones reuse it, as in a search.
Reported per policy-task: the whole study, the proxy's evaluations, and ``space()`` with Optuna.
This is the figure a search's own speed ratio uses (``fidelity.json`` "speed").

Prints a table and writes ``bench/results/screen-speed-<model>-<suite>.json``. Not a timed test.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import RESULTS, write_result
from bench.fidelity import seed_programs, speed_setup
from evals.cache.evaluator import PolicySpec, TaskResult
from evals.cache.fidelity import ProxyReplay
from evals.tasks.schema import Task
from rsi.tuning import Screen, make_storage, tune


def screen_speed(proxy: ProxyReplay, tasks: list[Task], programs: list[PolicySpec], trials: int) -> dict[str, Any]:
    """Per program and over all: ms per policy-task of the whole screen, and its split. The programs
    share one storage, made before the clock starts (a search has made it before its first screen)."""
    import optuna

    rows: list[dict[str, Any]] = []
    tmp = tempfile.TemporaryDirectory()
    store, screens = make_storage("sqlite", Path(tmp.name)), make_storage("journal", Path(tmp.name), "optuna-proxy")
    optuna.create_study(study_name="warm-up", storage=store)
    for i, spec in enumerate(programs):
        spent: list[float] = []
        evaluated, evaluate_s = [0], [0.0]

        def evaluate(params: dict[str, Any], ts: Any, source: str = spec.source or "",
                     evaluated: list[int] = evaluated, evaluate_s: list[float] = evaluate_s) -> list[TaskResult]:
            t = time.perf_counter()
            results = proxy.evaluate_many(PolicySpec("program", params, source=source), ts)
            evaluate_s[0] += time.perf_counter() - t
            evaluated[0] += len(results)
            return results

        tune(spec.source or "", f"bench-{i}", storage=store, sampler="tpe", seed=0, n_trials=0, tasks=tasks,
             fidelity_tasks=0, evaluate=lambda p, t: [], reference=lambda t: [],
             screen=Screen(evaluate, trials, 1, 0.0, timed=spent.append, storage=screens))
        n = max(1, evaluated[0])
        rows.append({"program": spec.display, "evaluations": evaluated[0], "seconds": spent[0],
                     "ms_per_policy_task": 1000 * spent[0] / n, "proxy_ms": 1000 * evaluate_s[0] / n,
                     "space_and_optuna_ms": 1000 * (spent[0] - evaluate_s[0]) / n})
    tmp.cleanup()
    total_s = sum(r["seconds"] for r in rows)
    total_n = max(1, sum(r["evaluations"] for r in rows))
    proxy_s = sum(r["proxy_ms"] * r["evaluations"] / 1000 for r in rows)
    return {"tasks": len(tasks), "trials": trials, "programs": rows,
            "ms_per_policy_task": 1000 * total_s / total_n, "proxy_ms": 1000 * proxy_s / total_n,
            "space_and_optuna_ms": 1000 * (total_s - proxy_s) / total_n,
            "policy_task_evaluations_per_min": 60 * total_n / total_s if total_s > 0 else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--suite", default="horizon")
    p.add_argument("--tasks", type=int, default=6)
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.tasks < 1 or args.trials < 1:
        p.error(f"--tasks and --trials must be at least 1, got {args.tasks} and {args.trials}")
    tasks, proxy = speed_setup(args.model, args.suite, args.tasks)
    out = {"model": args.model, "suite": args.suite, **screen_speed(proxy, tasks, seed_programs(), args.trials)}
    print(f"{'screen, ms per policy-task':32s} {'whole':>7s} {'proxy':>7s} {'space()+Optuna':>15s}")
    for r in out["programs"]:
        print(f"{r['program'][:32]:32s} {r['ms_per_policy_task']:7.2f} {r['proxy_ms']:7.2f} "
              f"{r['space_and_optuna_ms']:15.2f}")
    print(f"{'all (' + str(len(out['programs'])) + ' programs x ' + str(args.trials) + ' trials)':32s} "
          f"{out['ms_per_policy_task']:7.2f} {out['proxy_ms']:7.2f} {out['space_and_optuna_ms']:15.2f}")
    print(f"a search screens {out['policy_task_evaluations_per_min']:.0f} policy-task evaluations a minute")
    write_result(args.out or RESULTS / f"screen-speed-{args.model}-{args.suite}.json", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
