"""Ray executor benchmark: ``python -m bench.ray_scaling [--model gemma-3-270m] [--policies 6] [--tasks 4]``.

In one run: evaluations per minute with 1 and 2 replicas (task-affine routing), and radix reuse
(prompt tokens read from the replicas' trees vs prefilled) with affinity vs round-robin routing.
On this 2-core machine the ceiling is the cores, not Ray: 2 replicas x 1 thread do about what 1
replica x 2 threads does; the point of the measurement is the reuse, which affinity preserves.
Writes ``bench/results/ray-executor.json``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import write_result
from evals.cache.evaluator import EvalConfig, PolicySpec
from evals.tasks import select_tasks
from rsi.cache.executors.base import EvalRequest
from rsi.store import EvalStore, eval_key

MEASURES = ["engine", "rsi/cache/executors"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""


def run_case(model: str, replicas: int, routing: str, threads: int, specs: list[PolicySpec], tasks: list[Any],
             config: EvalConfig) -> dict[str, Any]:
    import ray

    from rsi.cache.config import config_from_dict
    from rsi.cache.executors.ray_executor import RayExecutor
    cfg = config_from_dict({"model": {"name": model, "template": "plain", "pool_gb": 2.0},
                            "executor": {"kind": "ray", "replicas": replicas, "routing": routing,
                                         "threads_per_replica": threads, "timeout_s": 3600}})
    with tempfile.TemporaryDirectory() as tmp:
        ex = RayExecutor(cfg, config, EvalStore(Path(tmp) / "e.jsonl"), progress=False)
        reqs = [EvalRequest(s, t, eval_key(s.key, t.id, model, config.digest)) for t in tasks for s in specs]
        # Interleave tasks so that routing matters (a sweep proposes policies, not tasks, in order).
        reqs = [r for i in range(len(specs)) for r in reqs[i::len(specs)]]
        t0 = time.perf_counter()
        results = ex.run(reqs)
        wall = time.perf_counter() - t0
        reuse = ex.reuse()
        ex.close()
    if ray.is_initialized():
        ray.shutdown()
    prefilled = sum(r["prefill_tokens"] for r in reuse.values())
    cached = sum(r["cached_tokens"] for r in reuse.values())
    return {"replicas": replicas, "routing": routing, "threads_per_replica": threads, "evaluations": len(reqs),
            "failed": sum(not r.ok for r in results), "wall_s": wall, "evals_per_min": 60 * len(reqs) / wall,
            "prefill_tokens": prefilled, "cached_tokens": cached,
            "reuse_fraction": cached / max(1, cached + prefilled)}


def main(argv: list[str] | None = None) -> int:
    from evals.tasks import load_suite

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--suite", default="default")
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--policies", type=int, default=6)
    p.add_argument("--max-task-tokens", type=int, default=2500)
    p.add_argument("--out", default="bench/results/ray-executor.json")
    args = p.parse_args(argv)
    pool = [t for t in load_suite(args.suite, "train") if t.n_tokens is None or t.n_tokens <= args.max_task_tokens]
    tasks = select_tasks(pool, args.tasks)
    specs = [PolicySpec("rolling_drop", {"keep_tool_responses": k}) for k in range(1, args.policies + 1)]
    config = EvalConfig(generate=False)
    cases = [(1, "affinity", 2), (2, "affinity", 1), (2, "round_robin", 1)]
    rows = []
    for replicas, routing, threads in cases:
        row = run_case(args.model, replicas, routing, threads, specs, tasks, config)
        rows.append(row)
        print(f"{replicas} replica(s) x {threads} thread(s), {routing:11s}: {row['evals_per_min']:6.1f} evals/min, "
              f"reuse {row['reuse_fraction']:.2f} ({row['cached_tokens']} cached / {row['prefill_tokens']} prefilled), "
              f"failed {row['failed']}", flush=True)
    write_result(args.out, {"model": args.model, "tasks": [t.id for t in tasks], "policies": len(specs),
                            "rows": rows}, measures=MEASURES)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
