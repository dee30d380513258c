"""The search report: a self-contained HTML page and PNG figures from a run directory.

Figures: the cost vs pass-rate plane (train and held-out) with the evolved front and the expert
policies; hypervolume per generation; the lineage of the best policy; per-family pass rates.
The headline comes from ``headline.json`` (``rsi.cache.headline``): the best evolved policy against
each expert (fixed and tuned, and the tuning-only arm's choice) on held-out, paired over tasks with
95% bootstrap intervals, with a verdict in words: which comparisons are significant, or plainly that
nothing beat the experts; then the headroom (the oracle and the rolling-drop bounds, the share of
the headroom captured) and the ablation's budgets when the search measured them.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from rsi.archive import Status
from rsi.cache.archive import Archive, Candidate
from rsi.cache.headline import headline_lines, headroom_line, read_headline, read_headroom
from rsi.cache.proposer_report import proposer_section
from rsi.reporting import Marker, front_points, hypervolume_figure, img, plane, table
from rsi.rundir import RunDir

EXPERT_STYLE = {"full": ("s", "#444444"), "rolling_drop": ("D", "#d62728"), "standard": ("^", "#1f77b4"),
                "text_engineering": ("v", "#17becf"), "trim": ("x", "#7f7f7f"), "thinking_drop": ("P", "#8c564b")}


def _plane(archive: Archive, split: str, path: Path) -> None:
    def pt(c: Candidate) -> tuple[float, float]:
        m = getattr(c, split)
        return (m.cost_cents_mean, m.pass_rate)

    evolved = [c for c in archive.scored() if getattr(c, split) is not None and getattr(c, split).ok]
    points, fr = front_points(evolved, pt, pt)
    experts = []
    for c in archive.candidates:
        m = getattr(c, split)
        if c.expert and m is not None and m.ok:
            marker, color = EXPERT_STYLE.get(c.spec, ("o", "black"))
            # hollow: a tuned setting (or the tuning-only arm's choice) beside the filled fixed experts
            experts.append(Marker(c.label, pt(c), marker, color, hollow=c.proposer in ("expert-tuned", "tuning-only")))
    plane(path, points, fr, experts, xlabel="mean cost per task (cents)", ylabel="pass rate",
          title=f"cost vs pass rate ({split})")


def _lineage(archive: Archive, best: Candidate | None, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    if best is not None:
        nodes = archive.lineage(best.id)
        by_gen: dict[int, list[Candidate]] = {}
        for c in nodes:
            by_gen.setdefault(c.generation, []).append(c)
        pos = {c.id: (c.generation, i - (len(v) - 1) / 2) for g, v in by_gen.items() for i, c in enumerate(v)}
        for c in nodes:
            for p in c.parents:
                if p in pos:
                    ax.annotate("", xy=pos[c.id], xytext=pos[p], arrowprops={"arrowstyle": "->", "color": "#888"})
        for c in nodes:
            x, y = pos[c.id]
            ax.scatter([x], [y], s=60, color="#2ca02c" if c.id == best.id else "#1f77b4", zorder=3)
            ax.annotate(f"{c.label}\n{c.proposer}", (x, y), textcoords="offset points", xytext=(0, 8), ha="center",
                        fontsize=6)
        ax.set_xlim(-0.5, max(by_gen) + 0.5)
    ax.set_xlabel("generation")
    ax.set_yticks([])
    ax.set_title("lineage of the best policy")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _families(archive: Archive, best: Candidate | None, path: Path) -> None:
    rows = [c for c in archive.candidates if c.expert and c.status is Status.OK] + ([best] if best else [])
    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    fams: list[str] = sorted({f for c in rows for m in (c.heldout, c.train) if m for f in m.per_family})
    width = 0.8 / max(1, len(rows))
    for i, c in enumerate(rows):
        m = c.heldout if c.heldout is not None and c.heldout.ok else c.train
        if m is None:
            continue
        ax.bar([j + i * width for j in range(len(fams))], [m.per_family.get(f, 0.0) for f in fams], width,
               label=c.label)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(fams))], [f.replace("-", "\n") for f in fams], fontsize=7)
    ax.set_ylabel("pass rate (held-out where measured)")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=6)
    ax.set_title("per-family pass rates")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _row(c: Candidate) -> dict[str, Any]:
    return {"label": c.label, "expert": c.expert, "generation": c.generation, "proposer": c.proposer,
            "train pass": c.train.pass_rate if c.train else None,
            "train cost (c)": c.train.cost_cents_mean if c.train else None,
            "held-out pass": c.heldout.pass_rate if c.heldout else None,
            "held-out cost (c)": c.heldout.cost_cents_mean if c.heldout else None, "params": c.params}


def _fidelity_section(run: Path) -> str:
    """The evaluation cascade's check (``fidelity.json``), when the run used it: how well the
    zero-forward proxy ranked policies the way the model did. Its numbers are predictions and are
    labelled so; every pass rate elsewhere in the report is the model's."""
    path = run / "fidelity.json"
    if not path.exists():
        return ""
    fid = json.loads(path.read_text())
    rows = [{"policy": k, "predicted pass (proxy)": v["predicted_pass"], "model pass": v["model_pass"]}
            for k, v in sorted(fid.get("pairs", {}).items())]
    return (f"<h2>Evaluation cascade</h2><p>{html.escape(fid.get('summary', ''))}. "
            f"{fid.get('screened_trials', 0)} proxy trials screened this attempt; only promoted ones met the "
            f"model.{_speed_line(fid.get('speed') or {})}</p>"
            f"{table(rows, ['policy', 'predicted pass (proxy)', 'model pass'])}")


