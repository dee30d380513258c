"""``akv eval`` and ``akv live`` on ``--suite bfcl-base|bfcl-long``: turn by turn, BFCL's checker.

``akv eval`` (:func:`run_bfcl_eval`) replays the gold history before each turn in process, judging
``--batch`` (policy, task) jobs at once with their replies decoded in shared steps (default 8; 1:
one at a time); ``akv live`` (:func:`run_bfcl_live`) lets the model act through an endpoint
(:mod:`evals.bfcl.live`).
Both print turn accuracy, task accuracy and retention with 95% intervals per policy (and per
category; ``akv eval`` also on the turns with evidence, :mod:`evals.bfcl.evidence`), naming the
model and judge, and write them with every task's turns to ``--out``; both record each (policy,
task) result as it finishes, and the same command run again resumes.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tqdm import tqdm

from engine.decode import GENERATE_BATCH
from engine.errors import AKVError
from engine.files import atomic_write
from evals.bfcl.data import BFCL_VERSION, SPLIT_RULE
from evals.bfcl.evidence import evidence_turns
from evals.bfcl.judge import JudgeConfig, judge
from evals.bfcl.report import summarize, table
from evals.bfcl.store import ResultLog
from evals.cache.cli import Selection, fill_eval_defaults, load_tasks, policy_specs, read_program_file
from evals.cache.evaluator import CONTROLS, PolicySpec
from evals.tasks import select_tasks

JUDGE = (f"BFCL multi-turn checker (bfcl-eval=={BFCL_VERSION}: state_checker and response_checker per turn, "
         "gold history before each turn)")
LIVE_JUDGE = (f"BFCL multi-turn checker (bfcl-eval=={BFCL_VERSION}: state_checker and response_checker per turn, "
              "the model's own calls carrying the state from turn to turn)")


def run_bfcl_eval(args: argparse.Namespace, params: dict[str, Any], picked: PolicySpec | None = None) -> int:
    """``akv eval`` on a BFCL suite (see the module docstring).

    Finished (policy, task) results go to ``OUT.partial.jsonl`` as they finish; the same command run
    again takes them from there (``--force`` starts over; ``--batch`` may differ, it is not part of
    the run's identity: :func:`evals.bfcl.judge.judge`), and the file goes once ``OUT`` is written.
    ``--weights`` and ``--batch`` are recorded in the results, ``--weights`` in the partial file's
    header too.

    Raises:
        AKVError: options that do not apply to BFCL (``--frame-guard``), ``--batch`` below 1, an
            existing ``--out`` without ``--force``, a partial file of another run (naming what
            differs), and what :func:`evals.cache.cli.policy_specs` and
            :func:`evals.cache.cli.load_tasks` raise (bfcl-eval missing: one line naming ``make bfcl``).
    """
    import torch

    from engine.engine import Engine

    fill_eval_defaults(args)
    if getattr(args, "frame_guard", False):
        raise AKVError("--frame-guard does not apply to the BFCL suites", field="frame_guard", value=True)
    batch = GENERATE_BATCH if getattr(args, "batch", None) is None else args.batch
    if not isinstance(batch, int) or batch < 1:
        raise AKVError(f"--batch must be an integer >= 1, got {batch!r}", field="batch", value=batch)
    out = Path(args.out or "eval-results.json")
    if out.is_dir():
        raise AKVError(f"--out {out} is a directory; give a file name such as {out / 'results.json'}", field="out",
                       value=str(out))
    if out.exists() and not getattr(args, "force", False):
        raise AKVError(f"{out} exists: give another --out, or --force to overwrite it", field="out", value=str(out))
    program = read_program_file(args.program) if getattr(args, "program", None) and picked is None else None
    specs = policy_specs(args, params, picked, program)
    turns = getattr(args, "turns", "all")
    if turns == "all":
        selection = load_tasks(args.suite, args.split, args.limit, args.offset)
    else:  # the tasks with a turn to answer, then --limit and --offset among them
        every = load_tasks(args.suite, args.split)
        having = [t for t in every.tasks if evidence_turns(t)]
        if args.offset >= len(having):
            raise AKVError(f"--offset {args.offset} leaves no task: {len(having)} tasks of {args.suite} "
                           f"({every.split}) have a turn with evidence", field="offset", value=args.offset)
        selection = Selection(select_tasks(having, args.limit, args.offset), every.split)
    dtype = getattr(args, "dtype", None) or "float32"
    weights = getattr(args, "weights", None) or "dense"
    engine = Engine.from_pretrained(args.model, template=args.template, dtype=getattr(torch, dtype), weights=weights)
    config = JudgeConfig(tool_choice=getattr(args, "tool_choice", "auto"), turns=turns)
    partial = out.with_name(out.name + ".partial.jsonl")
    if getattr(args, "force", False):
        partial.unlink(missing_ok=True)
    log = ResultLog(partial, {"suite": args.suite, "split": selection.split, "model": args.model, "dtype": dtype,
                              "weights": weights, "template": engine.renderer.template.name, "judge": JUDGE,
                              "config": asdict(config), "policies": {s.display: s.key for s in specs}})
    print(f"{args.suite} ({selection.split}, {len(selection.tasks)} tasks; split: {SPLIT_RULE}); model {args.model} "
          f"{dtype} ({weights} weights), template {engine.renderer.template.name}; {batch} jobs at once; "
          f"judge: {JUDGE}", flush=True)
    if len(log):
        print(f"resuming: {len(log)} finished results from {partial}", flush=True)
    bar = tqdm(total=len(selection.tasks) * len(specs), desc="judging", unit="task")
    results = judge(engine, selection.tasks, specs, config, on_result=lambda r: bar.update(1), log=log,
                    batch_size=batch)
    bar.close()
    evidence = {t.id: evidence_turns(t) for t in selection.tasks}
    rows = summarize(results, [s.display for s in specs], evidence)
    for line in table(rows):
        print(line)
    if config.turns != "all":
        print(f"--turns {config.turns}: only those turns were answered, so 'task acc' is over them, not BFCL's "
              "task accuracy")
    for row in rows:
        if row["failed"]:
            print(f"{row['policy']}: {row['failed']} of {row['tasks']} tasks failed (no score), "
                  f"e.g. {row['errors'][0]}")
    payload = {"suite": args.suite, "split": selection.split, "split_rule": SPLIT_RULE, "model": args.model,
               "dtype": dtype, "weights": weights, "template": engine.renderer.template.name, "judge": JUDGE,
               "config": asdict(config), "batch": batch,
               "policies": rows, "tasks": [r.to_row() for r in results]}
    atomic_write(out, json.dumps(payload, indent=1, default=str).encode())
    partial.unlink()  # every result is in ``out`` now
    print(f"results: {out.resolve()}")
    return 0


def run_bfcl_live(args: argparse.Namespace, params: dict[str, Any], picked: PolicySpec | None = None,
                  frame_guard: bool = False) -> int:
    """``akv live`` on a BFCL suite: one episode per task against ``--endpoint``, each request with the
    policy's schedule (:class:`evals.cache.served.CountedPolicy`, the served model's token counts, under
    the frame guard where the run had one), every turn judged by BFCL's checker. ``--max-steps`` is
    replies per turn. Prints per policy turn and task accuracy with 95% intervals, calls, invalid calls
    and cost; writes ``RUN_DIR/live.json`` (or ``--out``) and the episodes as OpenAI logs and ATIF.
    A rerun with the same ``--run-dir`` resumes (:func:`evals.bfcl.live.run_bfcl_live`).

    Raises:
        AKVError: ``--probes`` other than 1, bfcl-eval missing (one line naming ``make bfcl``), a policy
            that cannot be served (a text baseline, a control), ``RUN_DIR`` of another run, an unreachable endpoint.
    """
    from engine.remote import RemoteEngine
    from engine.settings import settings
    from evals.bfcl.export import export_episodes
    from evals.bfcl.live import BfclLiveConfig, live_summary
    from evals.bfcl.live import run_bfcl_live as play
    from evals.cache.served import CountedPolicy, ReplayPolicy

    if args.probes != 1:
        raise AKVError(f"--probes does not apply to the BFCL suites (one episode per task), got {args.probes}",
                       field="probes", value=args.probes)
    if getattr(args, "concurrency", 1) != 1:
        raise AKVError(f"--concurrency does not apply to the BFCL suites yet (their episodes run one at a time), "
                       f"got {args.concurrency}", field="concurrency", value=args.concurrency)
    if picked is None and "," in str(args.policy):
        raise AKVError(f"the BFCL suites take one --policy per invocation, got {args.policy!r}",
                       field="policy", value=args.policy)
    config = BfclLiveConfig(max_steps=args.max_steps, max_tokens=args.max_tokens, tool_choice=args.tool_choice,
                            rates=args.rates)
    tasks = load_tasks(args.suite, args.split, args.limit).tasks
    if picked is not None:
        spec, label = picked, re.sub(r"[^A-Za-z0-9_.=-]+", "-", picked.display).strip("-")
    else:
        spec = PolicySpec(args.policy, params)
        label = args.policy + "".join(f"-{k}={v}" for k, v in sorted(params.items()))
    if spec.name in CONTROLS:
        raise AKVError(f"{spec.name} is a control of akv eval (each turn after the gold history, its evidence "
                       "mapped there); akv live plays the model's own calls", field="policy", value=spec.name)
    policy = spec.build() if spec.name != "full" or spec.source is not None else None
    if frame_guard and policy is not None:
        label += "-guarded"
    run_dir = Path(args.run_dir or f"runs/live-{args.suite}-{label}")
    header = {"suite": args.suite, "split": args.split, "model": args.served_model or args.model,
              "template": args.template, "judge": LIVE_JUDGE}
    bar = tqdm(total=len(tasks), desc=f"live {label}", unit="episode")
    with RemoteEngine(args.endpoint, args.model, template=args.template, served_model=args.served_model,
                      api_key=settings().client_api_key) as engine:
        engine.akv_extensions  # noqa: B018 -- reach the endpoint once before any episode (one error, not N)
        counted = CountedPolicy(ReplayPolicy(label, policy, frame_guard=frame_guard), engine.render) \
            if policy is not None else None
        print(f"{args.suite} ({args.split}, {len(tasks)} tasks; split: {SPLIT_RULE}); live against {args.endpoint}, "
              f"model {args.served_model or args.model}, template {args.template}; {config.max_steps} replies of "
              f"{config.max_tokens} tokens per turn, tool_choice {config.tool_choice}; judge: {LIVE_JUDGE}", flush=True)
        episodes = play(engine, [(counted, label)], tasks, run_dir, config, header, on_result=lambda e: bar.update(1))
    bar.close()
    logs = export_episodes(run_dir, [(label, t) for t in tasks], args.served_model or args.model)
    rows = live_summary(episodes, [label])
    for line in table(rows):
        print(line)
    for row in rows:
        print(f"{row['policy']}: {row['calls']} calls, {row['invalid_calls']} invalid calls"
              + (f" (e.g. {row['invalid_reasons'][0]})" if row["invalid_reasons"] else "")
              + f", cost {row['cost_cents']:.4f} c ({row['cost_cents_mean']:.4f} c/episode), "
              f"{row['failed']} of {row['tasks']} episodes failed (no score)"
              + (f", e.g. {row['errors'][0]}" if row["errors"] else ""))
    out = Path(args.out or run_dir / "live.json")
    atomic_write(out, json.dumps({**header, "endpoint": args.endpoint, "config": asdict(config), "policies": rows,
                                  "episodes": [e.to_row() for e in episodes]}, indent=1, default=str).encode())
    print(f"episodes and checkpoints in {run_dir}; results: {out}; as agent logs: {logs[0]}, {logs[1]}")
    return 1 if any(row["failed"] for row in rows) else 0
