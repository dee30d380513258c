"""The claim protocol, fixed in advance: picks are frozen before any held-out task is read.

A search makes every choice on train (``rsi.cache.headline``: the evolved candidate matched to each
comparator, each baseline arm's choice, each tuned expert's setting). Once the generations and the
arms are done, and before the first held-out evaluation of the run, the search writes
``RUN_DIR/pick.json``: every candidate it will evaluate on held-out (the evolved picks and the
comparators), each with its program's SHA-256 and parameters, and the held-out task ids. Held-out
scoring then refuses any candidate that is not in that file or whose program no longer has the
frozen hash (:func:`verify`), and a resumed run that would pick differently stops with a
:class:`ProtocolError` naming the changed pick instead of silently writing a new one.

:func:`judge_heldout` runs the protocol for a search: it freezes the picks, then scores each on held-out.

Program size (:func:`program_size`, AST nodes of the source; 0 for a built-in family) is recorded
per candidate and breaks ties between candidates of equal train cost and pass rate, smaller first.
"""

from __future__ import annotations

import ast
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.errors import AKVError
from rsi.cache.archive import Archive
from rsi.cache.config import SearchConfig
from rsi.cache.evaluations import Evaluations
from rsi.cache.headline import TrainMatch, heldout_targets
from rsi.cache.metrics import aggregate
from rsi.rundir import RunDir, read_json, write_json
from rsi.tracking import Tracker

PICK_FILE = "pick.json"


class ProtocolError(AKVError):
    """A held-out evaluation the frozen picks do not allow (names the pick and what changed)."""


def program_size(source: str) -> int:
    """AST nodes of ``source`` (0 when it does not parse: the checker refuses it anyway)."""
    try:
        return sum(1 for _ in ast.walk(ast.parse(source)))
    except (SyntaxError, ValueError):
        return 0


def sha256(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Pick:
    """One candidate frozen for held-out scoring.

    Attributes:
        id, label: the candidate's.
        role: ``evolved`` (chosen from the search's front) or ``comparator`` (an expert, a tuned
            expert or a baseline arm's choice).
        spec: the family name, or ``program``.
        program_sha256: of the program source ("" for a built-in family).
        params: the parameters it is scored with.
        size: program size in AST nodes.
    """

    id: str
    label: str
    role: str
    spec: str
    program_sha256: str
    params: dict[str, Any]
    size: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def freeze(run_dir: str | Path, picks: Sequence[Pick], heldout: Sequence[str]) -> dict[str, Any]:
    """Write ``pick.json`` (module docstring), or check it against ``picks`` when a resumed run wrote it.

    Raises:
        ProtocolError: the file holds other picks, other programs, other parameters or other tasks.
    """
    path = Path(run_dir) / PICK_FILE
    rows = {p.id: p.to_dict() for p in picks}
    if path.exists():
        frozen = read_json(path, dict)
        before = {p["id"]: p for p in frozen.get("picks", [])}
        for pid, row in rows.items():
            old = before.get(pid)
            if old is None:
                raise ProtocolError(f"{path}: {row['label']} ({pid}) was not frozen before held-out scoring; "
                                    f"the frozen picks are {', '.join(sorted(p['label'] for p in before.values()))}",
                                    field="pick", value=pid)
            for key in ("program_sha256", "params"):
                if old.get(key) != row[key]:
                    raise ProtocolError(f"{path}: {row['label']} ({pid}) changed after it was frozen: {key} "
                                        f"{old.get(key)!r} -> {row[key]!r}", field=f"pick.{key}", value=pid)
        if list(frozen.get("heldout_tasks", [])) != list(heldout):
            raise ProtocolError(f"{path}: the held-out tasks changed after the picks were frozen",
                                field="heldout_tasks")
        return frozen
    data = {"frozen_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "heldout_tasks": list(heldout),
            "picks": list(rows.values())}
    write_json(path, data)
    return data


def verify(frozen: Mapping[str, Any], cid: str, source: str | None) -> None:
    """Refuse held-out scoring of candidate ``cid`` unless it is frozen with ``source``'s hash.

    Raises:
        ProtocolError: ``cid`` is not among the frozen picks, or its program changed.
    """
    row = next((p for p in frozen.get("picks", []) if p["id"] == cid), None)
    if row is None:
        raise ProtocolError(f"{cid} is not among the picks frozen in {PICK_FILE}: held-out scoring refused",
                            field="pick", value=cid)
    got = sha256(source) if source is not None else ""
    if got != row["program_sha256"]:
        raise ProtocolError(f"{row['label']} ({cid}): its program changed after it was frozen (sha256 "
                            f"{row['program_sha256'][:12]} -> {got[:12]}): held-out scoring refused",
                            field="pick.program_sha256", value=cid)


def judge_heldout(config: SearchConfig, archive: Archive, evals: Evaluations, files: RunDir, tracker: Tracker,
                  say: Callable[[str], None], planned: int) -> None:
    """Freeze the picks of ``archive``, then score them on ``evals``' held-out tasks (``planned``: the
    progress units of that scoring): every comparator (expert, tuned expert, baseline arm's choice),
    the ``heldout_front`` most accurate front members and each comparator's match on train
    (``rsi.cache.headline.heldout_targets``); a pick that has a held-out result already is skipped."""
    comparators = archive.scored(experts=True)
    match = TrainMatch(evals.train_results, config.bootstrap_samples, config.seed)
    evolved = heldout_targets(archive.front(), comparators, config.heldout_front, match)
    targets = [*comparators, *evolved]
    picks = [Pick(c.id, c.label, "comparator" if c.expert else "evolved", c.spec,
                  sha256(files.program(c.program)) if c.spec == "program" else "", dict(c.params), c.size)
             for c in targets]
    frozen = freeze(files.path, picks, [t.id for t in evals.heldout])
    say(f"picks frozen in {PICK_FILE} before any held-out task is read: {len(evolved)} evolved, "
        f"{len(comparators)} comparators")
    with evals.progress.unit(planned):
        for c in targets:
            if c.heldout is not None:
                continue
            verify(frozen, c.id, files.program(c.program) if c.spec == "program" else None)
            held = aggregate(evals.evaluate(evals.candidate_spec(c), evals.heldout))
            archive.with_heldout(c.id, held)
            tracker.heldout(archive.get(c.id))
            say(f"  held-out {c.label:40s} pass {held.pass_rate:.3f} cost {held.cost_cents_mean:.4f}c")
