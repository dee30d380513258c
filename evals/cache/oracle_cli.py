"""``akv oracle``: the hindsight oracle and the rolling-drop bounds of a task set (library calls only).

    akv oracle --suite mixed --split heldout --limit 6 --out oracle.json
    akv oracle --suite horizon --split heldout --offset 96 --limit 24 --out oracle.json   # tasks 97-120
    akv oracle --suite my_tasks.jsonl --model tiny-random --exact-max 10 --out oracle.json
    akv oracle --suite horizon --split heldout --check RUN_DIR   # stored results cheaper than the oracle?

Prints one line per task as it is done and a summary table; writes ``--out`` (JSON: per task the
full cache, the oracle's schedule and steps, the per-task rolling-drop bound; the one-setting
bound and the paired gap; the rule table over role, tool and length chosen with hindsight (unless
``--no-table``); with ``--check``, the run's stored results that beat the oracle).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tqdm import tqdm

from engine.errors import AKVError
from engine.files import atomic_write
from evals.cache.cli import load_tasks
from evals.cache.evaluator import EvalConfig, PolicySpec, Replay, TaskResult, result_from_row
from evals.cache.headroom import Headroom, TaskHeadroom, measure_headroom
from evals.cache.oracle import OracleConfig, violations
from evals.cache.probes import probe_format_for
from evals.tasks.schema import Task


def _count(args: argparse.Namespace, name: str, least: int) -> int:
    value = getattr(args, name)
    if value < least:
        raise AKVError(f"--{name.replace('_', '-')} must be an integer >= {least}, got {value}", field=name,
                       value=value)
    return int(value)


class Memo:
    """Model evaluations of this command, each (policy, task) once."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay
        self.done: dict[tuple[str, str], TaskResult] = {}

    def __call__(self, spec: PolicySpec, task: Task) -> TaskResult:
        key = (spec.key, task.id)
        if key not in self.done:
            self.done[key] = self.replay.evaluate(spec, task)
        return self.done[key]


def stored_results(run_dir: Path) -> list[TaskResult]:
    """Every model result in a search run's ``evaluations.jsonl`` (records that fail to read are skipped)."""
    path = run_dir / "evaluations.jsonl"
    if not path.is_file():
        raise AKVError(f"--check {run_dir}: no evaluations.jsonl there (not a search run directory)", field="check",
                       value=str(run_dir))
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            out.append(result_from_row(json.loads(line)["row"]))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def summary_lines(h: Headroom) -> list[str]:
    t = h.totals()
    full = t["full"] or 1.0
    lines = [f"{'':28s} {'cost (c)':>10s} {'vs full':>8s}"]
    for name, key in (("full cache", "full"), ("rolling drop, one setting", "single_rolling"),
                      ("rolling drop, per task", "per_task_rolling"), ("rule table (role/tool/length)", "rule_table"),
                      ("hindsight oracle", "oracle")):
        if key in t:
            lines.append(f"{name:28s} {t[key]:10.4f} {100 * (t[key] / full - 1):+7.1f}%")
    if h.table is not None and h.table.tasks_failing:
        lines.append(f"rule table: the model failed a probe the full cache passes on {len(h.table.tasks_failing)} "
                     f"task(s), e.g. {h.table.tasks_failing[0]}")
    gap = h.gap()
    if gap is not None:
        c = gap["cost_delta_ci95"]
        lines.append(f"per task vs one setting: {gap['cost_delta_pct']:+.1f}% [{c[0]:+.1f}, {c[1]:+.1f}] over "
                     f"{gap['tasks']} tasks (95% paired bootstrap)")
    return lines


