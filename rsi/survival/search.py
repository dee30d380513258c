"""Search survival policies on the workload simulator: ``akv survival-search TRACE``.

For each survival family (``search_spaces.survival``), one Optuna study samples its parameters
from the family's own ``space(trial)`` and scores them with :func:`evals.survival.simulate` on a
trace: the objective is p95 resume time to first token (lower is better) under the pool budget
the simulator enforces, with recompute tokens as the tie-breaker reported next to it. The
defaults of every family are trial 0 of its study, so a tuned family never
reports worse than its defaults. Each trial is one JSON line in ``OUT_DIR/trials.jsonl`` (written
as it finishes, fsync'ed), and ``OUT_DIR/summary.json`` holds the best parameters per family next
to LRU's metrics.

The survival families are programs in the same format as cache policies (``docs/survival-api.md``),
so they are also evolved by the proposers (``rsi.survival.evolve``, ``--evolve``); this module
tunes the built-in families' parameters, the part of the loop that runs offline in seconds.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import optuna

from engine.errors import AKVError
from evals.survival import SimConfig, load_trace, simulate
from rsi.rundir import write_text
from search_spaces.survival.registry import get_survival_family

OBJECTIVE = "resume_ttft_p95_s"
optuna.logging.set_verbosity(optuna.logging.ERROR)  # every trial is written to trials.jsonl instead


@dataclass(frozen=True)
class FamilyResult:
    """The best trial of one family's study (``metrics`` from the simulator)."""

    family: str
    trials: int
    failed: int
    best_params: dict[str, Any]
    best: dict[str, Any]
    defaults: dict[str, Any]


def _defaults(family: str) -> dict[str, Any]:
    return asdict(get_survival_family(family).params())


def search_family(trace: Any, family: str, trials: int, config: SimConfig, seed: int,
                  log: Any = None) -> FamilyResult:
    """Tune ``family``'s parameters on ``trace`` with ``trials`` Optuna trials (TPE, seeded)."""
    fam = get_survival_family(family)
    sampler = optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    defaults = _defaults(family)
    results: dict[int, dict[str, Any]] = {}

    def objective(trial: optuna.Trial) -> float:
        params = fam.space(trial) if trial.number > 0 else defaults
        m = simulate(trace, {"name": family, "params": params}, config)
        results[trial.number] = {"params": params, "metrics": m}
        if log is not None:
            log(family, trial.number, params, m)
        if not m.get("ok"):
            raise optuna.TrialPruned(str(m.get("error")))
        return float(m[OBJECTIVE])

    study.optimize(objective, n_trials=trials, catch=())
    done = [t for t in study.trials if t.state is optuna.trial.TrialState.COMPLETE]
    if not done:
        raise RuntimeError(f"survival family {family!r}: every trial failed on this trace")
    best = min(done, key=lambda t: (t.value, results[t.number]["metrics"]["recompute_tokens"], t.number))
    return FamilyResult(family, len(study.trials), len(study.trials) - len(done), results[best.number]["params"],
                        results[best.number]["metrics"], results[0]["metrics"] if 0 in results else {})


def run(trace_path: str | Path, families: Sequence[str], trials: int, out_dir: str | Path, seed: int = 0,
        config: SimConfig | None = None) -> list[FamilyResult]:
    """Search every family in ``families`` on the trace; writes ``trials.jsonl`` and ``summary.json``."""
    if not families:
        raise AKVError("no survival family to tune: --survival lists none (omit it to tune all)", field="survival",
                       value=list(families))
    for f in families:
        get_survival_family(f)  # unknown names fail before any work, listing the valid ones
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise AKVError(f"trials must be an integer >= 1, got {trials!r}", field="trials", value=trials)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise AKVError(f"seed must be an integer in [0, 2**32), got {seed!r}", field="seed", value=seed)
    trace = load_trace(trace_path)
    cfg = config or SimConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "trials.jsonl", "a") as fh:

        def log(family: str, number: int, params: dict[str, Any], m: dict[str, Any]) -> None:
            fh.write(json.dumps({"family": family, "trial": number, "params": params, "metrics": m},
                                sort_keys=True, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

        results = [search_family(trace, f, trials, cfg, seed, log) for f in families]
    summary = {"trace": str(trace_path), "objective": OBJECTIVE, "trials_per_family": trials, "seed": seed,
               "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "families": [asdict(r) for r in results]}
    write_text(out / "summary.json", json.dumps(summary, indent=1, default=str))
    return results


def table(results: Sequence[FamilyResult]) -> str:
    rows = [f"{'family':<18} {'trials':>6} {'failed':>6} {'p95 TTFT defaults':>18} {'p95 TTFT tuned':>15} "
            f"{'recompute tuned':>16} {'JCT mean tuned':>15}"]
    for r in results:
        rows.append(f"{r.family:<18} {r.trials:>6} {r.failed:>6} {r.defaults.get(OBJECTIVE, float('nan')):>18.3f} "
                    f"{r.best[OBJECTIVE]:>15.3f} {r.best['recompute_tokens']:>16} {r.best['jct_mean_s']:>15.2f}")
    return "\n".join(rows)
