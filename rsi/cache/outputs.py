"""What a search writes as each generation closes and when it finishes: ``archive.json``,
``pareto.json`` (the front and the experts, every number the model's), ``headline.json`` (with the
held-out headroom when measured), ``fidelity.json`` (``cascade.enabled``) and ``replicas.json`` (when
the executor reports its replicas); and the reference cost of the hypervolume each generation records.
"""

from __future__ import annotations

from typing import Any

from rsi.cache.archive import Archive
from rsi.cache.cascade import Cascade
from rsi.cache.config import SearchConfig
from rsi.cache.evaluations import Evaluations
from rsi.cache.headline import build_headline, write_headline
from rsi.rundir import RunDir


def ref_cost(archive: Archive) -> float:
    """Reference cost of the hypervolume: 1.1 x the full-cache expert's train cost (fixed per run)."""
    experts = [c for c in archive.candidates if c.expert and c.proposer == "expert" and c.train
               and c.train.ok]  # the fixed experts only, so tuning experts leaves the reference as it was
    costs = [c.train.cost_cents_mean for c in experts if c.train] or [1.0]
    return 1.1 * max(costs)


def pareto_rows(archive: Archive) -> list[dict[str, Any]]:
    """The rows of ``pareto.json``: ``archive``'s front, then its experts."""
    rows = []
    experts = [c for c in archive.candidates if c.expert]
    for c in archive.front() + experts:
        rows.append({
            "id": c.id, "label": c.label, "program": c.program, "params": c.params, "expert": c.expert,
            "generation": c.generation, "proposer": c.proposer, "parents": list(c.parents),
            "train": ({"pass_rate": c.train.pass_rate, "cost_cents_mean": c.train.cost_cents_mean}
                      if c.train else None),
            "heldout": ({"pass_rate": c.heldout.pass_rate, "cost_cents_mean": c.heldout.cost_cents_mean}
                        if c.heldout else None),
            "train_pass_rate": c.train.pass_rate if c.train else None,
            "train_cost_cents_mean": c.train.cost_cents_mean if c.train else None,
            "heldout_pass_rate": c.heldout.pass_rate if c.heldout else None,
            "heldout_cost_cents_mean": c.heldout.cost_cents_mean if c.heldout else None,
            "fidelity": "model",  # every number here was answered by the model (proxy numbers: fidelity.json)
        })
    return rows


def write_outputs(config: SearchConfig, archive: Archive, evals: Evaluations, cascade: Cascade, files: RunDir,
                  headroom: dict[str, Any] | None) -> None:
    """Write the search's outputs (module docstring) into ``files``."""
    archive.save(files / "archive.json")
    files.write("pareto.json", pareto_rows(archive))
    write_headline(files.path, build_headline(archive, evals.heldout_results, evals.train_results,
                                              samples=config.bootstrap_samples, seed=config.seed), headroom)
    if config.cascade.enabled:  # the speed counts include the held-out evaluations made after the screens
        cascade.write()
    stats = evals.executor_stats()
    if stats is not None:
        files.write("replicas.json", stats)