def _speed_line(speed: dict[str, Any]) -> str:
    """The measured evaluations per minute at each fidelity (one evaluator each), in words."""
    per_min = speed.get("per_minute") or {}
    counts = speed.get("counts") or {}
    parts = [f"{fid}: {per_min[fid]:,.1f} a minute over {counts.get(fid, 0)} evaluations"
             for fid in ("model", "proxy") if isinstance(per_min.get(fid), (int, float))]
    if not parts:
        return ""
    ratio = speed.get("ratio")
    tail = f"; the proxy is {ratio:,.0f}x faster" if isinstance(ratio, (int, float)) else ""
    return " Policy-task evaluations measured in this attempt, " + "; ".join(parts) + tail + "."


HEADROOM_ROWS = (("full", "full cache"), ("tuned_seed", "tuned seed program"), ("evolved", "best evolved"),
                 ("single_rolling", "rolling drop, one setting (hindsight)"),
                 ("per_task_rolling", "rolling drop, tuned per task (hindsight)"),
                 ("rule_table", "rule table: role, tool, length (hindsight)"), ("oracle", "hindsight oracle"))


def headroom_rows(headroom: dict[str, Any]) -> list[dict[str, Any]]:
    """The headroom table: each policy's summed held-out cost, its change against the full cache, its pass rate."""
    costs, passes = headroom.get("costs_cents") or {}, headroom.get("pass_rates") or {}
    full = costs.get("full") or 0.0
    return [{"policy": label, "held-out cost (c, summed)": costs[key],
             "vs full": f"{100 * (costs[key] / full - 1):+.1f}%" if full else "",
             "held-out pass": passes.get(key)} for key, label in HEADROOM_ROWS if key in costs]


def _headroom_section(run: Path, headroom: dict[str, Any] | None) -> str:
    parts = []
    if headroom:
        parts.append(f"<h2>Headroom (held-out)</h2><p>{html.escape(headroom_line(headroom))} The oracle knows the "
                     "probes; the rolling-drop bounds choose their setting with hindsight, per task or once for "
                     "all tasks; the rule table keeps or drops each message by its role, tool and length, the "
                     "cells chosen with hindsight of these tasks' evidence (a probe-blind policy); every pass "
                     "rate is the model's. Details: headroom.json.</p>")
        parts.append(table(headroom_rows(headroom), ["policy", "held-out cost (c, summed)", "vs full",
                                                      "held-out pass"]))
    ablation = run / "ablation.json"
    if ablation.exists():
        a = json.loads(ablation.read_text())
        arms = a.get("arms") or [a | {"arm": "tuning-only"}]
        rows = []
        for arm in arms:
            choice = arm.get("choice") or {}
            rows.append({"arm": arm.get("arm", "?"), "train evaluations": arm.get("spent_train_evaluations"),
                         "budget": arm.get("budget_train_evaluations"), "rounds": arm.get("rounds"),
                         "choice on train": choice.get("reason", "none")})
        parts.append("<h2>Baseline arms</h2><p>Each arm spends the model evaluations the generations spent, from the "
                     "same tuned seeds, in an archive of its own: tuning-only tunes the seed programs again, random "
                     "draws independent programs from the synthesis grammar, hillclimb edits its best program so far "
                     "one random step at a time. Each arm's choice on train is a headline comparison under the "
                     "arm's name.</p>")
        parts.append(table(rows, ["arm", "train evaluations", "budget", "rounds", "choice on train"]))
    return "".join(parts)


