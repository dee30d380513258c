"""``akv survival-search``: the survival track's commands (what they print is said here only).

``TRACE``: one Optuna study per built-in family on the simulator (``rsi.survival.search``);
``--evolve CONFIG``: survival programs evolved through the same loop (``rsi.survival.evolve``),
then optionally ``--confirm-replay N`` on the real engine (``rsi.survival.confirm``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from evals.survival import SimConfig
from rsi.survival.archive import (
    RECOMPUTE,
    TTFT,
)
from rsi.survival.config import load_config
from rsi.survival.confirm import check_traces, confirm_replay
from rsi.survival.evolve import SurvivalEvolution
from rsi.survival.report import describe_headline
from rsi.survival.search import run, table
from search_spaces.survival import (
    SURVIVAL_FAMILIES,
)


def evolve_cli(args: Any) -> int:
    """``akv survival-search --evolve CONFIG --run-dir DIR [--confirm-replay N --model M]``."""
    config = load_config(args.evolve)
    run_dir = Path(args.run_dir or f"runs/{config.name}")
    traces = getattr(args, "confirm_traces", 0)
    check_traces(traces)  # before the evolution, not after it
    tracker = None
    if config.tracking:
        from rsi.survival.tracking import SurvivalTracker

        tracker = SurvivalTracker(run_dir, config.name)
    evo = SurvivalEvolution(config, run_dir, tracker=tracker, say=lambda text: print(text, flush=True))
    res = evo.run()
    for line in describe_headline(res.headline):
        print(line)
    print(f"{res.seconds:.1f} s ({res.simulations} simulations, {res.pruned} trials pruned by the cascade); "
          f"report {(run_dir / 'report.html').resolve()}")
    if args.confirm_replay:
        rows = confirm_replay(run_dir, args.confirm_replay, args.model, args.confirm_clock,
                              say=lambda text: print(text, flush=True), traces=traces)
        for r in rows:
            s, p = r["simulated"] or {}, r["replayed"]
            print(f"replay #{r['rank']} {r['label']} on {len(r['traces'])} held-out traces: p95 resume TTFT simulated "
                  f"{s.get(TTFT)} s, replayed {p[TTFT]} s; recompute simulated {s.get(RECOMPUTE)}, replayed "
                  f"{p[RECOMPUTE]}")
    return 0


def search_cli(args: Any) -> int:
    """``akv survival-search TRACE``: tune every built-in family on the simulator; print the table."""
    families = [f.strip() for f in args.survival.split(",") if f.strip()] if args.survival else list(SURVIVAL_FAMILIES)
    config = SimConfig(pool_tokens=args.pool_tokens, host_tokens=args.host_tokens, max_batch=args.max_batch)
    t0 = time.perf_counter()
    results = run(args.trace, families, args.trials, args.out, args.seed, config)
    print(table(results))
    print(f"{time.perf_counter() - t0:.1f} s; trials and summary in {Path(args.out).resolve()}")
    return 0
