"""A search's headline judged again by another model: the same picks, the same held-out tasks.

    python -m bench.rejudge RUN_DIR --model qwen2.5-coder-1.5b [--dtype bfloat16] [--out FILE]
        [--also rolling_drop:keep_tool_responses=12 --also standard] [--both-scorings]

Reads ``RUN_DIR/headline.json`` (the evolved choice against each expert, chosen on train) and the
run's config (suite, held-out tasks, scoring, rates, frame guard), evaluates every policy the
headline names (the experts it compares with, the full cache among them when the config lists it)
on the run's held-out tasks with ``--model`` as the judge of
pass (its calibrated probe format), all policies of a task sharing its KV; then pairs each
comparison over tasks with the project's bootstrap (``evals.paired``), beside the run's own
figures from its judge. Writes ``bench/results/rejudge-<run>-<model>.json``.

``--also EXPERT`` (repeatable, the config's ``name:k=v`` notation) adds fixed experts the run did not
compare with; each is judged on the same tasks and the evolved choice is paired against it. These are
not picks (nothing was chosen on the held-out tasks), so adding them after the run keeps it blind.
``--both-scorings`` generates a greedy answer for every probe as well, and reports every comparison
under log-likelihood and under the greedy answer from that one evaluation (both verdicts are recorded
per probe, so the second scoring costs only the generation, not a second replay).

Only the judge changes: costs are the policies' schedules priced the same way (they agree with
the run's to rounding when both models' tokenizers count alike; they do not here, so both are shown).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from bench import RESULTS, write_result
from engine.engine import Engine
from engine.errors import AKVError
from evals.cache.evaluator import EvalConfig, PolicySpec, TaskResult, evaluate
from evals.cache.probes import probe_format_for
from evals.paired import pair_results, paired_bootstrap
from evals.tasks.selection import select_tasks
from evals.tasks.storage import load_suite
from rsi.cache.config import SearchConfig
from rsi.cache.export import pick_spec
from rsi.cache.headline import HeadlineRow, read_headline
from rsi.rundir import RunDir, RunDirError

MEASURES = ["engine", "evals/cache", "search_spaces"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir")
    p.add_argument("--model", required=True)
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                   help="default: the run's own with the run's model, else bfloat16")
    p.add_argument("--out", default=None)
    p.add_argument("--also", action="append", default=[], metavar="EXPERT",
                   help="a fixed expert to judge beside the headline's policies (name or name:k=v,k=v); repeatable")
    p.add_argument("--both-scorings", action="store_true",
                   help="generate answers too and report every comparison under loglik and generate")
    args = p.parse_args(argv)
    run = Path(args.run_dir)
    try:
        config = RunDir(run).cache_config
        comparisons = read_headline(run) or []
    except RunDirError as err:
        raise SystemExit(f"bench.rejudge: {err}") from None
    if not comparisons:
        raise SystemExit(f"{run}: no headline comparisons to judge again")
    suite, n, offset = config.data.suite, config.data.heldout_tasks, config.data.heldout_offset
    judge = judge_settings(config, args.model, args.dtype, both_scorings=args.both_scorings)
    tasks = select_tasks(load_suite(suite, "heldout"), n, offset=offset)
    ids = {c.versus: c.versus_id for c in comparisons} | {c.policy: c.policy_id for c in comparisons}
    labels = list(ids)
    specs = [pick_spec(run, ids[label]) for label in labels]
    try:
        extra = [PolicySpec.parse(text) for text in args.also]
        for spec in extra:
            spec.build()
    except (AKVError, TypeError, ValueError) as err:
        raise SystemExit(f"bench.rejudge: --also: {err}") from None
    labels += [s.display for s in extra]
    specs += extra
    chosen = comparisons[0].policy
    eval_config, scoring = judge.eval, judge.eval.scoring
    scorings = ["loglik", "generate"] if args.both_scorings else [scoring]
    print(f"judging {', '.join(labels)} on {len(tasks)} held-out tasks of {suite} "
          f"({tasks[0].id} .. {tasks[-1].id}) with {args.model} ({judge.dtype}, template "
          f"{judge.template or 'its own'})", flush=True)
    t0 = time.perf_counter()
    eng = Engine.from_pretrained(args.model, template=judge.template, dtype=getattr(torch, judge.dtype))
    bar = tqdm(total=len(tasks) * len(specs), desc="judging", unit="eval")
    results = evaluate(eng, specs, tasks, eval_config, on_result=lambda r: bar.update(1))
    bar.close()
    raw: dict[str, list[TaskResult]] = {s.display: [r for r in results if r.policy == s.display] for s in specs}
    names = dict(zip(labels, (s.display for s in specs)))
    pairs: list[tuple[str, str, HeadlineRow | None]] = [(c.policy, c.versus, c) for c in comparisons]
    pairs += [(chosen, s.display, None) for s in extra]
    rows: list[dict[str, Any]] = []
    figures: dict[str, dict[str, Any]] = {}
    for how in scorings:
        by = {name: [rescored(r, how) for r in rs] for name, rs in raw.items()}
        for policy, versus, c in pairs:
            d = paired_bootstrap(pair_results(by[names[policy]], by[names[versus]]))
            row: dict[str, Any] = {"scoring": how, "policy": policy, "versus": versus, "tasks": d.n_tasks,
                                   "cost_delta_pct": d.cost_delta_pct, "cost_delta_ci95": list(d.cost_delta_ci95),
                                   "pass_delta": d.pass_delta, "pass_delta_ci95": list(d.pass_delta_ci95)}
            line = (f"[{how}] {policy} vs {versus}: cost {d.cost_delta_pct:+.1f}% [{d.cost_delta_ci95[0]:+.1f}, "
                    f"{d.cost_delta_ci95[1]:+.1f}], pass {d.pass_delta:+.3f} [{d.pass_delta_ci95[0]:+.3f}, "
                    f"{d.pass_delta_ci95[1]:+.3f}] judged by {args.model}")
            if c is not None:
                row["run_judge"] = {"cost_delta_pct": c.cost_delta_pct, "cost_delta_ci95": list(c.cost_delta_ci95),
                                    "pass_delta": c.pass_delta, "pass_delta_ci95": list(c.pass_delta_ci95),
                                    "significant": c.significant}
                line += f"; by the run's judge: cost {c.cost_delta_pct:+.1f}%, pass {c.pass_delta:+.3f}"
            rows.append(row)
            print(line, flush=True)
        for label in labels:
            rs = by[names[label]]
            probes = [p for r in rs for p in r.probes]
            figures.setdefault(label, {})[how] = {
                "pass_rate": sum(p.passed for p in probes) / max(1, len(probes)), "probes": len(probes),
                "cost_cents_mean": sum(r.cost_cents for r in rs) / max(1, len(rs)),
                "errors": sum(not r.ok for r in rs)}
            print(f"  [{how}] {label}: pass {figures[label][how]['pass_rate']:.3f} over {len(probes)} probes, "
                  f"cost {figures[label][how]['cost_cents_mean']:.4f}c", flush=True)
    # One scoring keeps the file's earlier shape (one figure set per policy); two nest them by scoring.
    policies = figures if len(scorings) > 1 else {label: f[scorings[0]] for label, f in figures.items()}
    out = Path(args.out) if args.out else RESULTS / f"rejudge-{run.name}-{args.model}.json"
    write_result(out, {"run": run.name, "judge": args.model, "dtype": judge.dtype,
                       "template": eng.renderer.template.name, "run_judge": config.model.name,
                       "tasks": [t.id for t in tasks], "eval": eval_config.as_dict(), "policies": policies,
                       "comparisons": rows, "seconds": time.perf_counter() - t0,
                       "command": "python -m bench.rejudge " + " ".join(argv or sys.argv[1:]),
                       "per_task": [r.to_row() for r in results]}, measures=MEASURES)
    return 0


@dataclass(frozen=True)
class Judge:
    """How the held-out tasks are judged again: evaluator settings, chat template and dtype."""

    eval: EvalConfig
    template: str | None
    dtype: str


def judge_settings(run_config: SearchConfig, model: str, dtype: str | None = None,
                   both_scorings: bool = False) -> Judge:
    """The run's own settings (``SearchConfig.eval_config``, its template and dtype: what its search
    used), judged by ``model``. Another model than the run's gets its own probe format and template,
    and bfloat16 unless ``dtype`` says otherwise."""
    ev = run_config.eval_config()
    ev = replace(ev, generate=ev.generate or ev.scoring == "generate" or both_scorings)
    if model == run_config.model.name:
        return Judge(ev, run_config.model.template, dtype or run_config.dtype)
    return Judge(replace(ev, probe=probe_format_for(model)), None, dtype or "bfloat16")


def rescored(result: TaskResult, scoring: str) -> TaskResult:
    """``result`` with each probe's ``passed`` as ``scoring`` decides it from the verdicts the probe
    recorded (``loglik``: the top candidate by log-likelihood; ``generate``: the greedy answer's exact match)."""
    verdict = {"loglik": lambda p: p.mc_correct, "loglik-norm": lambda p: p.mc_norm_correct,
               "generate": lambda p: p.exact}[scoring]
    return replace(result, probes=tuple(replace(p, passed=verdict(p)) for p in result.probes))


if __name__ == "__main__":
    sys.exit(main())
