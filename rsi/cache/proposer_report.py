"""The report's proposer section: how each operator's offspring did by generation, and the niche map.

:func:`operator_rows` and :func:`niche_rows` return the table data; :func:`proposer_section`
renders them as HTML and draws ``figures/niches.png`` (the elites' cells on the dropped-share x
repositions plane, coloured by train pass rate). Everything is read from the run directory
(``archive.json``, ``niches.json``, ``proposer_stats.json``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from rsi.cache.archive import Archive
from rsi.cache.niches import DROPPED_EDGES, REPOSITION_EDGES
from rsi.proposers.bandit import operator_table
from rsi.proposers.llm import PREFIX
from rsi.reporting import img, table


def operator_rows(archive: Archive) -> list[dict[str, Any]]:
    """Per generation and operator (``mutation:<op>`` offspring, named ``<op>``) or LLM prompt
    variant (``llm:<variant>``, named so): offspring, valid (scored) rate, front (success) rate,
    mean bandit reward."""
    rows = [dict(r) for r in operator_table(archive)]
    rows += [{**r, "operator": PREFIX + str(r["operator"])} for r in operator_table(archive, prefix=PREFIX)]
    return sorted(rows, key=lambda r: (r["generation"], r["operator"]))


def niche_rows(run: Path) -> list[dict[str, Any]]:
    """The occupied cells of ``niches.json`` (empty when the run wrote none)."""
    path = run / "niches.json"
    if not path.exists():
        return []
    cells = json.loads(path.read_text()).get("cells", [])
    return [c for c in cells if isinstance(c, dict)]


def _figure(rows: list[dict[str, Any]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    grid: dict[tuple[int, int], float] = {}
    for r in rows:
        x, y = int(r["cell"][0]), int(r["cell"][1])
        grid[(x, y)] = max(grid.get((x, y), 0.0), float(r.get("train_pass") or 0.0))
    nx, ny = len(DROPPED_EDGES) + 1, len(REPOSITION_EDGES) + 1
    data = [[grid.get((x, y), float("nan")) for x in range(nx)] for y in range(ny)]
    im = ax.imshow(data, origin="lower", cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for (x, y), v in grid.items():
        ax.text(x, y, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if v < 0.6 else "black")
    ax.set_xticks(range(nx), ["0", "<=.1", "<=.25", "<=.5", ">.5"][:nx], fontsize=7)
    ax.set_yticks(range(ny), ["0", "<=1", "<=4", ">4"][:ny], fontsize=7)
    ax.set_xlabel("share of prompt tokens dropped")
    ax.set_ylabel("repositions per task")
    ax.set_title("niche map: best train pass rate per cell")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def proposer_section(run_dir: str | Path, archive: Archive) -> tuple[str, list[Path]]:
    """HTML of the proposer section and the figures it drew."""
    run = Path(run_dir)
    parts = ["<h2>Operators by generation</h2>",
             "<p>Offspring of each mutation operator or LLM prompt variant (<code>llm:</code>; each chosen "
             "by a UCB1 bandit over these outcomes): the "
             "share that got a train score (valid), the share that entered the evolved front (success) and "
             "the mean bandit reward.</p>"]
    ops = operator_rows(archive)
    parts.append(table(ops, ["generation", "operator", "offspring", "valid_rate", "front_rate", "mean_reward"])
                 if ops else "<p>no offspring of a proposer</p>")
    stats_path = run / "proposer_stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    attempts = [{"operator": k, **v, "validity": v["valid"] / v["attempts"] if v.get("attempts") else None}
                for k, v in sorted((stats.get("operators") or {}).items())]
    if attempts:
        parts.append("<p>Edits tried per operator (checker and smoke run), this attempt:</p>"
                     + table(attempts, ["operator", "attempts", "valid", "validity"]))
    rows = niche_rows(run)
    figures: list[Path] = []
    parts.append("<h2>Niche map</h2>")
    if rows:
        figs = run / "figures"
        figs.mkdir(exist_ok=True)
        path = figs / "niches.png"
        _figure(rows, path)
        figures.append(path)
        parts.append(img(path))
        parts.append(table(rows, ["dropped_share", "repositions", "evidence_kept", "candidates", "elite", "proposer",
                                   "train_pass", "train_cost"]))
    else:
        parts.append("<p>no niches recorded</p>")
    return "\n".join(parts), figures
