"""The headlines of several survival evolutions pooled over their held-out traces (``akv pool``).

A survival evolution's headline (:meth:`rsi.survival.evolve.SurvivalEvolution.headline`) pairs the
best evolved candidate, chosen on train, with two comparators over the run's held-out traces: the
best tuned family (``family``) and, with ``ablation: true``, the tuning-only arm's best
(``tuning-only``). Runs with other seeds and other held-out traces repeat the procedure; pooled,
they say what evolution gives against each comparator on a trace it never saw.

Each run contributes its headline's per-trace values (nothing is simulated again);
:func:`rsi.survival.archive.pooled_over_traces` resamples each run's traces within that run. A
trace id in two runs is refused (it would count twice), and so is a run given twice. Which runs
are pooled is the caller's choice: pool every run of a set declared before they ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.errors import AKVError
from evals.paired import PairingError
from rsi import provenance
from rsi.rundir import RunDir, distinct_run_dirs, read_json, write_json
from rsi.survival.archive import RECOMPUTE, TTFT, PairedMetric, pooled_over_traces

COMPARATORS = {"family": "the best tuned family", "tuning-only": "the tuning-only arm's best"}


def _comparison(run: Path, versus: str) -> dict[str, Any]:
    headline = read_json(run / "headline.json", dict)
    row = headline.get("ablation") if versus == "tuning-only" else headline
    if not isinstance(row, dict) or row.get("comparison") is None:
        why = "no tuning-only arm (ablation: false)" if row is None else (row or {}).get("reason", "no comparison")
        raise AKVError(f"{run}: its headline has no comparison with {COMPARATORS[versus]} ({why})", field="versus",
                       value=versus)
    per_trace, traces = row.get("per_trace"), row.get("heldout_traces")
    if not (isinstance(per_trace, dict) and isinstance(traces, list) and traces
            and all(len(per_trace.get(side) or []) == len(traces) for side in ("policy", "versus"))):
        raise AKVError(f"{run}: its headline's comparison with {COMPARATORS[versus]} has no per-trace values "
                       f"for its held-out traces", field="run_dirs", value=str(run))
    return row


def pool_survival_runs(run_dirs: Sequence[str | Path], *, samples: int = 2000, seed: int = 0,
                       versus: str | None = None) -> list[dict[str, Any]]:
    """One pooled comparison per comparator (``family`` and ``tuning-only``, or ``versus`` alone):
    per metric (p95 resume TTFT, tokens recomputed) the pooled :class:`PairedMetric`, and each run's
    own row.

    Raises:
        AKVError: no run, a run given twice, a path without a survival headline, an unknown
            ``versus``, a run without that comparison, a trace in two runs, or ``samples`` < 100.
    """
    runs = distinct_run_dirs(run_dirs, "traces")
    if versus is not None and versus not in COMPARATORS:
        raise AKVError(f"a survival run compares with {' or '.join(COMPARATORS)}, not {versus!r}", field="versus",
                       value=versus)
    for run in runs:
        if not (run.is_dir() and RunDir(run).is_survival and (run / "headline.json").is_file()):
            raise AKVError(f"{run} is not a survival evolution with a headline (akv survival-search --evolve)",
                           field="run_dirs", value=str(run))
    with_arm = any("ablation" in read_json(run / "headline.json", dict) for run in runs)
    wanted = [versus] if versus is not None else ["family", *(["tuning-only"] if with_arm else [])]
    out = []
    for v in wanted:
        rows = [(run, _comparison(run, v)) for run in runs]
        seen: dict[str, str] = {}
        for run, row in rows:
            for t in row["heldout_traces"]:
                if t in seen:
                    raise AKVError(f"trace {t!r} is held out in {seen[t]} and {run}: pooled traces must be distinct",
                                   field="run_dirs", value=t)
                seen[t] = str(run)
        metrics: dict[str, PairedMetric] = {}
        for key in (TTFT, RECOMPUTE):
            groups = [([float(x[key]) for x in row["per_trace"]["policy"]],
                       [float(x[key]) for x in row["per_trace"]["versus"]]) for _, row in rows]
            try:
                metrics[key] = pooled_over_traces(groups, samples=samples, seed=seed)
            except PairingError as err:
                raise AKVError(f"{v}: {err}", field="run_dirs", value=err.value) from err
        out.append({"versus": v, "what": COMPARATORS[v], "heldout_traces": len(seen),
                    "metrics": {k: m.to_dict() for k, m in metrics.items()},
                    "runs": [{"run_dir": str(run), "policy": row["policy"],
                              "policy_proposer": row.get("policy_proposer"), "versus": row["versus"],
                              "heldout_traces": row["heldout_traces"],
                              "metrics": row.get("metrics")} for run, row in rows]})
    return out


def survival_pooled_lines(pooled: Sequence[dict[str, Any]]) -> list[str]:
    """Per comparator: each run's pair, then the pool, per metric (lower is better for both)."""
    lines = []
    for p in pooled:
        lines.append(f"best evolved vs {p['what']} ({p['versus']})")
        for r in p["runs"]:
            m = r.get("metrics") or {}
            lines.append(f"  {Path(r['run_dir']).name[:24]:24s} {r['policy'][:22]:22s} vs {r['versus'][:22]:22s} "
                         + "  ".join(_metric(k, m.get(k)) for k in (TTFT, RECOMPUTE)))
        lines.append(f"  {'pooled':24s} {str(p['heldout_traces']) + ' traces':49s} "
                     + "  ".join(_metric(k, p["metrics"][k], words=True) for k in (TTFT, RECOMPUTE)))
    return lines


def _metric(key: str, m: dict[str, Any] | None, words: bool = False) -> str:
    name = "p95 TTFT" if key == TTFT else "recompute"
    if not m:
        return f"{name} -"
    lo, hi = m["delta_pct_ci95"]
    text = f"{name} {m['delta_pct']:+6.1f}% [{lo:+.1f}, {hi:+.1f}]"
    if words:
        text += " significant" if m["significant"] else " (interval includes 0)"
    return text


def write_survival_pooled(path: str | Path, pooled: Sequence[dict[str, Any]], run_dirs: Sequence[str | Path], *,
                          samples: int, seed: int) -> Path:
    """The runs, the bootstrap settings and every pooled comparison, as JSON."""
    out = Path(path)
    write_json(out, {"track": "survival", "runs": [str(r) for r in run_dirs], "samples": samples, "seed": seed,
                     "unit": "trace", "comparisons": list(pooled),
                     "provenance": provenance.pooled(run_dirs).as_dict()})
    return out
