"""What a search's choices save once their drops wait for the agent to read: ``python -m bench.frame_guard
RUN_DIR... [--model gemma-3-270m] [--out FILE]``.

A replayed trajectory is fixed text, so the replay evaluator cannot see two things a live agent
would suffer: a tool output dropped before the next assistant turn has read it (the agent never
saw the result), and a dropped system prompt or task (the agent loses its instructions). The
probes ask about facts, so neither costs a probe. This script takes each run's headline choice
against the tuning-only arm and the arm's own choice, replays each one's final cumulative
schedule on the run's held-out tasks as is (its cost must equal the stored one: checked) and
*guarded* (the evaluator's frame guard, :mod:`evals.cache.guard`: every drop of a non-assistant
message moved to the first assistant message after it, the system prompt and the first user
message never dropped; repositions stay where they were).
Costs are exact; pass rates are the model's with ``--model``, else *predicted* by the evidence
rule (a probe passes when its evidence is attended).

Prints a table per run and pooled, and writes ``bench/results/frame-guard.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import RESULTS, write_result
from evals.cache.evaluator import EvalConfig, PolicySpec, Replay, TaskResult, result_from_row
from evals.cache.fidelity import DryEngine, EvidenceTable, ProxyReplay
from evals.cache.oracle import schedule_spec
from evals.tasks import load_suite, select_tasks
from evals.tasks.schema import Task
from rsi.cache.archive import Archive, Candidate
from rsi.cache.search import load_run_config
from search_spaces import Episode, run_program

MEASURES = ["engine", "evals/cache", "search_spaces"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""


def _judge(engine: Any, dry: DryEngine, tasks: list[Task], config: EvalConfig,
           ) -> Callable[[PolicySpec, Task], TaskResult]:
    """The model's replay under ``config`` when there is a model, else the evidence rule's."""
    return (Replay(engine, config).evaluate if engine is not None
            else ProxyReplay(dry, EvidenceTable.assumed(tasks), config).evaluate)


def _wire(run: Path, c: Candidate, task: Task, counts: list[int]) -> dict[str, Any]:
    source = (run / "programs" / f"{c.program}.py").read_text()
    out = run_program(source, dict(c.params), [Episode.of(list(task.messages), counts)])
    if not out.ok:
        raise SystemExit(f"{run}: {c.label} does not run on {task.id}: {out.error}")
    return dict(out.decisions[0][-1].wire)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--model", default=None, help="pass rates by this model (else predicted by the evidence rule)")
    ap.add_argument("--out", default=str(RESULTS / "frame-guard.json"))
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    engine = None
    if args.model:
        from engine.engine import Engine

        engine = Engine.from_pretrained(args.model)
    rows, pooled = [], {"choice": [0.0, 0.0], "arm": [0.0, 0.0]}
    for run_dir in args.runs:
        run = Path(run_dir)
        cfg = load_run_config(run)
        headline = json.loads((run / "headline.json").read_text())
        versus = next(c for c in headline["comparisons"] if c["versus"] == "tuning-only")
        archive = Archive.load(run / "archive.json")
        picks = {"choice": archive.get(versus["policy_id"]), "arm": archive.get(versus["versus_id"])}
        pool = [t for t in load_suite(cfg.data.suite, None) if t.split == "heldout"]
        tasks = select_tasks(pool, cfg.data.heldout_tasks, cfg.data.heldout_offset)
        config = EvalConfig(rates=cfg.eval.rates, scoring=cfg.eval.scoring, generate=False)
        dry = DryEngine.of(engine) if engine is not None else DryEngine.load(cfg.model.name, cfg.model.template)

        judge, judge_guarded = (_judge(engine, dry, tasks, c) for c in (config, replace(config, frame_guard=True)))
        stored = {}
        for line in (run / "evaluations.jsonl").read_text().splitlines():
            r = json.loads(line)["row"]
            stored[(r["policy_key"], r["task_id"])] = result_from_row(r)
        row: dict[str, Any] = {"run": str(run), "tasks": [t.id for t in tasks]}
        for name, c in picks.items():
            plain: list[TaskResult] = []
            guard: list[TaskResult] = []
            for t in tasks:
                counts = dry.render(list(t.messages)).message_tokens
                wire = _wire(run, c, t, counts)
                plain.append(judge(schedule_spec(wire, label=f"{c.label}"), t))
                guard.append(judge_guarded(schedule_spec(wire, label=f"{c.label}+guard"), t))
            want = [r for r in stored.values() if r.task_id in {t.id for t in tasks} and r.policy == c.label
                    and r.fidelity == "model" and r.ok]
            saved = sum(r.cost_cents for r in want) if len(want) == len(tasks) else None
            row[name] = {"label": c.label, "stored_cents": saved, "replayed_cents": sum(r.cost_cents for r in plain),
                         "guarded_cents": sum(r.cost_cents for r in guard),
                         "pass": sum(r.n_passed for r in plain) / max(1, sum(len(r.probes) for r in plain)),
                         "guarded_pass": sum(r.n_passed for r in guard) / max(1, sum(len(r.probes) for r in guard))}
            pooled[name][0] += row[name]["replayed_cents"]
            pooled[name][1] += row[name]["guarded_cents"]
        rows.append(row)
        ch, arm = row["choice"], row["arm"]
        print(f"{run.name}: choice {ch['label']} {ch['replayed_cents']:.3f}c (stored {ch['stored_cents']}) -> guarded "
              f"{ch['guarded_cents']:.3f}c, pass {ch['pass']:.3f} -> {ch['guarded_pass']:.3f}; tuning-only "
              f"{arm['label']} {arm['replayed_cents']:.3f}c -> {arm['guarded_cents']:.3f}c; choice vs arm "
              f"{100 * (ch['replayed_cents'] / arm['replayed_cents'] - 1):+.1f}% -> "
              f"{100 * (ch['guarded_cents'] / arm['guarded_cents'] - 1):+.1f}% guarded")
    (c0, c1), (a0, a1) = pooled["choice"], pooled["arm"]
    print(f"pooled: choice vs tuning-only {100 * (c0 / a0 - 1):+.1f}% as chosen, {100 * (c1 / a1 - 1):+.1f}% with both "
          f"guarded ({'model' if args.model else 'pass predicted'})")
    write_result(args.out, {"model": args.model, "fidelity": "model" if args.model else "predicted", "runs": rows,
                            "pooled": {"choice_cents": c0, "choice_guarded_cents": c1, "arm_cents": a0,
                                       "arm_guarded_cents": a1}}, measures=MEASURES)


if __name__ == "__main__":
    main()
