"""Evaluator throughput: ``python -m bench.eval_speed [--policies 8] [--tasks 20] [--model gemma-3-270m]``.

In one run, evaluations per minute of P policies x T tasks (task by task, so the policies of a
task share its KV through the engine's radix tree) vs the same evaluations without sharing (the
tree is emptied before every evaluation). Prints a table and writes
``bench/results/eval-throughput.json`` with tokens prefilled and reused in both modes.

``--lockstep`` compares instead, on a population of P policies (``--policies``, beyond the named
ten: rolling drops of other depths) and the same tasks, one policy after another
(``Replay.evaluate``) vs the policies of a task in lockstep (``Replay.evaluate_policies``: each
probe scored for all of them in one batched forward); both share the tree, emptied at the start of
each repeat. The median of ``--repeats`` repeats (modes alternating) is reported, the rows of the
two modes are checked equal, and ``bench/results/eval-lockstep.json`` is written. With
``--generate`` probes are scored by their greedy answers (``--scoring generate``): lockstep then
also generates each probe's answers for all policies in shared decode steps
(``Engine.generate_many``), and the answers and verdicts that differ from the sequential run's
are counted (``bench/results/eval-lockstep-generate.json``); a third mode, ``lockstep-alone``,
scores in lockstep but generates the answers one at a time (the batched decode's own share).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from typing import Any

import torch

from bench import write_result
from engine.engine import Engine
from evals.cache.evaluator import EvalConfig, PolicySpec, Replay
from evals.cache.generation import BatchGeneration
from evals.tasks import load_suite

MEASURES = ["engine", "evals/cache"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""

POLICIES = [
    PolicySpec("full"), PolicySpec("rolling_drop", {"keep_tool_responses": 12}),
    PolicySpec("rolling_drop", {"keep_tool_responses": 4}), PolicySpec("rolling_drop", {"keep_tool_responses": 2}),
    PolicySpec("thinking_drop"), PolicySpec("scored_drop"), PolicySpec("standard", {"window": 2048}),
    PolicySpec("text_engineering", {"window": 2048}), PolicySpec("trim", {"window": 2048}),
    PolicySpec("rolling_drop", {"keep_tool_responses": 1}),
]


def run(engine: Engine, specs: list[PolicySpec], tasks: list[Any], share: bool, config: EvalConfig) -> dict[str, Any]:
    replay = Replay(engine, config)
    start = engine.stats.prefill_tokens, engine.stats.cached_tokens
    t0 = time.perf_counter()
    failed = 0
    for task in tasks:
        for spec in specs:
            if not share:
                engine.clear_cache()
            failed += not replay.evaluate(spec, task).ok
    wall = time.perf_counter() - t0
    n = len(tasks) * len(specs)
    return {"share": share, "evaluations": n, "failed": failed, "wall_s": wall, "evals_per_min": 60 * n / wall,
            "prefill_tokens": engine.stats.prefill_tokens - start[0],
            "cached_tokens": engine.stats.cached_tokens - start[1]}


def population(n: int) -> list[PolicySpec]:
    """``n`` distinct policies: the named ten, then rolling drops keeping 3, 5, 6, ... tool responses."""
    keeps = (k for k in range(3, 10_000) if k not in (1, 2, 4, 12))
    return [*POLICIES, *(PolicySpec("rolling_drop", {"keep_tool_responses": next(keeps)})
                         for _ in range(max(0, n - len(POLICIES))))][:n]


def lockstep(engine: Engine, specs: list[PolicySpec], tasks: list[Any], config: EvalConfig,
             repeats: int) -> dict[str, Any]:
    """Sequential vs lockstep evaluations per minute, median of ``repeats`` (see the module docstring)."""
    replays = {"sequential": Replay(engine, config), "lockstep": Replay(engine, config)}
    if config.generate:
        replays["lockstep-alone"] = Replay(engine, config, BatchGeneration(batch_size=1))
    walls: dict[str, list[float]] = {m: [] for m in replays}
    rows: dict[str, list[str]] = {}
    answers: dict[str, list[tuple[str, bool]]] = {}
    n = len(tasks) * len(specs)
    for _ in range(repeats):
        for mode, replay in replays.items():
            engine.clear_cache()
            t0 = time.perf_counter()
            out = [r for task in tasks for r in (replay.evaluate_policies(specs, task) if mode != "sequential"
                                                 else [replay.evaluate(s, task) for s in specs])]
            walls[mode].append(time.perf_counter() - t0)
            answers[mode] = [(p.generated, p.passed) for r in out for p in r.probes]
            rows[mode] = [json.dumps(dataclasses.replace(r, seconds=0.0).to_row(), sort_keys=True, default=str)
                          for r in out]
    per_min = {m: 60 * n / statistics.median(w) for m, w in walls.items()}
    return {"evaluations": n, "repeats": repeats, "wall_s": walls, "evals_per_min": per_min,
            "speedup": per_min["lockstep"] / per_min["sequential"],
            "same_rows": all(r == rows["sequential"] for r in rows.values()),
            "answers": len(answers["sequential"]),
            "answer_diffs": sum(a[0] != b[0] for a, b in zip(answers["lockstep"], answers["sequential"])),
            "verdict_diffs": sum(a[1] != b[1] for a, b in zip(answers["lockstep"], answers["sequential"])),
            "failed": sum('"ok": false' in r for r in rows["sequential"])}


def main(argv: list[str] | None = None) -> int:
    from evals.tasks import select_tasks

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--suite", default="default")
    p.add_argument("--policies", type=int, default=8)
    p.add_argument("--tasks", type=int, default=20)
    p.add_argument("--max-task-tokens", type=int, default=0)
    p.add_argument("--lockstep", action="store_true", help="sequential vs lockstep evaluation (see above)")
    p.add_argument("--repeats", type=int, default=3, help="with --lockstep: repeats (the median is reported)")
    p.add_argument("--generate", action="store_true", help="with --lockstep: score probes by their greedy answers, "
                   "generated in shared decode steps in lockstep (see above)")
    p.add_argument("--out", default=None, help="default: bench/results/eval-throughput.json "
                   "(--lockstep: eval-lockstep.json, with --generate: eval-lockstep-generate.json)")
    args = p.parse_args(argv)
    pool = [t for t in load_suite(args.suite, "train")
            if not args.max_task_tokens or t.n_tokens is None or t.n_tokens <= args.max_task_tokens]
    tasks = select_tasks(pool, args.tasks)
    engine = Engine.from_pretrained(args.model, template="plain")
    config = EvalConfig(scoring="generate") if args.generate else EvalConfig(generate=False)
    if args.generate and not args.lockstep:
        p.error("--generate goes with --lockstep")
    if args.lockstep:
        specs = population(args.policies)
        res = lockstep(engine, specs, tasks, config, args.repeats)
        for mode, rate in res["evals_per_min"].items():
            print(f"{mode:14s} {res['evaluations']} evaluations: {rate:6.1f}/min (median of "
                  f"{', '.join(f'{w:.1f}' for w in res['wall_s'][mode])} s)")
        print(f"lockstep / sequential: {res['speedup']:.2f}x; same rows: {res['same_rows']}; failed {res['failed']}")
        if args.generate:
            print(f"greedy answers: {res['answers']}, {res['answer_diffs']} differ from the sequential run's, "
                  f"{res['verdict_diffs']} in verdict")
        default = "bench/results/eval-lockstep-generate.json" if args.generate else "bench/results/eval-lockstep.json"
        write_result(args.out or default,
                     {"model": args.model, "scoring": config.scoring, "policies": [s.display for s in specs],
                      "tasks": [t.id for t in tasks],
                      "threads": torch.get_num_threads(), **res}, measures=MEASURES)
        return 0 if res["same_rows"] else 1
    specs = POLICIES[: args.policies]
    rows = [run(engine, specs, tasks, share, config) for share in (True, False)]
    for r in rows:
        print(f"{'radix sharing' if r['share'] else 'no sharing':14s} {r['evaluations']} evaluations in "
              f"{r['wall_s']:7.1f}s = {r['evals_per_min']:6.1f}/min; prefilled {r['prefill_tokens']:8d}, "
              f"reused {r['cached_tokens']:8d}, failed {r['failed']}")
    print(f"speedup from sharing: {rows[0]['evals_per_min'] / rows[1]['evals_per_min']:.2f}x")
    write_result(args.out or "bench/results/eval-throughput.json",
                 {"model": args.model, "policies": [s.display for s in specs], "tasks": [t.id for t in tasks],
                  "rows": rows}, measures=MEASURES)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
