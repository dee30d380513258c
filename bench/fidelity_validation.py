"""Does probe-free fidelity rank policies as the probes do? ``python -m bench.fidelity_validation RUN [RUN ...]``

Every policy that finished searches evaluated with the model on all their train tasks (experts,
tuned settings, the main search's programs and the ablation arms' programs; ``bench.fidelity_runs``
collects them, deduplicated by policy key across runs that share their train tasks) already has its
probe results in the runs' stores. Here each is measured again without its probes: the recorded
assistant turns of the same tasks scored under the policy's schedule and under the full cache
(``evals.cache.log_fidelity.measure``), with the run's model, template and frame guard.

Reported: the Spearman rank correlation over policies between probe pass and each fidelity
statistic (mean per-turn change of log-likelihood per token; the worst turn, averaged over tasks;
the share of tasks passing at ``--bound``), with a 95% interval from a bootstrap over tasks (the
tasks resampled, every policy's two numbers recomputed on the draw); the same over (policy, task)
cells; and the cases where the two disagree most: policies that lose probes while every recorded
turn keeps its likelihood (a fact asked only later, which no recorded turn needed), and the reverse.

Prints a table and writes ``bench/results/fidelity-validation-<suite>.json``. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from bench import RESULTS, write_result
from bench.fidelity_runs import run_policy_results
from engine.engine import Engine
from evals.cache.evaluator import PolicySpec, Replay, TaskResult
from evals.cache.fidelity import spearman
from evals.cache.log_fidelity import LogFidelity, measure, passes
from evals.tasks import load_suite, select_tasks
from evals.tasks.schema import Task
from rsi.rundir import RunDir

MEASURES = ["engine", "evals/cache", "bench/fidelity_runs.py"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""

STATISTICS = ("mean_delta", "worst_delta", "bound_pass")


def collect(runs: list[Path]) -> tuple[Any, list[Task], list[tuple[PolicySpec, list[TaskResult]]]]:
    """The runs' shared config and train tasks, and every policy with its per-task probe results (the
    first run that evaluated a policy key provides it).

    Raises:
        SystemExit: the runs differ in suite, train tasks, model, template, dtype or eval settings.
    """
    first = None
    seen: dict[str, tuple[PolicySpec, list[TaskResult]]] = {}
    for run in runs:
        config = RunDir(run).cache_config
        train = select_tasks(load_suite(config.data.suite, "train"), config.data.train_tasks)
        what = (config.data.suite, [t.id for t in train], config.model.name, config.model.template, config.dtype,
                config.eval_config().as_dict())
        if first is None:
            first = (config, train, what)
        elif what != first[2]:
            raise SystemExit(f"bench.fidelity_validation: {run} differs from {runs[0]} in its suite, train tasks, "
                             "model or eval settings; validate such runs separately")
        for spec, results in run_policy_results(run, train)[1]:
            named = PolicySpec(spec.name, spec.params, spec.source, label=f"{run.name}/{spec.display}#{spec.key[:6]}")
            seen.setdefault(spec.key, (named, results))
    assert first is not None
    return first[0], first[1], list(seen.values())


def statistics(rows: list[LogFidelity], bound: float) -> dict[str, np.ndarray]:
    """Per task: the mean and the worst per-turn change, and whether the task passes at ``bound``."""
    return {"mean_delta": np.array([r.mean_delta for r in rows]),
            "worst_delta": np.array([r.worst_delta for r in rows]),
            "bound_pass": np.array([float(passes(r, bound)) for r in rows])}


def correlations(passed: np.ndarray, probes: np.ndarray, stats: dict[str, np.ndarray], samples: int,
                 seed: int) -> dict[str, Any]:
    """Spearman over policies between probe pass and each statistic (arrays: policy x task), with a
    bootstrap over tasks; and over (policy, task) cells."""
    n_tasks = passed.shape[1]
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n_tasks, size=(samples, n_tasks))
    out = {}
    for name, values in stats.items():
        def rho(idx: np.ndarray, v: np.ndarray = values) -> float:
            rate = passed[:, idx].sum(axis=1) / np.maximum(1, probes[:, idx].sum(axis=1))
            return spearman(list(v[:, idx].mean(axis=1)), list(rate))

        point = rho(np.arange(n_tasks))
        boot = np.array([rho(i) for i in draws])
        boot = boot[np.isfinite(boot)]
        cells = spearman(list(values.ravel()), list((passed / np.maximum(1, probes)).ravel()))
        out[name] = {"spearman": point, "ci95": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]
                     if len(boot) else [float("nan")] * 2, "spearman_cells": cells}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--bound", type=float, default=None, help="fidelity bound (default: the runs' eval.fidelity_bound)")
    p.add_argument("--first-tokens", action="store_true", help="also generate each turn's greedy first token")
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--out", default=None)
    p.add_argument("--model", default=None, help="measure fidelity with this model instead of the runs' (a smoke test)")
    p.add_argument("--limit", type=int, default=None, help="only the first N policies (a smoke test)")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                   help="the engine's dtype for the fidelity (default: the runs'; their probe results stay theirs)")
    p.add_argument("--tasks", type=int, default=None, help="only the first N train tasks (one per family first)")
    args = p.parse_args(argv)
    config, tasks, policies = collect(args.runs)
    policies = policies[:args.limit] if args.limit else policies
    if args.tasks:
        tasks = tasks[:args.tasks]
        policies = [(spec, results[:args.tasks]) for spec, results in policies]
    model = args.model or config.model.name
    bound = float(config.eval.fidelity_bound if args.bound is None else args.bound)
    specs = [s for s, _ in policies]
    dtype = args.dtype or config.dtype
    print(f"{len(specs)} policies on {len(tasks)} train tasks of {config.data.suite} ({model} in {dtype}; probe "
          f"results in {config.dtype}; frame guard {config.eval.frame_guard})", flush=True)
    t0 = time.perf_counter()
    eng = Engine.from_pretrained(model, template=config.model.template, dtype=getattr(torch, dtype))
    replay = Replay(eng, config.eval_config())
    fid: dict[str, list[LogFidelity]] = {s.display: [] for s in specs}
    for task in tqdm(tasks, desc="tasks", unit="task"):
        for row in measure(replay, specs, task, first_tokens=args.first_tokens):
            fid[row.policy].append(row)
    labels = [s.display for s in specs]
    passed = np.array([[r.n_passed for r in results] for _, results in policies], dtype=float)
    probes = np.array([[len(r.probes) for r in results] for _, results in policies], dtype=float)
    per = [statistics(fid[label], bound) for label in labels]
    stats = {name: np.stack([x[name] for x in per]) for name in STATISTICS}
    corr = correlations(passed, probes, stats, args.samples, seed=0)
    rate = passed.sum(axis=1) / probes.sum(axis=1)
    rows: list[dict[str, Any]] = [
            {"policy": label, "probe_pass": float(rate[i]), "mean_delta": float(stats["mean_delta"][i].mean()),
             "worst_delta": float(stats["worst_delta"][i].mean()), "bound_pass": float(stats["bound_pass"][i].mean()),
             "first_token_changed_share": (sum(t.first_changed for r in fid[label] for t in r.turns)
                                           / max(1, sum(len(r.turns) for r in fid[label]))) if args.first_tokens
             else None,
             "per_task": [{"task": t.id, "probes_passed": int(passed[i, j]), "probes": int(probes[i, j]),
                           "mean_delta": float(stats["mean_delta"][i, j]),
                           "worst_delta": float(stats["worst_delta"][i, j])} for j, t in enumerate(tasks)]}
            for i, label in enumerate(labels)]
    misses = [{"policy": r["policy"], "task": c["task"], "probes_passed": c["probes_passed"], "probes": c["probes"],
               "worst_delta": c["worst_delta"]}
              for r in rows for c in r["per_task"] if c["probes_passed"] < c["probes"] and c["worst_delta"] >= -bound]
    print(f"\n| statistic | Spearman over {len(labels)} policies [95% CI, tasks resampled] | over "
          f"{len(labels) * len(tasks)} (policy, task) cells |\n|---|---|---|")
    for name, c in corr.items():
        print(f"| {name} | {c['spearman']:+.3f} [{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}] "
              f"| {c['spearman_cells']:+.3f} |")
    print(f"\n{len(misses)} (policy, task) cells lose a probe while every recorded turn stays within the bound "
          f"{bound}: facts asked only later")
    out = Path(args.out) if args.out else RESULTS / f"fidelity-validation-{config.data.suite}.json"
    write_result(out, {"runs": [str(r) for r in args.runs], "suite": config.data.suite,
                       "tasks": [t.id for t in tasks], "model": model, "dtype": dtype, "probe_dtype": config.dtype,
                       "frame_guard": config.eval.frame_guard, "bound": bound, "policies": len(labels),
                       "correlations": corr, "rows": rows, "probe_lost_within_bound": misses,
                       "seconds": time.perf_counter() - t0,
                       "command": "python -m bench.fidelity_validation " + " ".join(argv or sys.argv[1:])},
                 measures=MEASURES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
