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
import matplotlib.pyplot as plt

from rsi.pareto import front
from rsi.proposers.bandit import operator_table
from rsi.report import _img, _table
from rsi.survival.archive import RECOMPUTE, TTFT, SurvivalArchive, SurvivalCandidate

MARKERS = "sD^v<>phP"


def _plane(archive: SurvivalArchive, split: str, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 4.4))

    def pt(c: SurvivalCandidate) -> tuple[float, float]:
        m = getattr(c, split)
        return (m.resume_ttft_p95_s, m.recompute_tokens)

    evolved = [c for c in archive.scored() if getattr(c, split) is not None and getattr(c, split).ok]
    if evolved:
        xs, ys = zip(*(pt(c) for c in evolved))
        ax.scatter(xs, ys, s=18, color="#bbbbbb", label="evolved candidates", zorder=1)
        fr = front(evolved, lambda c: (pt(c)[0], -pt(c)[1]))
        fx, fy = zip(*(pt(c) for c in fr))
        ax.step(fx, fy, where="post", color="#2ca02c", lw=1.5, zorder=2)
        ax.scatter(fx, fy, s=40, color="#2ca02c", label="evolved front", zorder=3)
    experts = [c for c in archive.scored(experts=True) if getattr(c, split) is not None and getattr(c, split).ok]
    for i, c in enumerate(experts):
        x, y = pt(c)
        ax.scatter([x], [y], marker=MARKERS[i % len(MARKERS)], s=70, facecolors="none",
                   edgecolors=f"C{i % 10}", label=c.label, zorder=4)
    ax.set_xlabel("p95 resume TTFT (s, mean over traces)")
    ax.set_ylabel("recompute tokens (mean per trace)")
    ax.set_title(f"survival policies ({split})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _hypervolume(archive: SurvivalArchive, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(5, 3))
    hv = archive.hv_history
    ax.plot([h["generation"] for h in hv], [h["hypervolume"] for h in hv], marker="o")
    ax.set_xlabel("generation")
    ax.set_ylabel("hypervolume (train)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _row(c: SurvivalCandidate) -> dict[str, Any]:
    return {"label": c.label, "expert": c.expert, "generation": c.generation, "proposer": c.proposer,
            "train p95 TTFT (s)": c.train.resume_ttft_p95_s if c.train else None,
            "train recompute": c.train.recompute_tokens if c.train else None,
            "held-out p95 TTFT (s)": c.heldout.resume_ttft_p95_s if c.heldout else None,
            "held-out recompute": c.heldout.recompute_tokens if c.heldout else None, "params": c.params}


def write_report(run_dir: str | Path) -> list[Path]:
    """Write ``report.html`` and ``figures/*.png`` for a survival run; returns the figure paths."""
    run = Path(run_dir)
    archive = SurvivalArchive.load(run / "archive.json")
    config = json.loads((run / "config.json").read_text())
    head_path = run / "headline.json"
    headline = json.loads(head_path.read_text()) if head_path.exists() else {"reason": "no headline.json"}
    figs = run / "figures"
    figs.mkdir(exist_ok=True)
    paths = {name: figs / f"{name}.png" for name in ("survival_front_train", "survival_front_heldout",
                                                     "survival_hypervolume")}
    _plane(archive, "train", paths["survival_front_train"])
    _plane(archive, "heldout", paths["survival_front_heldout"])
    _hypervolume(archive, paths["survival_hypervolume"])
    hv = archive.hv_history
    ref = hv[0]["ref"] if hv else [1.0, 1.0]
    ops = operator_table(archive, ref[0], ref_pass=-ref[1])  # type: ignore[arg-type]
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
        confirm = "<h2>Confirmed by replay (real engine)</h2>" + _table(rows, list(rows[0]) if rows else [])
    cols = ["label", "expert", "generation", "proposer", "train p95 TTFT (s)", "train recompute",
            "held-out p95 TTFT (s)", "held-out recompute", "params"]
    train, held = config["train"], config["heldout"]
    lines = describe_headline(headline)
    shown = archive.front() + archive.scored(experts=True)
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>AKV-RSI survival search: {html.escape(config['name'])}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}}
table{{border-collapse:collapse;font-size:12px;margin:1em 0}}td,th{{border:1px solid #ccc;padding:3px 6px}}
img{{max-width:100%;margin:0.5em 0}}.headline{{background:#f3f8f3;border-left:4px solid #2ca02c;padding:0.6em}}
</style></head><body>
<h1>Survival search: {html.escape(config['name'])}</h1>
<p>Simulator (token-exact: the engine's own radix tree and survival manager on a model clock), calibration
{html.escape(config['calibration'])}. Train traces: {html.escape(', '.join(train['kinds']))} seeds {train['seeds']}
({train['sessions']} sessions each); held-out: {html.escape(', '.join(held['kinds']))} seeds {held['seeds']}
({held['sessions']} sessions each). {config['trials']} Optuna trials per program and per built-in family;
{len(archive.candidates)} archive entries, {len(archive.failures())} recorded failures, {len(hv) - 1 if hv else 0}
generations. Objectives (both minimised): p95 resume TTFT and recompute tokens, means over traces.</p>
<h2>Headline</h2><div class="headline">{"<br>".join(html.escape(x) for x in lines)}</div>
<p>Paired over held-out traces (the unit: sessions of a trace share the pool and the scheduler, so they are not
independent), 95% percentile-bootstrap intervals ({config['bootstrap_samples']} resamples); significant: the interval
of the difference excludes 0 and at least 5 traces were paired. Both policies are chosen on train. Details:
headline.json.</p>
{confirm}
<h2>p95 resume TTFT vs recompute tokens</h2>{_img(paths['survival_front_train'])}{_img(paths['survival_front_heldout'])}
<h2>Pareto front and tuned families</h2>{_table([_row(c) for c in shown], cols)}
<h2>Hypervolume per generation</h2>{_img(paths['survival_hypervolume'])}
{_table(hv, ['generation', 'hypervolume', 'front_size', 'candidates'])}
<h2>Proposer</h2>{_table([stats], list(stats)) if stats else '<p>no proposals</p>'}
{_table([dict(r) for r in ops], ['generation', 'operator', 'offspring', 'valid_rate', 'front_rate', 'mean_reward'])
 if ops else ''}
<h2>Recorded failures</h2>{_table(failures, ['label', 'generation', 'proposer', 'status', 'reason'])
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
