"""Probe calibration: does a probe format separate "evidence in the cache" from "evidence dropped"?

For a sample of tasks, every probe is answered twice on the real model: with the full cache
(policy ``full``) and with exactly its evidence messages dropped (the ``drop_evidence``
diagnostic), each scored two ways: log-likelihood ranking of the candidates (multiple choice,
lm-evaluation-harness style) and greedy generation with normalised exact match. A usable format
passes most probes with the full cache and falls to chance without the evidence; the targets
(:class:`Targets`) say how much is enough. Without that spread the scoreboard cannot tell
policies apart.

This module runs and aggregates; ``python -m evals.cache.probe_calibration_cli`` is its command line. It does not
choose formats: the calibrated defaults live in :class:`evals.cache.probes.ProbeFormat` and
:class:`evals.cache.evaluator.EvalConfig` (docs/tasks.md, "Calibration").
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.engine import Engine
from engine.files import atomic_write
from evals.cache.evaluator import DIAGNOSTIC, EvalConfig, PolicySpec, TaskResult, evaluate
from evals.cache.probes import ProbeFormat, probe_prompt
from evals.tasks.schema import Task

FULL = "full"


@dataclass(frozen=True)
class Targets:
    """What a calibrated format must reach on every family.

    Attributes:
        full_mc: least log-likelihood pass rate with the full cache.
        drop_mc_over_chance: most log-likelihood pass rate with the evidence dropped, above chance
            (chance: the mean of 1 / number of candidates).
        full_gen: least greedy exact-match rate with the full cache (an aim, not required).
        drop_gen: most greedy exact-match rate with the evidence dropped (an aim, not required).
    """

    full_mc: float = 0.80
    drop_mc_over_chance: float = 0.10
    full_gen: float = 0.80
    drop_gen: float = 0.25


@dataclass(frozen=True)
class ProbeOutcome:
    """One probe under both conditions."""

    task_id: str
    family: str
    kind: str
    answer: str
    lead_in: str
    n_candidates: int
    full_choice: str
    full_generated: str
    full_mc: bool
    full_exact: bool
    drop_choice: str
    drop_generated: str
    drop_mc: bool
    drop_exact: bool
    full_mc_norm: bool = False
    drop_mc_norm: bool = False


@dataclass(frozen=True)
class FamilyRow:
    """Per-family pass rates (fractions of probes) under both conditions and both scorings."""

    family: str
    tasks: int
    probes: int
    chance: float
    full_mc: float
    full_gen: float
    drop_mc: float
    drop_gen: float

    def meets(self, targets: Targets) -> dict[str, bool]:
        """Which targets this family meets (``mc`` ones are required, ``gen`` ones an aim)."""
        return {"full_mc": self.full_mc >= targets.full_mc,
                "drop_mc": self.drop_mc <= self.chance + targets.drop_mc_over_chance + 1e-9,
                "full_gen": self.full_gen >= targets.full_gen,
                "drop_gen": self.drop_gen <= targets.drop_gen + 1e-9}


@dataclass(frozen=True)
class Calibration:
    """A calibration run: its settings, the per-family table and every probe's outcome."""

    split: str
    template: str
    model: str
    probe_format: dict[str, Any]
    rows: tuple[FamilyRow, ...]
    outcomes: tuple[ProbeOutcome, ...]
    failures: tuple[str, ...]
    seconds: float
    targets: Targets = field(default_factory=Targets)
    suite: str = ""
    generator_version: str = ""
    dtype: str = "float32"  # the engine's weights and KV

    @property
    def total(self) -> FamilyRow:
        return _row("all", self.outcomes)

    @property
    def ok(self) -> bool:
        """Every family meets the required (log-likelihood) targets and no evaluation failed."""
        return not self.failures and all(r.meets(self.targets)["full_mc"] and r.meets(self.targets)["drop_mc"]
                                         for r in self.rows)

    def table(self) -> str:
        """The per-family table as text (rates as fractions; ``*`` marks a missed target)."""
        head = (f"{'family':<31} {'tasks':>5} {'probes':>6} {'chance':>6}   {'full mc':>7} {'full gen':>8}   "
                f"{'drop mc':>7} {'drop gen':>8}")
        lines = [head, "-" * len(head)]
        for r in (*self.rows, self.total):
            m = r.meets(self.targets)
            mark = {k: " " if v else "*" for k, v in m.items()}
            lines.append(f"{r.family:<31} {r.tasks:>5} {r.probes:>6} {r.chance:>6.2f}   "
                         f"{r.full_mc:>6.2f}{mark['full_mc']} {r.full_gen:>7.2f}{mark['full_gen']}   "
                         f"{r.drop_mc:>6.2f}{mark['drop_mc']} {r.drop_gen:>7.2f}{mark['drop_gen']}")
        t = self.targets
        lines.append(f"targets: full mc >= {t.full_mc:.2f}, drop mc <= chance + {t.drop_mc_over_chance:.2f} "
                     f"(required); full gen >= {t.full_gen:.2f}, drop gen <= {t.drop_gen:.2f} (aim); * = missed")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"split": self.split, "suite": self.suite, "generator_version": self.generator_version,
                "model": self.model, "dtype": self.dtype, "template": self.template, "probe_format": self.probe_format,
                "targets": asdict(self.targets), "ok": self.ok, "seconds": round(self.seconds, 1),
                "machine": platform.platform(),
                "families": [asdict(r) | {"meets": r.meets(self.targets)} for r in self.rows],
                "total": asdict(self.total), "failures": list(self.failures),
                "probes": [asdict(o) for o in self.outcomes]}

    def write(self, path: str | Path, extra: Mapping[str, Any] | None = None) -> Path:
        """The JSON of :meth:`to_json` (and ``extra``'s keys) at ``path``, written atomically (a
        crash leaves the previous file whole)."""
        path = Path(path)
        atomic_write(path, (json.dumps(self.to_json() | dict(extra or {}), indent=1, ensure_ascii=False)
                            + "\n").encode("utf-8"))
        return path


