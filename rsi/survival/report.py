"""The survival search's report: ``report.html`` and PNG figures from a run directory.

Figures: the plane of p95 resume TTFT vs recompute tokens (means per trace; both lower is better)
on train and on held-out, with the evolved candidates, their Pareto front and the tuned built-in
families; the hypervolume per generation. Text: the headline (``headline.json``, the best evolved
program against the best tuned family on held-out, paired over traces), the front and the
baselines, the operator table of the proposer's bandit, recorded failures, and the replay
confirmation when ``confirm.json`` exists. Table and image helpers are the cache report's.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

from rsi.proposers.bandit import operator_table
from rsi.reporting import Marker, front_points, hypervolume_figure, img, plane, table
from rsi.rundir import RunDir
from rsi.survival.archive import RECOMPUTE, TTFT, SurvivalArchive, SurvivalCandidate

MARKERS = "sD^v<>phP"


def _plane(archive: SurvivalArchive, split: str, path: Path) -> None:
    def pt(c: SurvivalCandidate) -> tuple[float, float]:
        m = getattr(c, split)
        return (m.resume_ttft_p95_s, m.recompute_tokens)

    evolved = [c for c in archive.scored() if getattr(c, split) is not None and getattr(c, split).ok]
    points, fr = front_points(evolved, pt, lambda c: (pt(c)[0], -pt(c)[1]))
    experts = [c for c in archive.scored(experts=True) if getattr(c, split) is not None and getattr(c, split).ok]
    marks = [Marker(c.label, pt(c), MARKERS[i % len(MARKERS)], f"C{i % 10}", hollow=True)
             for i, c in enumerate(experts)]
    plane(path, points, fr, marks, xlabel="p95 resume TTFT (s, mean over traces)",
          ylabel="recompute tokens (mean per trace)", title=f"survival policies ({split})", legend="upper right")


def _row(c: SurvivalCandidate) -> dict[str, Any]:
    return {"label": c.label, "expert": c.expert, "generation": c.generation, "proposer": c.proposer,
            "train p95 TTFT (s)": c.train.resume_ttft_p95_s if c.train else None,
            "train recompute": c.train.recompute_tokens if c.train else None,
            "held-out p95 TTFT (s)": c.heldout.resume_ttft_p95_s if c.heldout else None,
            "held-out recompute": c.heldout.recompute_tokens if c.heldout else None, "params": c.params}


def write_report(run_dir: str | Path) -> list[Path]:
    """Write ``report.html`` and ``figures/*.png`` for a survival run; returns the figure paths."""
    run = Path(run_dir)
    archive = SurvivalArchive.of_run(run)
    config = RunDir(run).survival_config
    head_path = run / "headline.json"
    headline = json.loads(head_path.read_text()) if head_path.exists() else {"reason": "no headline.json"}
    figs = run / "figures"
    figs.mkdir(exist_ok=True)
    paths = {name: figs / f"{name}.png" for name in ("survival_front_train", "survival_front_heldout",
                                                     "survival_hypervolume")}
    _plane(archive, "train", paths["survival_front_train"])
    _plane(archive, "heldout", paths["survival_front_heldout"])
    hypervolume_figure(archive.hv_history, paths["survival_hypervolume"])
    hv = archive.hv_history
    ref = hv[0]["ref"] if hv else [1.0, 1.0]
    ops = operator_table(archive, ref[0], ref_pass=-ref[1])
    failures = [{"label": c.label, "generation": c.generation, "proposer": c.proposer, "status": c.status.value,
                 "reason": c.reason} for c in archive.failures()]
    stats_path = run / "proposer_stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    stats.pop("operators", None)
    confirm_path = run / "confirm.json"
    confirm = ""
    if confirm_path.exists():
        rows = [{"rank": r["rank"], "label": r["label"], "model": r["model"], "clock": r["clock"],
                 "simulated p95 TTFT": (r["simulated"] or {}).get("resume_ttft_p95_s"),
                 "replayed p95 TTFT": r["replayed"]["resume_ttft_p95_s"],
                 "simulated recompute": (r["simulated"] or {}).get("recompute_tokens"),
                 "replayed recompute": r["replayed"]["recompute_tokens"]} for r in json.loads(confirm_path.read_text())]
        confirm = "<h2>Confirmed by replay (real engine)</h2>" + table(rows, list(rows[0]) if rows else [])
    cols = ["label", "expert", "generation", "proposer", "train p95 TTFT (s)", "train recompute",
            "held-out p95 TTFT (s)", "held-out recompute", "params"]
    train, held = config.train, config.heldout
    lines = describe_headline(headline)
    shown = archive.front() + archive.scored(experts=True)
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>AKV-RSI survival search: {html.escape(config.name)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}}
table{{border-collapse:collapse;font-size:12px;margin:1em 0}}td,th{{border:1px solid #ccc;padding:3px 6px}}
img{{max-width:100%;margin:0.5em 0}}.headline{{background:#f3f8f3;border-left:4px solid #2ca02c;padding:0.6em}}
</style></head><body>
<h1>Survival search: {html.escape(config.name)}</h1>
<p>Simulator (token-exact: the engine's own radix tree and survival manager on a model clock), calibration
{html.escape(config.calibration)}. Train traces: {html.escape(', '.join(train.kinds))} seeds {list(train.seeds)}
({train.sessions} sessions each); held-out: {html.escape(', '.join(held.kinds))} seeds {list(held.seeds)}
({held.sessions} sessions each). {config.trials} Optuna trials per program and per built-in family;
{len(archive.candidates)} archive entries, {len(archive.failures())} recorded failures, {len(hv) - 1 if hv else 0}
generations. Objectives (both minimised): p95 resume TTFT and recompute tokens, means over traces.</p>
<h2>Headline</h2><div class="headline">{"<br>".join(html.escape(x) for x in lines)}</div>
<p>Paired over held-out traces (the unit: sessions of a trace share the pool and the scheduler, so they are not
independent), 95% percentile-bootstrap intervals ({config.bootstrap_samples} resamples); significant: the interval
of the difference excludes 0 and at least 5 traces were paired. Both policies are chosen on train. Details:
headline.json.</p>
{confirm}
<h2>p95 resume TTFT vs recompute tokens</h2>{img(paths['survival_front_train'])}{img(paths['survival_front_heldout'])}
<h2>Pareto front and tuned families</h2>{table([_row(c) for c in shown], cols)}
<h2>Hypervolume per generation</h2>{img(paths['survival_hypervolume'])}
{table(hv, ['generation', 'hypervolume', 'front_size', 'candidates'])}
<h2>Proposer</h2>{table([stats], list(stats)) if stats else '<p>no proposals</p>'}
{table([dict(r) for r in ops], ['generation', 'operator', 'offspring', 'valid_rate', 'front_rate', 'mean_reward'])
 if ops else ''}
<h2>Recorded failures</h2>{table(failures, ['label', 'generation', 'proposer', 'status', 'reason'])
                          if failures else '<p>none</p>'}
</body></html>"""
    (run / "report.html").write_text(page)
    return list(paths.values())


def describe_headline(h: Mapping[str, Any]) -> list[str]:
    """The headline in words (what the CLI prints and the report shows)."""
    if not h.get("comparison"):
        return [f"No headline comparison: {h.get('reason', 'nothing to compare')}."]
    lines = [f"{h['policy']}{' (a seed program, not an evolved one)' if h.get('policy_is_seed') else ''} vs "
             f"{h['versus']} on {len(h['heldout_traces'])} held-out traces (paired over traces, 95% bootstrap):"]
    for key, unit in ((TTFT, "s"), (RECOMPUTE, "tokens")):
        m = h["metrics"][key]
        verdict = ("significantly " + ("lower" if m["delta_ci95"][1] < 0 else "higher")) if m["significant"] else \
            "not significant"
        lines.append(f"  {key}: {m['mean_a']:.4g} vs {m['mean_b']:.4g} {unit} per trace, difference "
                     f"{m['delta']:+.4g} [{m['delta_ci95'][0]:+.4g}, {m['delta_ci95'][1]:+.4g}], "
                     f"{m['delta_pct']:+.1f}% [{m['delta_pct_ci95'][0]:+.1f}, {m['delta_pct_ci95'][1]:+.1f}]; "
                     f"{verdict}")
    return lines
