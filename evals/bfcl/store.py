"""Finished BFCL results on disk as they finish, so that a rerun of the same command resumes.

A :class:`ResultLog` is one JSON-lines file: its first line is the run's header (what was asked:
suite, split, model, configuration), every later line one finished (policy, task) result, appended
and flushed to disk as it finishes. Opening the file again with the same header gives back the
finished results (a rerun skips them); another header is refused, naming the field that differs, so
that results of two different runs never mix. A last line torn by a crash is ignored (that result
is computed again).

Not for: the episodes' own checkpoints (``engine.durable``), nor the final results file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from evals.errors import AKVError


class ResultLog:
    """The finished results of one run (see the module docstring).

    Args:
        path: the JSON-lines file (created with ``header`` when missing).
        header: what identifies the run; JSON values.

    Raises:
        AKVError: the file holds another run's header (field ``header``), or is not a result log.
    """

    def __init__(self, path: str | Path, header: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self.header = json.loads(json.dumps(dict(header), default=str))
        self._rows: dict[tuple[str, str], dict[str, Any]] = {}
        if not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._append({"header": self.header})
            return
        lines = self.path.read_text(encoding="utf-8").splitlines()
        try:
            have = json.loads(lines[0])["header"] if lines else None
        except (json.JSONDecodeError, KeyError, TypeError):
            have = None
        if not isinstance(have, dict):
            raise AKVError(f"{self.path} is not a result log (its first line is no header); move it away",
                           field="header", value=str(self.path))
        differ = sorted(k for k in set(have) | set(self.header) if have.get(k) != self.header.get(k))
        if differ:
            k = differ[0]
            raise AKVError(f"{self.path} holds the results of another run ({k}: {have.get(k)!r} there, "
                           f"{self.header.get(k)!r} now): give another output, or --force to start over",
                           field="header", value=k)
        for line in lines[1:]:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a crash: that result runs again
            self._rows[(str(row["policy"]), str(row["task_id"]))] = row

    def _append(self, record: Mapping[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def get(self, policy: str, task_id: str) -> dict[str, Any] | None:
        """The finished result of ``policy`` on ``task_id``, or ``None``."""
        return self._rows.get((policy, task_id))

    def add(self, row: Mapping[str, Any]) -> None:
        """Record a finished result (a dict with ``policy`` and ``task_id``), on disk before returning."""
        self._append(row)
        self._rows[(str(row["policy"]), str(row["task_id"]))] = dict(row)

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._rows.values())