def write_report(run_dir: str | Path) -> list[Path]:
    """Write ``report.html`` and ``figures/*.png`` for ``run_dir``; returns the figure paths."""
    run = Path(run_dir)
    archive = Archive.load(run / "archive.json")
    config = RunDir(run).cache_config
    figs = run / "figures"
    figs.mkdir(exist_ok=True)
    paths = {name: figs / f"{name}.png" for name in ("pareto_train", "pareto_heldout", "hypervolume", "lineage",
                                                     "families")}
    scored = [c for c in archive.scored() if c.heldout is not None and c.heldout.ok] or archive.scored()
    best = max(scored, key=lambda c: (c.shown.pass_rate, -c.shown.cost_cents_mean),
               default=None) if scored else None
    _plane(archive, "train", paths["pareto_train"])
    _plane(archive, "heldout", paths["pareto_heldout"])
    hypervolume_figure(archive.hv_history, paths["hypervolume"])
    _lineage(archive, best, paths["lineage"])
    _families(archive, best, paths["families"])
    experts = [c for c in archive.candidates if c.expert]
    failures = [{"label": c.label, "generation": c.generation, "proposer": c.proposer, "status": c.status.value,
                 "reason": c.reason} for c in archive.failures()]
    stats_path = run / "proposer_stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    hv = archive.hv_history
    cols = ["label", "expert", "generation", "proposer", "train pass", "train cost (c)", "held-out pass",
            "held-out cost (c)", "params"]
    lines = headline_lines(read_headline(run), archive, heldout_reused=config.data.heldout_reused)
    headroom = read_headroom(run)
    if headroom:
        lines.append(headroom_line(headroom))
    proposer_html, proposer_figures = proposer_section(run, archive)
    fidelity_html = _fidelity_section(run)
    guard = (" under the frame guard (drops wait until an assistant turn read the message; system prompt and "
             "task kept)" if config.eval.frame_guard else "")
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>AKV-RSI search report: {html.escape(config.name)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}}
table{{border-collapse:collapse;font-size:12px;margin:1em 0}}td,th{{border:1px solid #ccc;padding:3px 6px}}
img{{max-width:100%;margin:0.5em 0}}.headline{{background:#f3f8f3;border-left:4px solid #2ca02c;padding:0.6em}}
</style></head><body>
<h1>Search report: {html.escape(config.name)}</h1>
<p>Model {html.escape(config.model.name)} ({html.escape(config.model.template)} template),
suite {html.escape(str(config.data.suite))}, scoring {html.escape(config.eval.scoring)}{guard},
rates {html.escape(config.eval.rates)} (unconfirmed list prices: compare ratios, not dollars),
{len(archive.candidates)} archive entries, {len(archive.failures())} recorded failures,
{len(hv) - 1 if hv else 0} generations. The summarization baselines use the deterministic extractive
summarizer (a generous upper bound on their quality).</p>
<h2>Headline</h2><div class="headline">{"<br>".join(html.escape(x) for x in lines)}</div>
<p>Paired over held-out tasks, 95% percentile-bootstrap intervals ({config.bootstrap_samples} resamples);
significant: the cost interval excludes 0, the pass-rate interval's lower bound is at least -0.05, and at least
5 held-out tasks were paired.
Tuned experts (hollow markers) had their setting tuned on train with the evolved programs' trial budget.
Details: headline.json.</p>
{_headroom_section(run, headroom)}
{fidelity_html}
<h2>Cost vs pass rate</h2>{img(paths['pareto_train'])}{img(paths['pareto_heldout'])}
<h2>Pareto front and experts</h2>{table([_row(c) for c in archive.front() + experts], cols)}
<h2>Hypervolume per generation</h2>{img(paths['hypervolume'])}
{table(hv, ['generation', 'hypervolume', 'front_size', 'candidates'])}
<h2>Lineage of the best policy</h2>{img(paths['lineage'])}
<h2>Per-family pass rates</h2>{img(paths['families'])}
<h2>Proposer</h2>{table([stats], list(stats)) if stats else '<p>no proposals yet</p>'}
{proposer_html}
<h2>Recorded failures</h2>{table(failures, ['label', 'generation', 'proposer', 'status', 'reason'])
                          if failures else '<p>none</p>'}
</body></html>"""
    (run / "report.html").write_text(page)
    return list(paths.values()) + proposer_figures
