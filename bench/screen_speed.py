"""What a search's screen costs, everything included: ``python -m bench.screen_speed [--suite horizon]
[--tasks 6] [--trials 32] [--repeat 3] [--shards K] [--model-policies 0]``.

For each seed program, a real proxy study (:func:`rsi.cache.tuning.tune` with a :class:`Screen`, TPE,
the study written to a journal when it ends and the model study in sqlite, as in a search) of
``--trials`` trials on the first ``--tasks`` train tasks, each trial drawing its parameters with
``space()`` in the sandbox and predicting every task at the zero-forward fidelity. Each program's
first trial starts its sandbox processes; later ones reuse them, as in a search. The whole screen
runs ``--repeat`` times, each with nothing remembered from the one before (no checked decisions,
``search_spaces.cache.program.CHECKED``; no accounting or result, ``ProxyReplay.forget``), and the
median one is reported. Reported per policy-task: the whole
study, the proxy's evaluations, and ``space()`` with Optuna. This is the figure a search's own
speed ratio uses (``fidelity.json`` "speed").

With ``--model-policies N`` the same run then evaluates N policies (rolling drop, K = 2, 4, ...)
on the same tasks with the model, as a search's promotion does (log-likelihood scoring, no
generation), and reports how many times faster the screen is: the issue's target is 1,000x.

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
from rsi.cache.tuning import Screen, tune
from rsi.tuning import make_storage

MEASURES = ["engine", "evals/cache", "search_spaces", "rsi/cache"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""


def screen_speed(proxy: ProxyReplay, tasks: list[Task], programs: list[PolicySpec], trials: int) -> dict[str, Any]:
    """Per program and over all: ms per policy-task of the whole screen, and its split. The programs
    share one storage, made before the clock starts (a search has made it before its first screen)."""
    import optuna

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        store, screens = make_storage("sqlite", Path(tmp)), make_storage("journal", Path(tmp), "optuna-proxy")
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
    total_s = sum(r["seconds"] for r in rows)
    total_n = max(1, sum(r["evaluations"] for r in rows))
    proxy_s = sum(r["proxy_ms"] * r["evaluations"] / 1000 for r in rows)
    return {"tasks": len(tasks), "trials": trials, "programs": rows,
            "ms_per_policy_task": 1000 * total_s / total_n, "proxy_ms": 1000 * proxy_s / total_n,
            "space_and_optuna_ms": 1000 * (total_s - proxy_s) / total_n,
            "policy_task_evaluations_per_min": 60 * total_n / total_s if total_s > 0 else None}


def model_speed(model: str, tasks: list[Task], policies: int) -> dict[str, Any]:
    """Seconds per policy-task of the model fidelity: ``policies`` rolling-drop settings on every
    task, one engine (its radix tree shared, as in a search)."""
    import statistics

    from engine.engine import Engine
    from evals.cache.evaluator import EvalConfig, Replay

    replay = Replay(Engine.from_pretrained(model), EvalConfig(generate=False))
    seconds = []
    for k in range(policies):
        spec = PolicySpec("rolling_drop", {"keep_tool_responses": 2 * (k + 1)})
        for task in tasks:
            t = time.perf_counter()
            replay.evaluate(spec, task)
            seconds.append(time.perf_counter() - t)
    return {"policies": policies, "evaluations": len(seconds), "median_s": statistics.median(seconds),
            "mean_s": statistics.mean(seconds)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--suite", default="horizon")
    p.add_argument("--tasks", type=int, default=6)
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--repeat", type=int, default=3, help="whole screens, each from cold sandbox processes; the "
                   "median one is reported (this machine is shared: single runs vary by a third)")
    p.add_argument("--shards", type=int, default=None, metavar="K",
                   help="sandbox processes per program call (default: a search's, search_spaces.cache.program.SHARDS)")
    p.add_argument("--model-policies", type=int, default=0, metavar="N",
                   help="also time N policies with the model on the same tasks (minutes) and report the ratio")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.tasks < 1 or args.trials < 1 or args.repeat < 1 or args.model_policies < 0 or (
            args.shards is not None and not 1 <= args.shards <= 4):
        p.error(f"--tasks, --trials and --repeat must be at least 1, --model-policies at least 0 and --shards "
                f"1-4, got {args.tasks}, {args.trials}, {args.repeat}, {args.model_policies} and {args.shards}")
    from search_spaces.cache import program
    from search_spaces.cache.program import CHECKED, SESSIONS

    if args.shards is not None:
        program.SHARDS = args.shards

    tasks, proxy = speed_setup(args.model, args.suite, args.tasks)
    runs = []
    for _ in range(args.repeat):
        SESSIONS.close()  # every screen starts its programs' processes, as in a search
        CHECKED.clear()  # and remembers no decisions,
        proxy.forget()  # accounting or results from the screen before
        runs.append({**screen_speed(proxy, tasks, seed_programs(), args.trials),
                     "accounting_reused": proxy.accounting_hits, "results_reused": proxy.results_reused})
    median = sorted(runs, key=lambda r: r["ms_per_policy_task"])[(len(runs) - 1) // 2]
    out = {"model": args.model, "suite": args.suite, "shards": program.SHARDS, **median,
           "repeats_ms_per_policy_task": [r["ms_per_policy_task"] for r in runs]}
    print(f"{'screen, ms per policy-task':32s} {'whole':>7s} {'proxy':>7s} {'space()+Optuna':>15s}")
    for r in out["programs"]:
        print(f"{r['program'][:32]:32s} {r['ms_per_policy_task']:7.2f} {r['proxy_ms']:7.2f} "
              f"{r['space_and_optuna_ms']:15.2f}")
    print(f"{'all (' + str(len(out['programs'])) + ' programs x ' + str(args.trials) + ' trials)':32s} "
          f"{out['ms_per_policy_task']:7.2f} {out['proxy_ms']:7.2f} {out['space_and_optuna_ms']:15.2f}")
    print(f"{out['accounting_reused']} of {sum(r['evaluations'] for r in out['programs'])} policy-task "
          f"evaluations reused an accounting (same task, same schedules), {out['results_reused']} a whole result "
          "(same program, parameters and tasks)")
    print(f"a search screens {out['policy_task_evaluations_per_min']:.0f} policy-task evaluations a minute "
          f"(the median of {args.repeat} screens: " + ", ".join(f"{ms:.2f}" for ms in
                                                            out["repeats_ms_per_policy_task"]) + " ms)")
    if args.model_policies:
        out["model_fidelity"] = model_speed(args.model, tasks, args.model_policies)
        out["ratio"] = 1000 * out["model_fidelity"]["median_s"] / out["ms_per_policy_task"]
        print(f"the model: {out['model_fidelity']['median_s']:.2f} s per policy-task (median of "
              f"{out['model_fidelity']['evaluations']}); the screen is {out['ratio']:.0f}x faster "
              f"(target 1,000x: {'met' if out['ratio'] >= 1000 else 'not met'})")
    write_result(args.out or RESULTS / f"screen-speed-{args.model}-{args.suite}.json", out, measures=MEASURES)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
