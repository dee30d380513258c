"""BFCL turns as probes: how many turns have evidence, and what the cache could save, with no model run.
``python -m bench.bfcl_evidence [--suite bfcl-base] [--split train] [--model qwen2.5-coder-1.5b]``.

Per suite and split (both of each by default): tasks, turns, turns with evidence (an earlier tool
output alone holds an argument value of the turn's gold calls: ``evals.bfcl.evidence``), evidence
outputs per such turn, tool outputs per task, and the turns where the ``drop_other`` control finds
fewer non-evidence outputs than the evidence (``evals.bfcl.controls``). On each suite's train split,
the headroom by the project's accounting (``evals.bfcl.headroom``: the full cache, the
evidence-keeping schedule, the oracle's starting point, rolling drop K=12 and K=4; costs at
``--rates`` with ``--model``'s tokenizer and template, never its weights): **cost only, the pass is
not measured (it needs the model and the judge)**.

Prints the tables and writes ``bench/results/bfcl-evidence.json``. Not a timed test.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Sequence
from typing import Any

from bench import RESULTS, write_result
from evals.bfcl.controls import turn_drops
from evals.bfcl.data import BFCL_VERSION, SPLIT_RULE, SUITES, load_bfcl_suite
from evals.bfcl.evidence import MIN_CHARS, TurnEvidence, turn_evidence
from evals.bfcl.headroom import suite_headroom
from evals.cache.evaluator import OTHER_CONTROL, EvalConfig
from evals.cache.fidelity import DryEngine
from evals.tasks.schema import Task

MEASURES = ["evals/bfcl", "evals/cache", "engine"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""
SPLITS = ("train", "heldout")
NOTE = "cost by the project's accounting, pass not measured (needs the model)"


def counts(tasks: Sequence[Task], evidence: Sequence[Sequence[TurnEvidence]]) -> dict[str, Any]:
    """The evidence counts of one suite and split (module docstring)."""
    turns = [t for ev in evidence for t in ev]
    with_ev = [t for t in turns if t.has_evidence]
    other = [d for ev in evidence for d in turn_drops(OTHER_CONTROL, ev)]
    outputs = [sum(m["role"] == "tool" for m in t.messages) for t in tasks]
    return {"tasks": len(tasks), "turns": len(turns), "turns_with_evidence": len(with_ev),
            "turns_with_evidence_share": len(with_ev) / len(turns) if turns else None,
            "tasks_with_evidence": sum(any(t.has_evidence for t in ev) for ev in evidence),
            "evidence_per_turn_mean": statistics.fmean(len(t.evidence_ids) for t in with_ev) if with_ev else None,
            "evidence_per_turn_max": max((len(t.evidence_ids) for t in with_ev), default=0),
            "values_per_turn_mean": statistics.fmean(len(t.matches) for t in with_ev) if with_ev else None,
            "tool_outputs_per_task_mean": statistics.fmean(outputs) if outputs else None,
            "drop_other_short_turns": sum(d.short > 0 for d in other),
            "drop_other_empty_turns": sum(not d.dropped for d in other),
            "evidence": {task.id: [t.to_dict() for t in ev if t.has_evidence]
                         for task, ev in zip(tasks, evidence) if any(t.has_evidence for t in ev)}}


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def print_counts(rows: Sequence[tuple[str, str, dict[str, Any]]]) -> None:
    print(f"{'suite':10s} {'split':8s} {'tasks':>6s} {'turns':>6s} {'with evidence':>15s} {'evidence/turn':>14s} "
          f"{'outputs/task':>13s} {'drop_other short (none)':>24s}")
    for suite, split, c in rows:
        share = c["turns_with_evidence_share"]
        print(f"{suite:10s} {split:8s} {c['tasks']:6d} {c['turns']:6d} "
              f"{c['turns_with_evidence']:6d} ({_num(None if share is None else 100 * share, '4.1f')}%) "
              f"{_num(c['evidence_per_turn_mean'], '14.2f')} {_num(c['tool_outputs_per_task_mean'], '13.2f')} "
              f"{c['drop_other_short_turns']:17d} ({c['drop_other_empty_turns']})")


def print_headroom(suite: str, h: dict[str, Any]) -> None:
    print(f"\n{suite} train, {h['tasks']} tasks, {h['evidence_turns']} turns with evidence: {NOTE}")
    print(f"{'schedule':20s} {'cost (c)':>10s} {'saving vs full':>15s} {'evidence attended':>18s}")
    for r in h["rows"]:
        share = r["evidence_turns_attended_share"]
        print(f"{r['schedule']:20s} {r['cost_cents']:10.3f} {r['saving_vs_full_pct']:14.1f}% "
              f"{r['evidence_turns_attended']:8d} ({_num(None if share is None else 100 * share, '5.1f')}%)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=list(SUITES), action="append", help="a BFCL suite (default: both)")
    ap.add_argument("--split", choices=SPLITS, action="append", help="a split (default: both)")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="whose tokenizer counts the tokens (no weights)")
    ap.add_argument("--template", default="chatml")
    ap.add_argument("--rates", default="gpt-oss-120b")
    ap.add_argument("--no-headroom", action="store_true", help="the evidence counts only (no tokenizer)")
    ap.add_argument("--out", default=str(RESULTS / "bfcl-evidence.json"))
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    suites, splits = args.suite or list(SUITES), args.split or list(SPLITS)

    dry = None if args.no_headroom else DryEngine.load(args.model, args.template)
    config = EvalConfig(rates=args.rates, generate=False)
    rows: list[tuple[str, str, dict[str, Any]]] = []
    out: dict[str, dict[str, Any]] = {}
    for suite in suites:
        out[suite] = {}
        for split in splits:
            tasks = load_bfcl_suite(suite, split)
            c = counts(tasks, [turn_evidence(t) for t in tasks])
            if dry is not None and split == "train":
                c["headroom"] = {"note": NOTE, **suite_headroom(tasks, dry, config).to_dict()}
            out[suite][split] = c
            rows.append((suite, split, c))
    print_counts(rows)
    for suite in suites:
        if "headroom" in out[suite].get("train", {}):
            print_headroom(suite, out[suite]["train"]["headroom"])
    write_result(args.out, {
        "rule": f"an earlier tool output (before the turn's request) holding, as a whole word (case-sensitive), a "
                f"literal argument value of the turn's gold calls (strings; numbers as str(); booleans and values "
                f"under {MIN_CHARS} characters skipped) that no system prompt, tool spec, user message up to the "
                f"turn, earlier assistant message or earlier output of the turn's own calls holds",
        "bfcl_version": BFCL_VERSION, "split_rule": SPLIT_RULE, "tokenizer": None if dry is None else args.model,
        "template": args.template, "rates": args.rates, "suites": out}, measures=MEASURES)


if __name__ == "__main__":
    main()
