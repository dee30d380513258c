"""The proxy fidelity against the model: ``python -m bench.fidelity [--suite default] [--tasks 6]``.

In one run, on the same train tasks: (1) the two control evaluations the proxy needs (``full``
and ``drop_evidence``, by the model); (2) P distinct policies evaluated by the model and by the
zero-forward proxy; (3) the Spearman rank correlation between the model's pass rates and the
proxy's predicted pass rates over those policies (``full`` excluded: the proxy reproduces it by
construction) (the issue's target: >= 0.8 over >= 30
policies); (4) policies evaluated per minute at each fidelity (target ratio >= 1,000x). Costs
are exact at both fidelities (the test suite checks they are equal); only pass is predicted.

Prints a table and writes ``bench/results/fidelity-<model>-<suite>.json``. Not a timed test.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench import RESULTS, write_result
from evals.cache.evaluator import DIAGNOSTIC, EvalConfig, PolicySpec, Replay, TaskResult
from evals.cache.fidelity import EvidenceTable, ProxyReplay, check_fidelity
from evals.tasks import load_suite
from evals.tasks.schema import Task

MEASURES = ["engine", "evals/cache"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""


def policies() -> list[PolicySpec]:
    """Distinct cache and text policies spanning drop depths (30 of them)."""
    out = [PolicySpec("rolling_drop", {"keep_tool_responses": k}) for k in (0, 1, 2, 3, 4, 5, 6, 8, 10, 12)]
    out += [PolicySpec("rolling_drop", {"keep_tool_responses": k, "target": "both_newest"}) for k in (1, 2, 4, 8)]
    out += [PolicySpec("scored_drop", {"budget_tokens": b}) for b in (256, 512, 1024, 2048)]
    out += [PolicySpec("thinking_drop")]
    out += [PolicySpec(name, {"window": w}) for name in ("standard", "text_engineering", "trim")
            for w in (512, 1024, 2048)]
    out += [PolicySpec("full"),
            PolicySpec("rolling_drop", {"keep_tool_responses": 1, "reposition": "calls", "reposition_every": 2}),
            PolicySpec("rolling_drop", {"keep_tool_responses": 3, "reposition": "calls", "reposition_every": 1})]
    return out


def _pass(results: list[TaskResult]) -> float:
    probes = [p.passed for r in results if r.ok for p in r.probes]
    return sum(probes) / len(probes) if probes else float("nan")


def run(model: str, suite: str, n_tasks: int, n_policies: int) -> dict[str, Any]:
    from engine.engine import Engine
    from evals.tasks import select_tasks

    engine = Engine.from_pretrained(model)
    tasks = select_tasks(load_suite(suite, "train"), n_tasks)
    config = EvalConfig(generate=False)
    replay = Replay(engine, config)
    t0 = time.perf_counter()
    full = [replay.evaluate(PolicySpec("full"), t) for t in tasks]
    dropped = [replay.evaluate(PolicySpec(DIAGNOSTIC), t) for t in tasks]
    controls_s = time.perf_counter() - t0
    proxy = ProxyReplay(engine, EvidenceTable.fit(full, dropped), config)
    rows: list[dict[str, Any]] = []
    pairs: dict[str, tuple[float, float]] = {}
    model_s = proxy_s = 0.0
    specs = [s for s in policies() if _builds(s)][:n_policies]
    for spec in specs:
        t = time.perf_counter()
        m = [replay.evaluate(spec, task) for task in tasks]
        model_s += time.perf_counter() - t
        t = time.perf_counter()
        p = proxy.evaluate_many(spec, tasks)
        proxy_s += time.perf_counter() - t
        failed = [r.error for r in m + p if not r.ok]
        if failed:
            rows.append({"policy": spec.display, "params": dict(spec.params), "error": failed[0]})
            continue
        rows.append({"policy": spec.display, "params": dict(spec.params), "model_pass": _pass(m),
                     "predicted_pass": _pass(p), "cost_cents": sum(r.cost_cents for r in m) / len(m)})
        if spec.name != "full":  # the proxy reproduces the full control by construction: no evidence
            pairs[spec.key] = (_pass(p), _pass(m))
    check = check_fidelity(pairs)
    n_evals = len(specs) * len(tasks)
    return {"model": model, "suite": suite, "tasks": [t.id for t in tasks], "policies": rows,
            "controls_seconds": controls_s, "spearman": check.spearman, "policies_compared": check.policies,
            "summary": check.summary(), "model_evals_per_min": 60 * n_evals / model_s,
            "proxy_evals_per_min": 60 * n_evals / proxy_s, "speedup": model_s / proxy_s}


def proxy_speed(model: str, suite: str, n_tasks: int, repeats: int = 3) -> dict[str, Any]:
    """Proxy time per policy-task alone (no model: the tokenizer and a synthetic outcome table,
    which costs the same to consult as a measured one); median over ``repeats`` of all policies,
    for the built-in families (in process) and for the seed programs (each call one sandbox
    process for all tasks, as a search screens), split into the policy's decisions and the rest
    (dry-run accounting of every request, predicted probes, cost). What a search's screen costs with
    ``space()`` and Optuna included is ``python -m bench.screen_speed``."""
    import statistics

    tasks, proxy = speed_setup(model, suite, n_tasks)
    groups = {"families": [s for s in policies() if _builds(s)], "programs": seed_programs()}
    out: dict[str, Any] = {"model": model, "suite": suite, "tasks": len(tasks)}
    for group, specs in groups.items():
        whole, decide = [], []
        for _ in range(repeats):
            t = time.perf_counter()
            d = 0.0
            for spec in specs:
                policy = spec.build()
                t1 = time.perf_counter()
                runs = policy.run_episodes([proxy.episode(task) for task in tasks]) if policy is not None else []
                d += time.perf_counter() - t1
                for task, decisions in zip(tasks, runs):
                    proxy.evaluate_decisions(spec, task, dict(zip(proxy.episode(task).cuts, decisions)), 0.0)
            n = len(specs) * len(tasks)
            whole.append((time.perf_counter() - t) / n)
            decide.append(d / n)
        out[group] = {"policies": len(specs), "ms_per_policy_task": 1000 * statistics.median(whole),
                      "decide_ms": 1000 * statistics.median(decide)}
        out[group]["rest_ms"] = out[group]["ms_per_policy_task"] - out[group]["decide_ms"]
    ms = out["programs"]["ms_per_policy_task"]
    out.update({"proxy_ms_per_policy_task": ms, "proxy_evals_per_min": 60_000 / ms})
    return out


def speed_setup(model: str, suite: str, n_tasks: int) -> tuple[list[Task], ProxyReplay]:
    """The first ``n_tasks`` train tasks of ``suite`` and a proxy over them with a synthetic outcome
    table (it costs the same to consult as a measured one), its render and relevance caches warm,
    as after a search's first trial."""
    from evals.cache.fidelity import DryEngine, ProbeOutcome
    from evals.tasks import select_tasks
    from search_spaces.cache.embed import default_embedder, intent_relevance

    tasks = select_tasks(load_suite(suite, "train"), n_tasks)
    table = EvidenceTable({(t.id, i): ProbeOutcome(True, False) for t in tasks for i in range(len(t.probes))})
    proxy = ProxyReplay(DryEngine.load(model, "plain"), table, EvalConfig(generate=False))
    proxy.evaluate_many(PolicySpec("rolling_drop", {"keep_tool_responses": 0}), tasks)  # renders every task
    for task in tasks:  # the embedder's model loads once per process (about 8 s)
        intent_relevance(proxy.episode(task).messages, default_embedder())
    return tasks, proxy


