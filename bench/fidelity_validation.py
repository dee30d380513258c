"""Does probe-free fidelity rank policies as the probes do?

    python -m bench.fidelity_validation --suites mixed,horizon [--tasks 4] [--policies "SPEC;SPEC"]
    python -m bench.fidelity_validation RUN [RUN ...]

Suite mode (``--suites``; ``bench.fidelity_suites``): no run directory is needed. Each policy (the
config notation ``name:k=v,k=v``; by default ``bench.fidelity_suites.SPREAD``, chosen to spread over
probe pass: the full cache, rolling drop at K from 1 to 12, read_drop, thinking_drop, scored_drop and
the text baselines at settings that lose probes on purpose) is evaluated with the model on the first
``--tasks`` train tasks of each suite (evenly by family, as searches choose them) twice: with probes
(the evaluator's pass, in ``--probe-dtype``) and by fidelity (in ``--dtype``), both under the frame
guard, loglik scoring, as the searches run. Writes ``bench/results/fidelity-validation.json``.

Run mode (``RUN ...``): every policy that finished searches evaluated with the model on all their
train tasks (experts, tuned settings, the main search's programs and the ablation arms' programs;
``bench.fidelity_runs`` collects them, deduplicated by policy key across runs that share their train
tasks) already has its probe results in the runs' stores; each is measured again without its probes
with the run's model, template and frame guard. Writes ``bench/results/fidelity-validation-<suite>.json``.

Reported (``bench.fidelity_stats``): the Spearman rank correlation over policies between probe pass
and each fidelity statistic (mean per-turn change of log-likelihood per token; the worst turn,
averaged over tasks; the share of tasks passing at ``--bound``), with a 95% interval from a bootstrap
over tasks (the tasks resampled, every policy's two numbers recomputed on the draw), Kendall's tau-b
beside it; the same over (policy, task) cells; the cases where the two disagree most: a (policy,
task) that loses probes while every recorded turn keeps its likelihood (a fact asked only later,
which no recorded turn needed). Suite mode adds the ties (the share of policies at probe pass 1.0, the
share of policy pairs tied) and each statistic's range over all policies, naming the policies at
both ends, per suite and pooled. A benchmark, not a test.
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
from bench.fidelity_stats import STATISTICS, per_task, rank_correlations
from bench.fidelity_suites import SPREAD, evaluate_suite, report
from engine.engine import Engine
from evals.cache.evaluator import PolicySpec, Replay, TaskResult
from evals.cache.log_fidelity import LogFidelity, measure
from evals.tasks import load_suite, select_tasks
from evals.tasks.schema import Task
from rsi.cache.config import config_from_dict
from rsi.rundir import RunDir

MEASURES = ["engine", "evals/cache", "search_spaces", "bench/fidelity_runs.py", "bench/fidelity_stats.py",
            "bench/fidelity_suites.py"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""

RUNS_NOTE = ("no run directory: the policies are built-in families at fixed settings (several families and "
             "settings, chosen to spread over probe pass), each evaluated here with probes and by fidelity on "
             "train tasks of several suites")


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


def _print_table(title: str, corr: dict[str, Any], n_policies: int, n_cells: int) -> None:
    print(f"\n{title}\n| statistic | Spearman over {n_policies} policies [95% CI, tasks resampled] | Kendall tau-b "
          f"[95% CI] | over {n_cells} (policy, task) cells |\n|---|---|---|---|")
    for name, c in corr.items():
        print(f"| {name} | {c['spearman']:+.3f} [{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}] | {c['kendall_tau_b']:+.3f} "
              f"[{c['kendall_ci95'][0]:+.3f}, {c['kendall_ci95'][1]:+.3f}] | {c['spearman_cells']:+.3f} |")


def run_mode(args: argparse.Namespace, command: str) -> Path:
    """The run mode (module docstring): probe results from the runs' stores, fidelity measured here."""
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
    per = [per_task(fid[label], bound) for label in labels]
    stats = {name: np.stack([x[name] for x in per]) for name in STATISTICS}
    corr = {k: c.as_dict() for k, c in rank_correlations(passed, probes, stats, samples=args.samples, seed=0).items()}
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
    _print_table(config.data.suite, corr, len(labels), len(labels) * len(tasks))
    print(f"\n{len(misses)} (policy, task) cells lose a probe while every recorded turn stays within the bound "
          f"{bound}: facts asked only later")
    out = Path(args.out) if args.out else RESULTS / f"fidelity-validation-{config.data.suite}.json"
    return write_result(out, {"runs": [str(r) for r in args.runs], "suite": config.data.suite,
                              "tasks": [t.id for t in tasks], "model": model, "dtype": dtype,
                              "probe_dtype": config.dtype, "frame_guard": config.eval.frame_guard, "bound": bound,
                              "policies": len(labels), "correlations": corr, "rows": rows,
                              "probe_lost_within_bound": misses, "seconds": time.perf_counter() - t0,
                              "command": command}, measures=MEASURES)


