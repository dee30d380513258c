"""Where a stored result came from: the command, the code's commit, the config's commit, the model
and judge, the machine's load when it started, the date, and which modules it measures.

Every result file under ``bench/results/`` carries one as its ``provenance`` key (``bench.write_result``
and ``akv pool`` write it; ``akv search`` writes ``provenance.json`` into its run directory as it
finishes, with what held when it started, which ``akv pool`` and ``bench.run_result`` read back).
:func:`stale` tells whether a measured module changed after the result's commit, which is what
``python -m bench.render_results`` marks.

Not for: deciding whether a result is right (a rerun and ``python -m bench.same_result`` do that).
Git is asked, never required: outside a checkout every git field is ``None`` and said to be unknown.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.files import atomic_write

ROOT = Path(__file__).resolve().parent.parent
"""The repository root (git runs here, whatever the caller's working directory)."""

STARTED = time.time()
LOAD_AT_START = os.getloadavg()
"""The process's start, as near as an import can see it: what "the machine's load at start" records."""

FIELDS = ("command", "commit", "dirty", "configs", "model", "dtype", "judge", "load_average_start", "date",
          "measures")


@dataclass(frozen=True)
class Provenance:
    """Where one result came from.

    ``commit`` is the code's commit when the command ran (``dirty``: the measured modules had
    uncommitted changes then); ``configs`` maps each config file a search ran to the commit that last
    changed it before the run (``None``: not committed); ``measures`` lists the repository paths whose
    change makes the result stale. ``recorded_in`` is set for results written before provenance
    existed: the commit that stored the file, recovered from git history; the fields it could not
    recover are listed in ``unknown``.
    """

    command: str | None
    commit: str | None
    dirty: bool | None
    configs: Mapping[str, str | None]
    model: str | None
    dtype: str | None
    judge: str | None
    load_average_start: Sequence[float] | None
    date: str | None
    measures: Sequence[str]
    recorded_in: str | None = None
    unknown: Sequence[str] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.measures:
            raise ValueError("a result's provenance must name the modules it measures (measures is empty)")
        for path in self.measures:
            if Path(path).is_absolute() or ".." in Path(path).parts:
                raise ValueError(f"measures: {path!r} is not a path inside the repository")

    @property
    def since(self) -> str | None:
        """The commit after which a change to a measured module makes the result stale."""
        return self.commit or self.recorded_in

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["configs"] = dict(self.configs)
        d["measures"] = list(self.measures)
        d["unknown"] = list(self.unknown)
        d["load_average_start"] = list(self.load_average_start) if self.load_average_start else None
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Provenance:
        missing = [k for k in FIELDS if k not in d]
        if missing:
            raise ValueError(f"provenance lacks {', '.join(missing)}")
        return cls(command=d["command"], commit=d["commit"], dirty=d["dirty"], configs=dict(d["configs"] or {}),
                   model=d["model"], dtype=d["dtype"], judge=d["judge"],
                   load_average_start=d["load_average_start"], date=d["date"], measures=tuple(d["measures"]),
                   recorded_in=d.get("recorded_in"), unknown=tuple(d.get("unknown") or ()))


def git(*args: str, root: Path = ROOT) -> str | None:
    """``git ARGS`` in the repository ``root``, its output stripped; ``None`` when git or the checkout is
    missing or the command fails."""
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def head_commit() -> str | None:
    return git("rev-parse", "HEAD") or None


def dirty(paths: Sequence[str]) -> bool | None:
    """Whether any of ``paths`` has uncommitted changes (``None`` outside a checkout)."""
    out = git("status", "--porcelain", "--", *paths)
    return None if out is None else bool(out)


def config_commit(path: str | Path) -> str | None:
    """The commit that last changed ``path``, when the file as it is now is that commit's; else ``None``
    (untracked, or edited since)."""
    rel = _relative(path)
    if rel is None or git("ls-files", "--error-unmatch", rel) is None or dirty([rel]):
        return None
    return git("log", "-1", "--format=%H", "--", rel) or None


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command as a user would type it again: ``python -m bench.x ...`` or ``akv ...``."""
    argv = list(sys.argv if argv is None else argv)
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    head = (f"python -m {spec.name}" if spec is not None and spec.name != "__main__"
            else Path(argv[0]).name if argv else "python")
    if head.endswith(".__main__"):
        head = head[: -len(".__main__")]
    if head in ("python -m rsi.cli", "cli.py"):
        head = "akv"
    return " ".join([head, *(shlex.quote(a) for a in argv[1:])])


def capture(*, measures: Sequence[str], model: str | None = None, dtype: str | None = None,
            judge: str | None = None, configs: Sequence[str | Path] = (),
            command: str | None = None) -> Provenance:
    """The provenance of a result this process is about to write."""
    return Provenance(command=command or command_line(), commit=head_commit(), dirty=dirty(list(measures)),
                      configs={str(_relative(c) or c): config_commit(c) for c in configs},
                      model=model, dtype=dtype, judge=judge, load_average_start=list(LOAD_AT_START),
                      date=time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(STARTED)), measures=tuple(measures))


@dataclass(frozen=True)
class Staleness:
    """Whether a result is still current: ``changes`` are the commits after ``since`` that touched a
    measured module (empty: current); ``known`` is false when git or the commit is not available."""

    since: str | None
    changes: tuple[str, ...]
    known: bool

    @property
    def stale(self) -> bool:
        return bool(self.changes)


def stale(prov: Provenance, *, cleared_at: str | None = None, root: Path = ROOT) -> Staleness:
    """Which commits changed a measured module after the result was made (or after ``cleared_at``: a
    later rerun found the same result), in the repository ``root``."""
    since = cleared_at or prov.since
    if since is None:
        return Staleness(None, (), known=False)
    out = git("log", "--format=%h", f"{since}..HEAD", "--", *prov.measures, root=root)
    if out is None:
        return Staleness(since, (), known=False)
    return Staleness(since, tuple(out.split()), known=True)


def is_ancestor(older: str, newer: str, root: Path = ROOT) -> bool:
    """Whether commit ``older`` is ``newer`` or one of its ancestors (``False`` when git cannot say)."""
    try:
        subprocess.run(["git", "merge-base", "--is-ancestor", older, newer], cwd=root, capture_output=True,
                       timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


def _relative(path: str | Path) -> str | None:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return None


RUN_FILE = "provenance.json"
"""A search's provenance in its run directory: where it started, and each resume after."""


def record_run(run_dir: str | Path, prov: Provenance) -> Path:
    """Write ``prov`` as the run's ``provenance.json`` (a new run), or add it to the file's ``resumes``
    (a resumed run keeps where it started). Returns the path."""
    path = Path(run_dir) / RUN_FILE
    if path.is_file():
        record = json.loads(path.read_text())
        record.setdefault("resumes", []).append(prov.as_dict())
    else:
        record = prov.as_dict()
    atomic_write(path, (json.dumps(record, indent=1) + "\n").encode("utf-8"))
    return path


def read_run(run_dir: str | Path) -> Provenance | None:
    """The provenance a search recorded in ``run_dir`` (``None`` for a run from before it was recorded)."""
    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        return None
    return Provenance.from_dict(json.loads(path.read_text()))


SEARCH_MEASURES = ("engine", "evals", "search_spaces", "rsi")
"""What a search's result depends on: a change to any of them makes it stale."""


def pooled(run_dirs: Sequence[str | Path]) -> Provenance:
    """The provenance of a pool of runs: this command, and from the runs' own records the code commit
    (the oldest of theirs, so that a change after any run makes the pool stale), their configs' commits,
    model, dtype and judge; the fields no run recorded are listed as unknown."""
    runs = [read_run(r) for r in run_dirs]
    known = [p for p in runs if p is not None]
    here = capture(measures=SEARCH_MEASURES)
    if not known or len(known) < len(runs):
        unknown = ["commit", "configs", "model", "dtype", "judge"]
        return Provenance(command=here.command, commit=None, dirty=None, configs={}, model=None, dtype=None,
                          judge=None, load_average_start=None, date=here.date, measures=SEARCH_MEASURES,
                          unknown=tuple(unknown))
    commits = [p.commit for p in known if p.commit]
    oldest = next((c for c in commits if all(is_ancestor(c, other) for other in commits)), None)
    configs = {k: v for p in known for k, v in p.configs.items()}
    first = known[0]
    return Provenance(command=here.command, commit=oldest, dirty=any(bool(p.dirty) for p in known), configs=configs,
                      model=first.model, dtype=first.dtype, judge=first.judge,
                      load_average_start=first.load_average_start, date=here.date, measures=SEARCH_MEASURES,
                      unknown=() if oldest else ("commit",))
