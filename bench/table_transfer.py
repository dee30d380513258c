"""Does a probe-blind rule table learned on train carry over to held-out?
``python -m bench.table_transfer --suite horizon --train 30 --heldout-offset 96 --heldout 24 [--model M]``.

The rule table (``evals.cache.table_bound``: keep a message for good or drop it once read by its
role, tool and length) is chosen on the first ``--train`` train tasks, with every probe assumed
passed by the full cache (a calibrated suite's design; no model run on train, as guide tasks), both
with tools told apart and by role and length only. Each table is then run on the held-out tasks
(cells it never saw are kept), beside the table chosen with hindsight on those held-out tasks
themselves. Without ``--model`` every number is *predicted* by the evidence rule (exact costs,
a probe passes when its evidence is attended); with ``--model`` the held-out rows are the model's
(its full-cache result gives the required probes). A row's cost against the tuned seed and evolved
choices of earlier runs is for the reader to put beside it: this script knows no run.

Prints a table and writes ``bench/results/table-transfer-<suite>.json``. Not a timed test.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from bench import RESULTS, write_result
from evals.cache.evaluator import EvalConfig, PolicySpec, Replay, TaskResult
from evals.cache.fidelity import DryEngine, EvidenceTable, ProxyReplay
from evals.cache.oracle import failing, required_probes
from evals.cache.table_bound import apply_table, choose_table
from evals.tasks import load_suite, select_tasks
from evals.tasks.schema import Task

MEASURES = ["engine", "evals/cache"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""


def _row(name: str, tasks: list[Task], fulls: list[TaskResult], results: tuple[TaskResult, ...],
         fidelity: str, kept: list[str]) -> dict[str, Any]:
    probes = [p for r in results for p in r.probes]
    need = sum(len(required_probes(f)) for f in fulls)
    lost = sum(len(failing(r, required_probes(f))) for r, f in zip(results, fulls))
    return {"table": name, "fidelity": fidelity, "cost_cents": sum(r.cost_cents for r in results),
            "full_cost_cents": sum(f.cost_cents for f in fulls), "pass_rate": sum(p.passed for p in probes)
            / max(1, len(probes)), "required_probes": need, "required_lost": lost, "kept": kept,
            "tasks": [t.id for t in tasks]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="horizon")
    ap.add_argument("--train", type=int, default=30, help="train tasks the tables are chosen on")
    ap.add_argument("--heldout", type=int, default=24)
    ap.add_argument("--heldout-offset", type=int, default=96)
    ap.add_argument("--model", default=None, help="run the held-out rows with this model (else predicted)")
    ap.add_argument("--template", default="plain")
    ap.add_argument("--rates", default="gpt-oss-120b")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

    every = load_suite(args.suite, None)
    train = select_tasks([t for t in every if t.split == "train"], args.train)
    held = select_tasks([t for t in every if t.split == "heldout"], args.heldout, args.heldout_offset)
    config = EvalConfig(rates=args.rates, scoring="loglik", generate=False)
    dry = DryEngine.load(args.model or "gemma-3-270m", args.template)
    assumed = ProxyReplay(dry, EvidenceTable.assumed(train + held), config)

    def tokens(task: Task) -> list[int]:
        return dry.render(list(task.messages)).message_tokens

    def coster(spec: PolicySpec, task: Task) -> float:
        return assumed.cost(spec, task).cents

    full = PolicySpec("full", label="full")
    train_fulls = [assumed.evaluate(full, t) for t in train]
    if args.model:
        from engine.engine import Engine

        replay = Replay(Engine.from_pretrained(args.model, template=args.template), config)
        judge, fidelity = replay.evaluate, "model"
    else:
        judge, fidelity = assumed.evaluate, "predicted (evidence rule)"
    held_fulls = [judge(full, t) for t in held]
    rows = [_row("full cache", held, held_fulls, tuple(held_fulls), fidelity, [])]
    for tools, what in ((True, "role, tool, length"), (False, "role, length")):
        choice = choose_table(train, train_fulls, coster, tokens, tools=tools)
        out = apply_table(choice, held, held_fulls, judge, tokens)
        rows.append(_row(f"chosen on {len(train)} train tasks: {what}", held, held_fulls, out.results, fidelity,
                         [str(c) for c in sorted(choice.kept)]))
    hind = choose_table(held, held_fulls, coster, tokens)
    out = apply_table(hind, held, held_fulls, judge, tokens, hindsight=True)
    rows.append(_row("hindsight on these held-out tasks: role, tool, length", held, held_fulls, out.results,
                     fidelity, [str(c) for c in sorted(hind.kept)]))

    print(f"{args.suite}: {len(held)} held-out tasks after {args.heldout_offset}; tables chosen on {len(train)} train "
          f"tasks; held-out rows: {fidelity}")
    print(f"{'table':58s} {'cost (c)':>9s} {'vs full':>8s} {'pass':>6s} {'required lost':>14s}")
    for r in rows:
        print(f"{r['table']:58s} {r['cost_cents']:9.3f} {100 * (r['cost_cents'] / r['full_cost_cents'] - 1):+7.1f}% "
              f"{r['pass_rate']:6.3f} {r['required_lost']:>6d} of {r['required_probes']:<4d}")
    name = f"table-transfer-{args.suite}{'-' + args.model if args.model else ''}.json"
    write_result(RESULTS / name, {"suite": args.suite, "train_tasks": [t.id for t in train],
                                  "heldout_offset": args.heldout_offset, "model": args.model, "rows": rows},
                 measures=MEASURES)


if __name__ == "__main__":
    main()
