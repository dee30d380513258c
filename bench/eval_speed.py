"""Evaluator throughput: ``python -m bench.eval_speed [--policies 8] [--tasks 20] [--model gemma-3-270m]``.

In one run, evaluations per minute of P policies x T tasks (task by task, so the policies of a
task share its KV through the engine's radix tree) vs the same evaluations without sharing (the
tree is emptied before every evaluation). Prints a table and writes
``bench/results/eval-throughput.json`` with tokens prefilled and reused in both modes.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench import write_result
from engine.engine import Engine
from evals.cache.evaluator import EvalConfig, PolicySpec, Replay
from evals.tasks import load_suite

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


def main(argv: list[str] | None = None) -> int:
    from evals.tasks import select_tasks

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--suite", default="default")
    p.add_argument("--policies", type=int, default=8)
    p.add_argument("--tasks", type=int, default=20)
    p.add_argument("--max-task-tokens", type=int, default=0)
    p.add_argument("--out", default="bench/results/eval-throughput.json")
    args = p.parse_args(argv)
    pool = [t for t in load_suite(args.suite, "train")
            if not args.max_task_tokens or t.n_tokens is None or t.n_tokens <= args.max_task_tokens]
    tasks = select_tasks(pool, args.tasks)
    specs = POLICIES[: args.policies]
    engine = Engine.from_pretrained(args.model, template="plain")
    config = EvalConfig(generate=False)
    rows = [run(engine, specs, tasks, share, config) for share in (True, False)]
    for r in rows:
        print(f"{'radix sharing' if r['share'] else 'no sharing':14s} {r['evaluations']} evaluations in "
              f"{r['wall_s']:7.1f}s = {r['evals_per_min']:6.1f}/min; prefilled {r['prefill_tokens']:8d}, "
              f"reused {r['cached_tokens']:8d}, failed {r['failed']}")
    print(f"speedup from sharing: {rows[0]['evals_per_min'] / rows[1]['evals_per_min']:.2f}x")
    write_result(args.out, {"model": args.model, "policies": [s.display for s in specs],
                            "tasks": [t.id for t in tasks], "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
