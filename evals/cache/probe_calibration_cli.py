"""Command line of the probe calibration (:mod:`evals.cache.probe_calibration`).

    python -m evals.cache.probe_calibration_cli --split heldout --per-family 4 [--template plain] [--suite default]
        [--index-range A:B] [--dtype bfloat16] [--against CALIBRATION.json]

Prints the per-family table (log-likelihood multiple choice and greedy exact match, with the full
cache and with each probe's evidence dropped) and writes ``bench/results/calibration-<split>.json``.
Exits 1 when a family misses a required target.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from evals.cache.probes import LEAD_STYLES, ProbeFormat, probe_format_for


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    defaults = ProbeFormat()
    p = argparse.ArgumentParser(prog="python -m evals.cache.probe_calibration_cli", description=__doc__.splitlines()[0])
    p.add_argument("--split", default="heldout", choices=("train", "heldout"))
    p.add_argument("--per-family", type=int, default=4, help="tasks per family, spread over the split")
    p.add_argument("--suite", default="default", help="registered suite name or path to a task set")
    p.add_argument("--index-range", default=None, metavar="A:B",
                   help="only each family's tasks A..B-1 (in suite order) are sampled from, e.g. held-out tasks "
                        "allotted to calibration and to no search")
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--template", default=None,
                   help="chat template of the engine: plain, gemma or chatml (default: the named model's own, "
                        "else plain)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help="weights and KV of the engine (bfloat16: faster prefill on CPUs with avx512_bf16, inexact)")
    p.add_argument("--lead-in", default=None, choices=LEAD_STYLES,
                   help=f"default: the model's calibrated format (evals.cache.probes.MODEL_PROBE_FORMATS), else "
                        f"{defaults.lead_in}")
    p.add_argument("--min-lead-chars", type=int, default=None)
    p.add_argument("--question", action=argparse.BooleanOptionalAction, default=None,
                   help="ask the probe's question before the lead-in (default: as the model's calibrated format)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=None, help="JSON file (default bench/results/calibration-<split>.json)")
    p.add_argument("--against", default=None, metavar="CALIBRATION.json",
                   help="another calibration of the same tasks (e.g. in float32): print, per pass flag, the probes "
                        "this one gains and loses against it, and keep that in the JSON")
    return p.parse_args(argv)


def index_range(tasks: Sequence[Any], spec: str | None) -> list[Any]:
    """Each family's tasks ``A`` to ``B - 1`` (in suite order) for ``spec`` ``"A:B"`` (all for ``None``).

    Raises:
        SystemExit: a malformed range (argparse's way of refusing a flag).
    """
    if spec is None:
        return list(tasks)
    a, sep, b = spec.partition(":")
    if not sep or not a.isdigit() or not b.isdigit() or int(a) >= int(b):
        raise SystemExit(f"--index-range must be A:B with 0 <= A < B, got {spec!r}")
    seen: dict[str, int] = {}
    out = []
    for t in tasks:
        k = seen[t.family] = seen.get(t.family, -1) + 1
        if int(a) <= k < int(b):
            out.append(t)
    return out


def _read_against(path: str | None) -> dict[str, Any] | None:
    """The calibration JSON of ``--against``, read and checked before the (minutes long)
    calibration starts: a ``probes`` list of objects, each with the keys a probe is matched by
    (``task_id``, ``lead_in``, ``answer``: strings) and its four pass flags.

    Raises:
        SystemExit: unreadable, or not a calibration (naming the first bad probe).
    """
    if path is None:
        return None
    from evals.cache.probe_calibration import FLAGS

    match = ("task_id", "lead_in", "answer")  # what compare() matches probes by
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise SystemExit(f"--against {path}: cannot read it as JSON ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("probes"), list):
        raise SystemExit(f"--against {path}: not a calibration (no 'probes' list)")
    for i, probe in enumerate(data["probes"]):
        keys = (*match, *FLAGS)
        missing = [k for k in keys if k not in probe] if isinstance(probe, dict) else list(keys)
        if missing or not all(isinstance(probe[k], str) for k in match):
            raise SystemExit(f"--against {path}: probe {i} is not a calibration probe (an object with string "
                             f"{', '.join(match)} and the flags {', '.join(FLAGS)}; "
                             f"missing {', '.join(missing) or 'none, but a key is not a string'})")
    return data


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from engine.models.catalog import default_template
    from engine.template import get_template

    args.template = get_template(args.template or default_template(args.model, "plain")).name
    against = _read_against(args.against)
    import torch

    from engine import Engine
    from evals.cache.evaluator import EvalConfig, TaskResult
    from evals.cache.probe_calibration import FLAGS, calibrate, compare, sample_tasks
    from evals.tasks import load_suite

    base = probe_format_for(args.model)
    fmt = replace(base, lead_in=args.lead_in or base.lead_in,
                  min_lead_chars=base.min_lead_chars if args.min_lead_chars is None else args.min_lead_chars,
                  ask_question=base.ask_question if args.question is None else args.question)
    tasks = sample_tasks(index_range(load_suite(args.suite, args.split), args.index_range), args.per_family)
    if against is not None and not {p["task_id"] for p in against["probes"]} & {t.id for t in tasks}:
        raise SystemExit(f"--against {args.against}: none of its probes is from the {len(tasks)} tasks sampled here "
                         f"(--suite {args.suite} --split {args.split} --per-family {args.per_family}): nothing to "
                         f"compare")
    engine = Engine.from_pretrained(args.model, template=args.template, threads=args.threads,
                                    dtype=getattr(torch, args.dtype))
    print(f"calibrating {args.model} ({args.template} template, {args.dtype}) on {len(tasks)} {args.split} tasks "
          f"of {args.suite}; probe format {fmt.as_dict()}", flush=True)

    def progress(r: TaskResult) -> None:
        print(f"  {r.task_id:<55} {r.policy:<14} {r.seconds:6.1f}s{'' if r.ok else '  FAILED: ' + str(r.error)}",
              flush=True)

    cal = calibrate(engine, tasks, EvalConfig(probe=fmt), split=args.split, template=args.template, suite=args.suite,
                    on_result=progress)
    print(cal.table())
    extra: dict[str, Any] = {}
    if against is not None:
        try:
            diff = compare(cal.outcomes, against["probes"])
        except ValueError as err:  # same tasks, other probes (another probe format): keep the calibration
            extra["against"] = {"file": args.against, "error": str(err)}
            print(f"against {args.against}: {err}")
        else:
            extra["against"] = {"file": args.against, "dtype": str(against.get("dtype", "float32")), **diff}
            print(f"against {args.against} ({extra['against']['dtype']}), {diff['probes']} probes in common:")
            for flag in FLAGS:
                d = diff[flag]
                print(f"  {flag:<11} {d['there']:>3} -> {d['here']:>3} passed  (+{d['gained']} -{d['lost']})")
    out = cal.write(args.out or f"bench/results/calibration-{args.split}.json", extra)
    print(f"{cal.seconds:.0f} s; written to {out}")
    return 0 if cal.ok else 1


if __name__ == "__main__":
    sys.exit(main())