def run_oracle(args: argparse.Namespace) -> int:
    """``akv oracle`` (module docstring).

    Raises:
        AKVError: a bad count, an unknown suite, model or split, ``--out`` a directory, ``--check``
            not a run directory.
    """
    from engine.engine import Engine
    from evals.cache.fidelity import DryEngine

    config = OracleConfig(budget=_count(args, "budget", 1), exact_max=_count(args, "exact_max", 0))
    bound_budget, single_budget = _count(args, "bound_budget", 0), _count(args, "single_budget", 0)
    out = Path(args.out or "oracle.json")
    if out.is_dir():
        raise AKVError(f"--out {out} is a directory; give a file name such as {out / 'oracle.json'}", field="out",
                       value=str(out))
    check = stored_results(Path(args.check)) if args.check else None
    selection = load_tasks(args.suite, args.split, args.limit, args.offset)
    eval_config = EvalConfig(rates=args.rates, scoring=args.scoring, probe=probe_format_for(args.model),
                             generate=False)
    eng = Engine.from_pretrained(args.model, template=args.template)
    memo = Memo(Replay(eng, eval_config))
    bar = tqdm(total=len(selection.tasks), desc="oracle", unit="task")

    def done(t: TaskHeadroom) -> None:
        o, b = t.oracle, t.rolling
        bar.write(f"{t.task.id}: full {t.full.cost_cents:.4f}c pass {t.full.pass_rate:.2f} | oracle "
                  f"{o.cost_cents:.4f}c ({o.method}, {len(o.kept)} kept, {o.evaluations} evaluations) | rolling per "
                  f"task {b.result.cost_cents:.4f}c ({b.params or 'full cache'})")
        bar.update(1)

    h = measure_headroom(selection.tasks, memo, DryEngine.of(eng), eval_config, config, bound_budget=bound_budget,
                         single_budget=single_budget, on_task=done, table=not args.no_table)
    bar.close()
    payload: dict[str, Any] = {"suite": args.suite, "split": selection.split, "model": args.model,
                               "template": args.template, "config": eval_config.as_dict(),
                               "oracle": {"budget": config.budget, "exact_max": config.exact_max,
                                          "bound_budget": bound_budget, "single_budget": single_budget},
                               "offset": args.offset, "tasks_selected": [t.id for t in selection.tasks],
                               **h.to_dict()}
    lines = summary_lines(h)
    if check is not None:
        found = violations([t.oracle for t in h.tasks], check)
        payload["check"] = {"run_dir": args.check, "results": len(check),
                            "violations": [v.__dict__ for v in found]}
        lines.append(f"--check {args.check}: {len(found)} of {len(check)} stored results beat the oracle"
                     + ("" if not found else f" (first: {found[0].policy} on {found[0].task_id})"))
    atomic_write(out, json.dumps(payload, indent=1, default=str).encode())
    print("\n".join(lines))
    print(f"oracle: {out.resolve()}")
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``oracle`` on ``sub``; it sets ``func`` (``args.func(args) -> exit status``)."""
    o = sub.add_parser("oracle", help="the hindsight oracle and rolling-drop bounds of a task set (the headroom)")
    o.add_argument("--suite", default="horizon", help="suite name or path of a task set on disk")
    o.add_argument("--split", default=None, help="a split of the task set or 'all' (default: train when there is one)")
    o.add_argument("--limit", type=int, default=0, help="at most N tasks (spread over families)")
    o.add_argument("--offset", type=int, default=0,
                   help="skip the first N tasks of that spread order (e.g. the held-out tasks a run with "
                        "data.heldout_offset N was judged on start there)")
    o.add_argument("--no-table", action="store_true",
                   help="leave out the rule table (role, tool, length) chosen with hindsight: one model evaluation "
                        "per task less")
    o.add_argument("--model", default="gemma-3-270m",
                   help="gemma-3-270m, qwen2.5-coder-1.5b (the qwen extra), tiny-random, or a local checkpoint")
    o.add_argument("--template", default=None, help="chat template (default: the named model's own, else plain)")
    o.add_argument("--rates", default="gpt-oss-120b")
    o.add_argument("--scoring", default="loglik", choices=["loglik", "loglik-norm"])
    o.add_argument("--budget", type=int, default=12, help="model evaluations of the greedy search per task")
    o.add_argument("--exact-max", type=int, default=0,
                   help="search tasks with at most N candidate messages exactly (0: greedy always; at most 20)")
    o.add_argument("--bound-budget", type=int, default=4, help="model evaluations of the per-task rolling bound")
    o.add_argument("--single-budget", type=int, default=3, help="candidate settings of the one-setting bound")
    o.add_argument("--check", default=None, metavar="RUN_DIR",
                   help="also list a search run's stored results (same model and scoring) that pass every probe the "
                        "full cache passes at less cost than the oracle")
    o.add_argument("--out", default=None, help="the JSON written (default oracle.json)")
    o.set_defaults(func=run_oracle)
    return o