def seed_programs() -> list[PolicySpec]:
    from search_spaces.cache.seeds import seed_source

    return [PolicySpec("program", {}, source=seed_source(n), label=f"seed:{n}")
            for n in ("rolling_drop", "scored_drop", "thinking_drop")]


def _builds(spec: PolicySpec) -> bool:
    from engine.errors import AKVError

    try:
        spec.build()
    except AKVError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--suite", default="default")
    p.add_argument("--tasks", type=int, default=6)
    p.add_argument("--policies", type=int, default=30)
    p.add_argument("--out", default=None)
    p.add_argument("--proxy-speed", action="store_true", help="only time the proxy (no model, seconds)")
    args = p.parse_args(argv)
    if args.proxy_speed:
        speed = proxy_speed(args.model, args.suite, args.tasks)
        print(f"{'proxy, ms per policy-task':28s} {'total':>7s} {'decide':>7s} {'rest':>7s}")
        for group in ("families", "programs"):
            g = speed[group]
            label = f"{group} ({g['policies']} x {speed['tasks']} tasks)"
            print(f"{label:28s} {g['ms_per_policy_task']:7.2f} {g['decide_ms']:7.2f} {g['rest_ms']:7.2f}")
        print(f"a search screens programs: {speed['proxy_evals_per_min']:.0f} policy-task evaluations a minute")
        write_result(args.out or RESULTS / f"proxy-speed-{args.model}-{args.suite}.json", speed, measures=MEASURES)
        return 0
    result = run(args.model, args.suite, args.tasks, args.policies)
    print(f"{'policy':28s} {'model pass':>10s} {'predicted':>9s} {'cost (c)':>9s}")
    for r in result["policies"]:
        if "error" in r:
            print(f"{r['policy'][:28]:28s} failed: {r['error'][:80]}")
            continue
        print(f"{(r['policy'] + str(r['params'] or ''))[:28]:28s} {r['model_pass']:10.3f} {r['predicted_pass']:9.3f} "
              f"{r['cost_cents']:9.4f}")
    print(result["summary"])
    print(f"policy-task evaluations per minute: model {result['model_evals_per_min']:.1f}, proxy "
          f"{result['proxy_evals_per_min']:.1f} ({result['speedup']:.0f}x)")
    write_result(args.out or RESULTS / f"fidelity-{args.model}-{args.suite}.json", result, measures=MEASURES)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
