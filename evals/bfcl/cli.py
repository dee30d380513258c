"""``akv eval --suite bfcl-base|bfcl-long``: policies judged turn by turn by BFCL's checker.

Prints turn accuracy, task accuracy and retention with 95% intervals per policy (and per
category), naming the model, dtype and judge; writes them, with every task's turns, to ``--out``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tqdm import tqdm

from engine.errors import AKVError
from engine.files import atomic_write
from evals.bfcl.data import BFCL_VERSION, SPLIT_RULE
from evals.bfcl.judge import JudgeConfig, judge
from evals.bfcl.report import summarize, table
from evals.cache.cli import fill_eval_defaults, load_tasks, policy_specs, read_program_file
from evals.cache.evaluator import PolicySpec

JUDGE = (f"BFCL multi-turn checker (bfcl-eval=={BFCL_VERSION}: state_checker and response_checker per turn, "
         "gold history before each turn)")


def run_bfcl_eval(args: argparse.Namespace, params: dict[str, Any], picked: PolicySpec | None = None) -> int:
    """``akv eval`` on a BFCL suite (see the module docstring).

    Raises:
        AKVError: options that do not apply to BFCL (``--frame-guard``), an existing ``--out``
            without ``--force``, and what :func:`evals.cache.cli.policy_specs` and
            :func:`evals.cache.cli.load_tasks` raise (bfcl-eval missing: one line naming ``make bfcl``).
    """
    import torch

    from engine.engine import Engine

    fill_eval_defaults(args)
    if getattr(args, "frame_guard", False):
        raise AKVError("--frame-guard does not apply to the BFCL suites", field="frame_guard", value=True)
    out = Path(args.out or "eval-results.json")
    if out.is_dir():
        raise AKVError(f"--out {out} is a directory; give a file name such as {out / 'results.json'}", field="out",
                       value=str(out))
    if out.exists() and not getattr(args, "force", False):
        raise AKVError(f"{out} exists: give another --out, or --force to overwrite it", field="out", value=str(out))
    program = read_program_file(args.program) if getattr(args, "program", None) and picked is None else None
    specs = policy_specs(args, params, picked, program)
    selection = load_tasks(args.suite, args.split, args.limit, args.offset)
    dtype = getattr(args, "dtype", None) or "float32"
    engine = Engine.from_pretrained(args.model, template=args.template, dtype=getattr(torch, dtype))
    config = JudgeConfig()
    print(f"{args.suite} ({selection.split}, {len(selection.tasks)} tasks; split: {SPLIT_RULE}); model {args.model} "
          f"{dtype}, template {engine.renderer.template.name}; judge: {JUDGE}", flush=True)
    bar = tqdm(total=len(selection.tasks) * len(specs), desc="judging", unit="task")
    results = judge(engine, selection.tasks, specs, config, on_result=lambda r: bar.update(1))
    bar.close()
    rows = summarize(results, [s.display for s in specs])
    for line in table(rows):
        print(line)
    for row in rows:
        if row["failed"]:
            print(f"{row['policy']}: {row['failed']} of {row['tasks']} tasks failed (no score), "
                  f"e.g. {row['errors'][0]}")
    payload = {"suite": args.suite, "split": selection.split, "split_rule": SPLIT_RULE, "model": args.model,
               "dtype": dtype, "template": engine.renderer.template.name, "judge": JUDGE,
               "config": {"max_steps": config.max_steps, "max_tokens": config.max_tokens,
                          "tool_choice": config.tool_choice},
               "policies": rows, "tasks": [r.to_row() for r in results]}
    atomic_write(out, json.dumps(payload, indent=1, default=str).encode())
    print(f"results: {out.resolve()}")
    return 0
