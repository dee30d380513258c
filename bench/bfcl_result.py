"""A finished ``akv eval`` run on a BFCL suite, stored as a result file with its provenance.

    python -m bench.bfcl_result runs/X.json --out bench/results/NAME.json --commit SHA --date ISO \\
        --command "akv eval --suite bfcl-base ..." --note "..." [--wall "39 min, alone on the machine"]

``akv eval`` writes its results where the caller says (``--out``) and knows neither the commit
that holds its code nor how it shared the machine; this adds them: the command as it was typed, the
commit it ran at (the measured modules were clean then: say so only when it is true), the date, a
note in words and the wall time, and refuses an input that is not a BFCL result. The per-policy
rows are summarized again from the stored verdicts by the current :func:`evals.bfcl.report.summarize`
(with the turns with evidence, and the paired difference with the full cache), so every stored run
carries the same statistics whatever the code that judged it; the verdicts themselves are the run's.
The rendered blocks (:mod:`bench.result_blocks`) read the stored file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from bench import write_result
from evals.bfcl.data import load_bfcl_suite
from evals.bfcl.evidence import evidence_turns
from evals.bfcl.judgement import TaskJudgement
from evals.bfcl.report import summarize
from rsi.provenance import Provenance

MEASURES = ("engine", "evals/bfcl", "evals/cache")
"""What a BFCL judgement depends on: the engine's replies, the judge, the policies' replay."""


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.bfcl_result", description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="the JSON akv eval wrote (--out)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--command", required=True, help="the akv eval command as it was run")
    ap.add_argument("--commit", required=True, help="the commit the run's code was at (its measured modules clean)")
    ap.add_argument("--date", required=True, help="when it started, ISO 8601 (YYYY-MM-DDTHH:MM:SS)")
    ap.add_argument("--note", required=True, help="what a reader needs to read it: how it was run, what was cut")
    ap.add_argument("--wall", default=None, help="its wall time, and what else ran beside it")
    args = ap.parse_args(argv)
    try:
        data = json.loads(args.run.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        print(f"bench.bfcl_result: cannot read {args.run}: {err}", file=sys.stderr)
        return 2
    missing = [k for k in ("suite", "judge", "model", "dtype", "policies", "tasks") if k not in data]
    if missing or not str(data.get("suite", "")).startswith("bfcl-"):
        print(f"bench.bfcl_result: {args.run} is not the result of akv eval on a BFCL suite "
              f"(suite {data.get('suite')!r}; missing {', '.join(missing) or 'nothing'})", file=sys.stderr)
        return 2
    provenance = Provenance(command=args.command, commit=args.commit, dirty=False, configs={}, model=data["model"],
                            dtype=data["dtype"], judge=data["judge"], load_average_start=None, date=args.date,
                            measures=MEASURES, unknown=("load_average_start",))
    results = [TaskJudgement.from_row(row) for row in data["tasks"]]
    judged = {r.task_id for r in results}
    evidence = {t.id: evidence_turns(t) for t in load_bfcl_suite(data["suite"], data.get("split")) if t.id in judged}
    rows = summarize(results, [row["policy"] for row in data["policies"]], evidence)
    write_result(args.out, {**data, "policies": rows, "note": args.note, "wall": args.wall}, measures=MEASURES,
                 provenance=provenance)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
