"""``akv eval``: score one policy, or compare several, on a task suite (library calls only)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from tqdm import tqdm

from evals.metrics import wilson_interval
from evals.probes import ProbeFormat
from evals.replay import EvalConfig, PolicySpec, TaskResult, evaluate


def select_suite(suite: str, split: str, limit: int) -> list[Any]:
    from evals.tasks import load_suite
    from rsi.search import select_tasks

    return select_tasks(load_suite(suite, split), limit)


def summarize(results: list[TaskResult]) -> dict[str, Any]:
    """Pass rate with a 95% interval, mean cost and its breakdown, tokens, per family."""
    ok = [r for r in results if r.ok]
    probes = [p for r in ok for p in r.probes]
    passed = sum(p.passed for p in probes)
    iv = wilson_interval(passed, len(probes)) if probes else None
    fams: dict[str, list[bool]] = {}
    for r in ok:
        fams.setdefault(r.family, []).extend(p.passed for p in r.probes)
    n = max(1, len(ok))
    return {
        "policy": results[0].policy if results else "", "tasks": len(results), "failed": len(results) - len(ok),
        "pass_rate": passed / len(probes) if probes else math.nan,
        "pass_rate_ci95": [iv.low, iv.high] if iv else None,
        "exact_match": sum(p.exact for p in probes) / len(probes) if probes else math.nan,
        "contains_match": sum(p.contains for p in probes) / len(probes) if probes else math.nan,
        "mc_accuracy": sum(p.mc_correct for p in probes) / len(probes) if probes else math.nan,
        "cost_cents_mean": sum(r.cost_cents for r in ok) / n,
        "cost_by_category_cents": {k: sum(getattr(r.cost, k) for r in ok) * 100 / n
                                   for k in ("input", "cached", "repos", "output", "summary")},
        "tokens": {k: sum(sum(q.usage[k] for q in r.requests) for r in ok) / n
                   for k in ("prompt_tokens", "prefill_tokens", "cached_tokens", "drop_skipped_tokens",
                             "repos_tokens", "completion_tokens")},
        "per_family": {f: sum(v) / len(v) for f, v in sorted(fams.items()) if v},
        "errors": sorted({r.error for r in results if r.error})[:5],
    }


def _print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'policy':26s} {'pass':>6s} {'95% CI':>13s} {'cost (c)':>9s} {'input':>7s} {'cached':>7s} "
          f"{'repos':>6s} {'output':>7s} {'summary':>7s} {'prefill tok':>11s} {'failed':>6s}")
    for s in rows:
        ci = s["pass_rate_ci95"] or [math.nan, math.nan]
        c = s["cost_by_category_cents"]
        print(f"{s['policy'][:26]:26s} {s['pass_rate']:6.3f} [{ci[0]:.2f}, {ci[1]:.2f}] {s['cost_cents_mean']:9.4f} "
              f"{c['input']:7.4f} {c['cached']:7.4f} {c['repos']:6.4f} {c['output']:7.4f} {c['summary']:7.4f} "
              f"{s['tokens']['prefill_tokens']:11.0f} {s['failed']:6d}")


def _plot(rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for s in rows:
        ci = s["pass_rate_ci95"] or [s["pass_rate"]] * 2
        ax.errorbar([s["cost_cents_mean"]], [s["pass_rate"]], yerr=[[s["pass_rate"] - ci[0]], [ci[1] - s["pass_rate"]]],
                    fmt="o", capsize=3, label=s["policy"])
    ax.set_xlabel("mean cost per task (cents)")
    ax.set_ylabel("pass rate (95% CI)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_eval(args: argparse.Namespace, params: dict[str, Any]) -> int:
    from engine.engine import Engine
    from rsi.search import parse_expert

    if args.compare:
        specs = [parse_expert(x.strip()) for x in args.compare.split(",") if x.strip()]
        specs = [PolicySpec(s.name, s.params, label=s.name + (f"({s.label.split('(', 1)[1]}" if "(" in s.label else ""))
                 for s in specs]
    elif args.policy:
        specs = [PolicySpec(args.policy, params)]
    else:
        raise SystemExit("akv eval: give --policy NAME or --compare A,B,...")
    tasks = select_suite(args.suite, args.split, args.limit)
    eng = Engine.from_pretrained(args.model, template=args.template)
    config = EvalConfig(rates=args.rates, scoring=args.scoring, probe=ProbeFormat())
    bar = tqdm(total=len(tasks) * len(specs), desc="evaluating", unit="eval")
    results = evaluate(eng, specs, tasks, config, on_result=lambda r: bar.update(1))
    bar.close()
    rows = [summarize([r for r in results if r.policy == s.display]) for s in specs]
    _print_table(rows)
    out = Path(args.out or "eval-results.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {"suite": args.suite, "split": args.split, "model": args.model, "template": args.template,
                               "config": config.as_dict(),
                               "generator": sorted({f"{r.generator} {r.generator_version}" for r in results})}
    if len(rows) == 1:
        payload.update(rows[0])
    payload["policies"] = rows
    payload["tasks"] = [json.loads(json.dumps(r.to_row())) for r in results]
    out.write_text(json.dumps(payload, indent=1, default=str))
    import pandas as pd

    pd.DataFrame([r.to_row() for r in results]).to_parquet(out.with_suffix(".parquet"))
    if args.plot or args.compare:
        _plot(rows, args.plot or str(out.with_suffix(".png")))
    print(f"results: {out.resolve()} (per task: {out.with_suffix('.parquet')})")
    return 0
