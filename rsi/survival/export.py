"""``akv export RUN_DIR`` of a survival run: a chosen survival program as a standalone module.

Picks: ``best`` (the headline's policy: the best evolved candidate on train, lowest p95 resume
TTFT then fewest recompute tokens), an id, or a label. A tuned built-in family (``tuned:ttl``)
is exported through its seed program (same parameters, same decisions). The module is written
by ``search_spaces.export.export_survival_program`` (the cache export's containment: re-checked
on import, restricted builtins); only the ``module`` format exists for survival policies.
"""

from __future__ import annotations

from pathlib import Path

from engine.errors import AKVError
from rsi.survival.archive import SurvivalArchive, SurvivalCandidate
from search_spaces.errors import PolicyError
from search_spaces.export import export_survival_program
from search_spaces.survival import SURVIVAL_SEEDS, survival_seed_source


def pick_survival(archive: SurvivalArchive, name: str) -> SurvivalCandidate:
    if name == "best":
        best = archive.best()
        if best is None:
            raise AKVError("this survival run has no scored evolved program; pick a tuned family by label",
                           field="pick", value=name)
        return best
    for c in archive.candidates:
        if name in (c.id, c.label):
            return c
    labels = ", ".join(sorted({c.label for c in archive.candidates}))
    raise AKVError(f"no candidate {name!r} in this run; valid picks: best, an id, or one of: {labels}", field="pick",
                   value=name)


def export_survival_pick(run_dir: Path, name: str, out: Path, format: str = "module") -> Path:
    """Write candidate ``name`` of survival run ``run_dir`` to ``out`` (see the module docstring).

    Raises:
        AKVError: an unknown pick, a failed candidate, a missing program, or a format other than ``module``.
    """
    if format != "module":
        raise PolicyError(f"a survival policy exports only as --format module, not {format!r}", field="format",
                          value=format)
    c = pick_survival(SurvivalArchive.of_run(run_dir), name)
    if c.train is None or not c.train.ok:
        raise AKVError(f"{c.label} ({c.id}) has no score ({c.status.value}: {c.reason}); pick a scored candidate",
                       field="pick", value=name)
    if c.spec == "program":
        path = run_dir / "programs" / f"{c.program}.py"
        if not path.is_file():
            raise AKVError(f"{c.label} ({c.id}): its program {path} is missing from the run directory", field="pick",
                           value=c.id)
        source, label = path.read_text(encoding="utf-8"), f"{c.label} (program {c.program[:12]})"
    elif c.spec in SURVIVAL_SEEDS:
        source, label = survival_seed_source(c.spec), f"{c.label} (the {c.spec} family's seed program)"
    else:
        raise PolicyError(f"survival family {c.spec!r} has no program form to export", field="pick", value=c.spec)
    try:
        return export_survival_program(source, c.params, out, label)
    except PolicyError as err:
        raise PolicyError(f"cannot export {c.label} ({c.id}): {err}", field="pick", value=name) from err