FLAGS = ("full_mc", "full_exact", "drop_mc", "drop_exact")


def compare(ours: Sequence[ProbeOutcome], theirs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Probe by probe against another calibration's ``probes`` (its JSON): for each pass flag, how
    many probes both ran and how many of them passed in each and changed between them. Probes are
    matched by task, lead-in and answer; those in only one of the two are counted, not compared.

    Raises:
        ValueError: no probe in common (not a calibration of the same tasks).
    """
    def key(o: Mapping[str, Any]) -> tuple[str, str, str]:
        return o["task_id"], o["lead_in"], o["answer"]

    other = {key(o): o for o in theirs}
    mine = {key(asdict(o)): asdict(o) for o in ours}
    common = [k for k in mine if k in other]
    if not common:
        raise ValueError("no probe in common with the other calibration: not the same tasks")
    out: dict[str, Any] = {"probes": len(common), "only_here": len(mine) - len(common),
                           "only_there": len(other) - len(common)}
    for flag in FLAGS:
        a = [bool(other[k][flag]) for k in common]
        b = [bool(mine[k][flag]) for k in common]
        out[flag] = {"there": sum(a), "here": sum(b), "gained": sum(y and not x for x, y in zip(a, b)),
                     "lost": sum(x and not y for x, y in zip(a, b))}
    return out


def _row(family: str, outcomes: Sequence[ProbeOutcome]) -> FamilyRow:
    n = len(outcomes)

    def rate(flag: str) -> float:
        return sum(getattr(o, flag) for o in outcomes) / n if n else float("nan")

    chance = sum(1 / o.n_candidates for o in outcomes) / n if n else float("nan")
    return FamilyRow(family, len({o.task_id for o in outcomes}), n, chance, rate("full_mc"), rate("full_exact"),
                     rate("drop_mc"), rate("drop_exact"))


def sample_tasks(tasks: Sequence[Task], per_family: int) -> list[Task]:
    """``per_family`` tasks of each family, spread evenly over the family's tasks (lengths, domains)."""
    by_family: dict[str, list[Task]] = {}
    for t in tasks:
        by_family.setdefault(t.family, []).append(t)
    picked = []
    for family_tasks in by_family.values():
        n = len(family_tasks)
        k = min(per_family, n)
        picked += [family_tasks[(2 * i + 1) * n // (2 * k)] for i in range(k)]
    return picked


def outcomes_of(tasks: Iterable[Task], results: Sequence[TaskResult], fmt: ProbeFormat) -> list[ProbeOutcome]:
    """Pair each probe's ``full`` and ``drop_evidence`` results (failed evaluations are skipped)."""
    by = {(r.task_id, r.policy): r for r in results if r.ok}
    out = []
    for t in tasks:
        full, drop = by.get((t.id, FULL)), by.get((t.id, DIAGNOSTIC))
        if full is None or drop is None:
            continue
        for p, f, d in zip(t.probes, full.probes, drop.probes):
            out.append(ProbeOutcome(t.id, t.family, p.kind, p.answer, probe_prompt(t, p, fmt).prefix, len(p.candidates),
                                    f.choice, f.generated, f.mc_correct, f.exact, d.choice, d.generated,
                                    d.mc_correct, d.exact, f.mc_norm_correct, d.mc_norm_correct))
    return out


def calibrate(engine: Engine, tasks: Sequence[Task], config: EvalConfig | None = None, *, split: str = "",
              template: str = "", suite: str = "", targets: Targets | None = None,
              on_result: Callable[[TaskResult], None] | None = None) -> Calibration:
    """Answer every probe of ``tasks`` with the full cache and with its evidence dropped; aggregate by family.

    Args:
        engine: the engine (its chat template is the one calibrated; name it in ``template``).
        tasks: the sample (see :func:`sample_tasks`).
        config: scoring settings; its probe format is the one calibrated (default: the defaults).
        split, template, suite: labels recorded with the result.
        targets: what counts as calibrated (default :class:`Targets`).
        on_result: called after each (policy, task) evaluation (progress).
    """
    config = config or EvalConfig()
    t0 = time.perf_counter()
    results = evaluate(engine, [PolicySpec(FULL), PolicySpec(DIAGNOSTIC)], tasks, config, on_result)
    failures = tuple(f"{r.task_id} {r.policy}: {r.error}" for r in results if not r.ok)
    outcomes = outcomes_of(tasks, results, config.probe)
    families = list(dict.fromkeys(t.family for t in tasks))
    rows = tuple(_row(f, [o for o in outcomes if o.family == f]) for f in families)
    versions = sorted({t.generator_version for t in tasks})
    return Calibration(split, template or engine.renderer.template.name, engine.name, config.probe.as_dict(), rows,
                       tuple(outcomes), failures, time.perf_counter() - t0, targets or Targets(), suite,
                       ",".join(versions), str(engine.model.dtype).removeprefix("torch."))