def suite_mode(args: argparse.Namespace, command: str) -> Path:
    """The suite mode (module docstring): every policy evaluated here, with probes and by fidelity."""
    texts = [t.strip() for t in (args.policies.split(";") if args.policies else SPREAD) if t.strip()]
    specs = [PolicySpec.parse(t) for t in texts][:args.limit]
    for spec in specs:
        spec.build()  # an unknown family or parameter stops here, before the model loads
    labels = [s.display for s in specs]
    if len(set(labels)) != len(labels) or len(specs) < 3:
        raise SystemExit(f"bench.fidelity_validation: at least 3 distinct policies needed, got {labels}")
    suites = [x.strip() for x in args.suites.split(",") if x.strip()]
    config = config_from_dict({"name": "fidelity-validation", "model": {"name": args.model, "template": args.template},
                               "eval": {"scoring": "loglik", "generate": False, "frame_guard": True,
                                        **({} if args.bound is None else {"fidelity_bound": args.bound})}})
    eval_config, bound = config.eval_config(), float(config.eval.fidelity_bound)
    tasks = {s: select_tasks(load_suite(s, "train"), args.tasks or 4) for s in suites}
    dtype, probe_dtype = args.dtype or "bfloat16", args.probe_dtype
    where = ", ".join(f"{len(t)} train tasks of {s}" for s, t in tasks.items())
    print(f"{len(specs)} policies on {where} ({args.model}; probes in {probe_dtype}, fidelity in {dtype}; "
          "frame guard on)", flush=True)
    t0 = time.perf_counter()
    engines = {d: Engine.from_pretrained(args.model, template=args.template, dtype=getattr(torch, d),
                                         pool_bytes=int(args.pool_gb * (1 << 30))) for d in {dtype, probe_dtype}}
    probe_replay = Replay(engines[probe_dtype], eval_config)
    fidelity_replay = probe_replay if dtype == probe_dtype else Replay(engines[dtype], eval_config)
    evals = [evaluate_suite(s, t, specs, probe_replay, fidelity_replay, bound) for s, t in tasks.items()]
    groups = report(evals, bound, samples=args.samples, seed=0)
    for name, g in groups.items():
        _print_table(f"{name}: probe pass ties: {g['ties']['probe_pass']['at_top']:.0%} of policies at 1.0, "
                     f"{g['ties']['probe_pass']['pairs_tied']:.0%} of pairs tied", g["correlations"], g["policies"],
                     g["policies"] * len(g["tasks"]))
        for stat, e in g["ranges"].items():
            print(f"  {stat}: {e['min']:+.4f} ({', '.join(e['min_policies'][:3])}) .. {e['max']:+.4f} "
                  f"({', '.join(e['max_policies'][:3])})")
    return write_result(Path(args.out) if args.out else RESULTS / "fidelity-validation.json", {
        "mode": "suites", "runs": [], "sources": RUNS_NOTE, "suites": suites, "model": args.model,
        "template": args.template, "dtype": dtype, "probe_dtype": probe_dtype, "pool_gb": args.pool_gb,
        "eval": eval_config.as_dict(), "bound": bound, "samples": args.samples, "policies": texts[:len(specs)],
        "groups": groups, "seconds": time.perf_counter() - t0, "command": command}, measures=MEASURES,
        judge=f"{args.model} probes ({eval_config.scoring}, {probe_dtype}, frame guard {eval_config.frame_guard})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="*", type=Path, help="run directories (the run mode)")
    p.add_argument("--suites", default=None, help="comma-separated suites (the suite mode), e.g. mixed,horizon")
    p.add_argument("--policies", default=None, help="suite mode: 'SPEC;SPEC;...' in the config notation "
                   "name:k=v,k=v (default: bench.fidelity_suites.SPREAD)")
    p.add_argument("--template", default="plain", help="suite mode: the chat template (default: plain, as searches)")
    p.add_argument("--probe-dtype", default="float32", choices=["float32", "bfloat16"],
                   help="suite mode: the engine's dtype for the probes (default: float32, as searches on CPU)")
    p.add_argument("--pool-gb", type=float, default=4.0, help="suite mode: each engine's KV pool (default 4, as "
                   "the experiments' configs)")
    p.add_argument("--bound", type=float, default=None, help="fidelity bound (default: the runs' eval.fidelity_bound)")
    p.add_argument("--first-tokens", action="store_true", help="run mode: also generate each turn's greedy first token")
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--out", default=None)
    p.add_argument("--model", default=None, help="the model (suite mode default gemma-3-270m; run mode: the runs')")
    p.add_argument("--limit", type=int, default=None, help="only the first N policies (a smoke test)")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                   help="the engine's dtype for the fidelity (default: the runs'; suite mode: bfloat16)")
    p.add_argument("--tasks", type=int, default=None,
                   help="only the first N train tasks (one per family first; suite mode default 4 per suite)")
    args = p.parse_args(argv)
    if bool(args.runs) == bool(args.suites):
        p.error("give run directories (run mode) or --suites (suite mode), not both")
    command = "python -m bench.fidelity_validation " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.suites:
        args.model = args.model or "gemma-3-270m"
        suite_mode(args, command)
    else:
        run_mode(args, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
