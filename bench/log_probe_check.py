"""A search on agent logs, checked with probes: ``python -m bench.log_probe_check RUN_DIR --suite SUITE --split SPLIT``

When the log file a search ran on was made from a task suite with its probes removed (each session id
is the task's id with ``/`` written as ``-``, as the notebook's log was made (docs/notebook.md)), the frozen picks
(``pick.json``) are evaluated again on the same held-out conversations with their probes, by the run's
model, template and frame guard: how well the fidelity the search judged by agreed with the probes.
Writes ``bench/results/log-search-<run>-probe-check.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

from bench import RESULTS, write_result
from engine.engine import Engine
from evals.cache.evaluator import PolicySpec, evaluate
from evals.paired import pair_results, paired_bootstrap
from evals.tasks import load_suite
from rsi.cache.export import load_archive, spec_of
from rsi.rundir import RunDir, read_json

MEASURES = ["engine", "evals/cache"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path)
    p.add_argument("--suite", required=True, help="the suite the log was made from")
    p.add_argument("--split", default="train")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    run = args.run_dir
    pick = read_json(run / "pick.json", dict)
    config = RunDir(run).cache_config
    by_id = {t.id.replace("/", "-"): t for t in load_suite(args.suite, args.split)}
    missing = [i for i in pick["heldout_tasks"] if i not in by_id]
    if missing:
        raise SystemExit(f"bench.log_probe_check: {missing[0]} is not a task of {args.suite}/{args.split}")
    tasks = [by_id[i] for i in pick["heldout_tasks"]]
    archive = {c.id: c for c in load_archive(run).candidates}
    specs = []
    for entry in pick["picks"]:
        if entry["id"] in archive:
            specs.append(spec_of(run, archive[entry["id"]]))
        elif entry["spec"] == "program":
            source = (run / "programs" / f"{entry['program_sha256']}.py").read_text()
            specs.append(PolicySpec("program", entry["params"], source=source, label=entry["label"]))
        else:
            specs.append(PolicySpec(entry["spec"], entry["params"], label=entry["label"]))
    eng = Engine.from_pretrained(config.model.name, template=config.model.template,
                                 dtype=getattr(torch, config.dtype))
    results = evaluate(eng, specs, tasks, config.eval_config())
    by = {s.display: [r for r in results if r.policy == s.display] for s in specs}
    out: dict[str, Any] = {"run": str(run), "suite": args.suite, "tasks": [t.id for t in tasks],
                           "judge": f"probes: {config.model.name} {config.dtype}, {config.eval.scoring}, frame guard "
                                    f"{config.eval.frame_guard}", "policies": {}, "comparisons": [],
                           "command": "python -m bench.log_probe_check " + " ".join(argv or sys.argv[1:])}
    for label, rs in by.items():
        probes = [q for r in rs for q in r.probes]
        out["policies"][label] = {"pass_rate": sum(q.passed for q in probes) / max(1, len(probes)),
                                  "probes": len(probes), "cost_cents_mean": sum(r.cost_cents for r in rs) / len(rs)}
        print(f"{label}: probe pass {out['policies'][label]['pass_rate']:.3f} over {len(probes)} probes, cost "
              f"{out['policies'][label]['cost_cents_mean']:.4f}c")
    for chosen in (e["label"] for e in pick["picks"] if e["role"] != "comparator"):
        for other in (x for x in by if x != chosen):
            d = paired_bootstrap(pair_results(by[chosen], by[other]))
            out["comparisons"].append({"policy": chosen, "versus": other, "cost_delta_pct": d.cost_delta_pct,
                                       "pass_delta": d.pass_delta, "pass_delta_ci95": list(d.pass_delta_ci95)})
    write_result(args.out or RESULTS / f"log-search-{run.name}-probe-check.json", out, measures=MEASURES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
