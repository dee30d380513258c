"""The proxy re-scored on finished searches: ``python -m bench.fidelity_runs RUN_DIR [RUN_DIR ...]``.

Every policy a search evaluated with the model on all its train tasks (experts, every setting the
experts' tuning ran, every promoted parameter set) is predicted again by the zero-forward proxy
from the run's own stored ``full`` and ``drop_evidence`` controls: no model call, only the
tokenizer. Per run and over all runs: the Spearman rank correlation and the mean absolute error
between predicted and model train pass rates, for the proxy's rule (``evals.cache.fidelity``: one attended
copy of the answer is enough, a baseline's summary that mentions it included; every hop is needed)
and for the rules before it (summaries ignored; every evidence message needed), so a change of rule
is judged on the policies real searches sent to the model.

Prints a table and writes ``bench/results/fidelity-runs.json``. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench import write_result
from engine.errors import AKVError
from evals.cache.evaluator import DIAGNOSTIC, EvalConfig, PolicySpec, TaskResult, result_from_row
from evals.cache.fidelity import DryEngine, EvidenceTable, ProxyReplay, spearman
from evals.tasks import load_suite, select_tasks
from evals.tasks.schema import Task
from rsi.cache.export import load_archive
from rsi.cache.metrics import aggregate
from rsi.rundir import RunDir

MEASURES = ["evals/cache", "bench/fidelity_runs.py"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""

OUT = Path("bench/results/fidelity-runs.json")


class CopiesAndHops(EvidenceTable):
    """The rule before summaries counted: copies and hops, a baseline's summary ignored."""

    def predict(self, task: Task, index: int, dropped: set[int], summary: str | None = None) -> bool:
        return super().predict(task, index, dropped)


class EveryEvidence(EvidenceTable):
    """The rule before copies and hops: a probe is without evidence once any evidence message is gone."""

    def predict(self, task: Task, index: int, dropped: set[int], summary: str | None = None) -> bool:
        outcome = self.outcomes[(task.id, index)]
        return outcome.dropped if set(task.probes[index].evidence_ids) & dropped else outcome.kept


RULES = {"current": "today's rule", "copies_and_hops": "summaries ignored", "every_evidence": "every message needed"}


def run_policies(run: Path, train: list[Task]) -> tuple[dict[str, list[TaskResult]], list[tuple[PolicySpec, float]]]:
    """The run's controls and every (spec, model train pass) evaluated on all of ``train`` (the
    experts, the main search's programs and the ablation arms' programs; a row whose rebuilt spec
    does not hash to its recorded key is left out)."""
    controls, policies = run_policy_results(run, train)
    return controls, [(spec, aggregate(results).pass_rate) for spec, results in policies]


def run_policy_results(run: Path, train: list[Task]) -> tuple[dict[str, list[TaskResult]],
                                                               list[tuple[PolicySpec, list[TaskResult]]]]:
    """:func:`run_policies` with each policy's per-task results (in ``train``'s order) instead of its pass rate."""
    ids = {t.id for t in train}
    by: dict[tuple[str, str, str], dict[str, TaskResult]] = defaultdict(dict)
    for line in (run / "evaluations.jsonl").read_text().splitlines():
        row = json.loads(line)["row"]
        if row["split"] == "train" and row["ok"] and row["task_id"] in ids:
            by[(row["policy"], row["policy_key"], row["params"])][row["task_id"]] = result_from_row(row)
    archive = load_archive(run)
    family = {c.label: c.spec for c in archive.candidates if c.expert}
    program = {c.label: c.program for c in archive.candidates if not c.expert} | arm_programs(run)
    controls: dict[str, list[TaskResult]] = {}
    out = []
    for (label, key, params), results in by.items():
        if len(results) < len(train):
            continue  # pruned after the first fidelity's tasks
        ordered = [results[t.id] for t in train]
        if label in ("expert:full", DIAGNOSTIC):
            controls[label] = ordered
            continue
        if label.startswith("expert:") and label in family:
            spec = PolicySpec(family[label], json.loads(params))
        elif label in program:
            source = (run / "programs" / f"{program[label]}.py").read_text()
            spec = PolicySpec("program", json.loads(params), source=source, label=label)
        else:
            continue
        if spec.key == key:
            out.append((spec, ordered))
    return controls, out


def arm_programs(run: Path) -> dict[str, str]:
    """Label -> program hash of the ablation arms' candidates (``ablation.json``; empty without one)."""
    path = run / "ablation.json"
    if not path.exists():
        return {}
    found: dict[str, str] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("label"), str) and isinstance(node.get("program"), str) and not node.get("expert"):
                found.setdefault(node["label"], node["program"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(json.loads(path.read_text()))
    return found


def _scores(model: list[float], predicted: list[float]) -> dict[str, float]:
    mae = sum(abs(a - b) for a, b in zip(model, predicted, strict=True)) / len(model) if model else float("nan")
    return {"spearman": spearman(predicted, model), "mae": mae}


def rescore(run: Path, engine: DryEngine) -> dict[str, Any]:
    """One run's policies predicted under both rules (module docstring)."""
    config = RunDir(run).cache_config
    train = select_tasks(load_suite(config.data.suite, "train"), config.data.train_tasks)
    controls, policies = run_policies(run, train)
    full, dropped = controls["expert:full"], controls[DIAGNOSTIC]
    eval_config = EvalConfig(generate=False)
    table = EvidenceTable.fit(full, dropped)
    rules = {"current": table, "copies_and_hops": CopiesAndHops(table.outcomes),
             "every_evidence": EveryEvidence(table.outcomes)}
    model = [m for _, m in policies]
    predicted = {name: [aggregate(ProxyReplay(engine, table, eval_config).evaluate_many(spec, train)).pass_rate
                        for spec, _ in policies] for name, table in rules.items()}
    return {"run": str(run), "policies": len(policies), "model": model, "predicted": predicted,
            "scores": {name: _scores(model, p) for name, p in predicted.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    rows = []
    engines: dict[tuple[str, str], DryEngine] = {}
    for run in args.runs:
        try:
            judge = RunDir(run).cache_config.model
            key = (judge.name, judge.template)
            engine = engines.get(key) or engines.setdefault(key, DryEngine.load(*key))
            rows.append(rescore(run, engine))
        except (AKVError, KeyError, TypeError) as err:
            detail = f"no {err} in its store or config" if isinstance(err, KeyError) else str(err)
            ap.error(f"{run} is not a finished cache-policy search run with the cascade ({detail})")
    model = [m for r in rows for m in r["model"]]
    pooled = {name: _scores(model, [p for r in rows for p in r["predicted"][name]]) for name in RULES}
    print("Spearman and mean absolute error of the predicted train pass rate, per rule: "
          + "; ".join(f"{name} ({what})" for name, what in RULES.items()))
    print(f"{'run':28s} {'policies':>8s}  " + "  ".join(f"{name[:16]:>16s} rho / MAE" for name in RULES))
    for r in [*rows, {"run": "all", "policies": len(model), "scores": pooled}]:
        s = r["scores"]
        print(f"{str(r['run'])[-28:]:28s} {r['policies']:8d}  "
              + "  ".join(f"{s[name]['spearman']:>20.3f} / {s[name]['mae']:.3f}" for name in RULES))
    write_result(args.out, {"runs": rows, "pooled": pooled,
                            "command": "python -m bench.fidelity_runs " + " ".join(map(str, args.runs))},
                 measures=MEASURES)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
