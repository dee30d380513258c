"""A finished search's headline, frozen picks and report summary, stored as a result file.

    python -m bench.run_result RUN_DIR --out bench/results/quickstart.json [--time-log FILE] [--commit SHA]

Run directories are not committed; this keeps what a reader needs to check a run's documented figures:
each headline comparison (``headline.json``), the frozen picks (``pick.json``: labels, program SHA-256,
parameters, held-out task ids), the headline in words as ``akv report`` prints it, the resolved dtype,
and, from a GNU ``/usr/bin/time -v`` log of the run, its wall time and peak RSS. The provenance is the
run's own (``provenance.json``, written by ``akv search``); a run from before that records none, and
``--commit`` names the commit it ran at when the caller knows it (said so in the file; the date is
then when the run wrote its ``config.json``).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import write_result
from rsi.cache.headline import read_headline, run_headline
from rsi.provenance import SEARCH_MEASURES, Provenance, git, read_run
from rsi.rundir import RunDir, read_json


def time_log(path: Path) -> dict[str, Any]:
    """Wall time (as ``m:ss``) and peak RSS in GB from a GNU ``time -v`` log.

    Raises:
        SystemExit: the log has no such lines.
    """
    text = path.read_text(encoding="utf-8", errors="replace")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([0-9:.]+)", text)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if not wall or not rss:
        raise SystemExit(f"bench.run_result: {path} is not a GNU time -v log (no wall time or maximum RSS)")
    parts = [float(p) for p in wall.group(1).split(":")]
    seconds = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    whole = round(seconds)
    return {"wall_s": seconds, "wall": f"{whole // 60} min {whole % 60:02d} s",
            "peak_rss_gb": int(rss.group(1)) * 1024 / 1e9}


def summarize(run: Path) -> dict[str, Any]:
    config = RunDir(run).cache_config
    rows = read_headline(run)
    if rows is None:
        raise SystemExit(f"bench.run_result: {run} has no headline.json (an unfinished or older run)")
    pick = read_json(run / "pick.json", dict)
    return {"run": run.name, "config_name": config.name, "suite": config.data.suite,
            "heldout_reused": config.data.heldout_reused, "dtype_resolved": config.dtype,
            "choice": rows[0].policy if rows else None, "headline": [r.to_dict() for r in rows],
            "pick": pick, "report_headline": run_headline(run)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run_result", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", default=None, help="the committed config the run ran (its commit is recorded)")
    ap.add_argument("--time-log", type=Path, default=None, help="GNU /usr/bin/time -v output of the run")
    ap.add_argument("--commit", default=None, help="the commit the run ran at, for a run that did not record it")
    ap.add_argument("--shared", action="store_true",
                    help="other jobs shared the cores during the run: its wall time is recorded as not a timing")
    args = ap.parse_args(argv)
    data = summarize(args.run_dir)
    data["timing"] = "shared: other jobs ran beside it, not a timing" if args.shared else "alone on the machine"
    if args.time_log:
        data.update(time_log(args.time_log))
    prov = read_run(args.run_dir)
    if prov is None:
        config = RunDir(args.run_dir).cache_config
        configs = {args.config: git("log", "-1", "--format=%H", args.commit, "--", args.config) or None
                   if args.commit else None} if args.config else {}
        started = time.strftime("%Y-%m-%dT%H:%M:%S",
                                time.localtime((args.run_dir / "config.json").stat().st_mtime))
        prov = Provenance(command=f"akv search {args.config or '?'} --run-dir {args.run_dir}", commit=args.commit,
                          dirty=None, configs=configs, model=config.model.name, dtype=config.dtype,
                          judge=f"{config.model.name} ({config.eval.scoring})", load_average_start=None,
                          date=started, measures=SEARCH_MEASURES,
                          unknown=("load_average_start",) + (() if args.commit else ("commit",)))
        data["provenance_note"] = ("the run recorded no provenance.json; its commit was given by --commit"
                                   if args.commit else "the run recorded no provenance.json")
    write_result(args.out, data, measures=SEARCH_MEASURES, provenance=prov)
    return 0


if __name__ == "__main__":
    sys.exit(main())
