"""``akv export``: write an archived policy as a standalone module (see ``search_spaces.export``)."""

from __future__ import annotations

from pathlib import Path

from engine.errors import AKVError
from rsi.archive import Archive, Candidate
from search_spaces import Policy, export_policy, get_policy


def pick(archive: Archive, name: str) -> Candidate:
    """A candidate by id, label, or ``best`` (highest held-out pass rate, then lowest cost)."""
    if name == "best":
        scored = [c for c in archive.scored() if c.heldout is not None and c.heldout.ok] or archive.scored()
        if not scored:
            raise AKVError("this run has no scored evolved policy to export", field="pick", value=name)
        return max(scored, key=lambda c: (c.shown.pass_rate, -c.shown.cost_cents_mean))
    for c in archive.candidates:
        if name in (c.id, c.label):
            return c
    labels = ", ".join(sorted({c.label for c in archive.candidates}))
    raise AKVError(f"no candidate {name!r} in this run; valid picks: best, an id, or one of: {labels}",
                   field="pick", value=name)


def export_pick(run_dir: Path, name: str, out: Path) -> Path:
    archive = Archive.load(run_dir / "archive.json")
    c = pick(archive, name)
    if c.spec == "program":
        policy = Policy.from_program((run_dir / "programs" / f"{c.program}.py").read_text(), c.params)
    else:
        policy = get_policy(c.spec, **c.params)
    export_policy(policy, out)
    return out
