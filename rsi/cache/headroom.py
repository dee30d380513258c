"""The headroom of a search on its held-out tasks (``oracle.heldout``): how much of what could be won it won.

On every held-out task, with the model: the hindsight oracle and the rolling-drop bounds
(``evals.cache.headroom``, through the search's executor and store), beside the full cache, the
tuned seed program and the best evolved policy. The *tuned seed* is the tuning-only arm's choice
when the search ran it (``rsi.cache.ablation``), else the cheapest generation-0 seed candidate that
matches the full cache on train (else the most accurate); the *best evolved* is the headline's
choice against it (the cheapest evolved candidate that matches it on train). Then::

    share of the headroom captured = (tuned seed cost - evolved cost) / (tuned seed cost - oracle cost)

over the summed costs of the held-out tasks (``None`` when the oracle is not cheaper than the tuned
seed), and the same against the probe-blind rule table chosen with hindsight
(``evals.cache.table_bound``; ``share_of_table_gap``): the oracle knows the evidence message, the
table only which kinds of message (role, tool, length) matter on these tasks. Every number is the
model's; the costs are exact. ``oracle_check`` lists every stored held-out result of any policy
in the run that passes each probe the full cache passes at less cost than the oracle (a schedule
the oracle missed; the search's own store is the independent witness).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from evals.cache.evaluator import PolicySpec, TaskResult, result_from_row
from evals.cache.headroom import measure_headroom
from evals.cache.oracle import OracleConfig, violations
from evals.paired import PairingError, pair_results, paired_bootstrap
from evals.tasks.schema import Task
from rsi.cache.ablation import ARM
from rsi.cache.archive import Archive, Candidate
from rsi.cache.config import SearchConfig
from rsi.cache.evaluations import Evaluations
from rsi.cache.headline import TrainMatch, choose_on_train
from rsi.cache.metrics import aggregate
from rsi.rundir import RunDir

HEADROOM_FILE = "headroom.json"


def tuned_seed(archive: Archive, match: TrainMatch) -> Candidate | None:
    """The tuned seed program of ``archive`` the share is measured from (module docstring)."""
    arm = next((c for c in archive.candidates if c.proposer == ARM and c.expert), None)
    if arm is not None:
        return arm
    full = next((c for c in archive.candidates if c.expert and c.spec == "full" and c.train is not None), None)
    seeds = [c for c in archive.scored() if c.generation == 0 and c.proposer == "seed"]
    if full is None or not seeds:
        return None
    picked = choose_on_train(seeds, full, match)
    return picked[0] if picked else None


def _paired(a: list[TaskResult], b: list[TaskResult], samples: int, seed: int) -> dict[str, Any] | None:
    try:
        d = paired_bootstrap(pair_results(a, b), samples=samples, seed=seed)
    except PairingError:
        return None
    return {"cost_delta_pct": d.cost_delta_pct, "cost_delta_ci95": list(d.cost_delta_ci95), "pass_delta": d.pass_delta,
            "pass_delta_ci95": list(d.pass_delta_ci95), "tasks": d.n_tasks, "significant": d.significant}


def measure_search_headroom(config: SearchConfig, archive: Archive, evals: Evaluations, files: RunDir,
                            say: Callable[[str], None]) -> dict[str, Any]:
    """Measure on ``evals``' held-out tasks and write ``headroom.json`` in ``files``; returns the
    summary that ``headline.json`` carries."""
    cfg = config
    tasks = evals.heldout

    def judge(spec: PolicySpec, task: Task) -> TaskResult:
        return evals.evaluate(spec, [task])[0]

    o = cfg.oracle
    evals.progress.replan(len(tasks) * (o.budget + o.bound_budget + o.single_budget + 1))  # (at most; not in the plan)
    h = measure_headroom(tasks, judge, evals.dry_engine(), evals.eval_config, OracleConfig(budget=o.budget),
                         bound_budget=o.bound_budget, single_budget=o.single_budget,
                         on_task=lambda t: say(f"  headroom {t.task.id}: full {t.full.cost_cents:.4f}c, oracle "
                                               f"{t.oracle.cost_cents:.4f}c ({t.oracle.method}), rolling per "
                                               f"task {t.rolling.result.cost_cents:.4f}c"))
    match = TrainMatch(evals.train_results, cfg.bootstrap_samples, cfg.seed)
    seed = tuned_seed(archive, match)
    evolved = None
    if seed is not None:
        picked = choose_on_train(archive.scored(), seed, match)
        evolved = picked[0] if picked else None
    rows: dict[str, list[TaskResult]] = {"full": [t.full for t in h.tasks],
                                         "per_task_rolling": [t.rolling.result for t in h.tasks],
                                         "single_rolling": list(h.single.results),
                                         "oracle": [t.oracle.result for t in h.tasks]}
    if h.table is not None:
        rows["rule_table"] = list(h.table.results)
    for name, c in (("tuned_seed", seed), ("evolved", evolved)):
        if c is not None:
            rows[name] = evals.evaluate(evals.candidate_spec(c), tasks)
    costs = {k: sum(r.cost_cents for r in v) for k, v in rows.items()}
    passes = {k: aggregate(v).pass_rate for k, v in rows.items()}
    share = _share(costs, "oracle")
    table_share = _share(costs, "rule_table")
    samples, bseed = cfg.bootstrap_samples, cfg.seed
    # every stored held-out result of any policy that passes what the full cache passes at less cost than
    # the oracle is a schedule the oracle missed (an independent check over the store)
    ids = {t.id for t in tasks}
    stored = [result_from_row(r) for r in evals.store.rows() if r["task_id"] in ids and r["ok"]]
    missed = violations([t.oracle for t in h.tasks], stored)
    summary = {
        "tasks": len(tasks), "costs_cents": costs, "pass_rates": passes, "share_captured": share,
        "share_of_table_gap": table_share,
        "rule_table": ({"kept": [str(c) for c in h.table.kept], "tasks_failing": list(h.table.tasks_failing)}
                       if h.table is not None else None),
        "tuned_seed": {"label": seed.label, "id": seed.id, "reason": seed.reason} if seed else None,
        "evolved": {"label": evolved.label, "id": evolved.id} if evolved else None,
        "evolved_vs_oracle": _paired(rows["evolved"], rows["oracle"], samples, bseed) if evolved else None,
        "per_task_rolling_vs_single": h.gap(samples, bseed),
        "single_rolling_params": h.single.params,
        "model_evaluations": h.to_dict()["model_evaluations"],
        "oracle_check": {"stored_results": len(stored), "cheaper_than_the_oracle": [v.__dict__ for v in missed]},
    }
    files.write(HEADROOM_FILE, {"summary": summary, **h.to_dict(samples, bseed)})
    if share is not None:
        say(f"headroom on {len(tasks)} held-out tasks: tuned seed {costs['tuned_seed']:.3f}c, evolved "
            f"{costs['evolved']:.3f}c, oracle {costs['oracle']:.3f}c: {100 * share:.0f}% of the headroom captured")
    if table_share is not None:
        say(f"  rule table (role, tool, length; hindsight) {costs['rule_table']:.3f}c: "
            f"{100 * table_share:.0f}% of the tuned seed's gap to it captured")
    return summary


def _share(costs: dict[str, float], bound: str) -> float | None:
    """(tuned seed - evolved) / (tuned seed - bound), or ``None`` when a cost is missing or the bound is
    not cheaper than the tuned seed."""
    if not {"tuned_seed", "evolved", bound} <= set(costs) or costs["tuned_seed"] <= costs[bound]:
        return None
    return (costs["tuned_seed"] - costs["evolved"]) / (costs["tuned_seed"] - costs[bound])
