"""The evaluation store: every (policy, params, task, model, engine, eval config) result, once; the
survival track's simulations are kept the same way (:class:`RowStore` over its own row type).

Results are appended to ``evaluations.jsonl`` in the run directory and flushed to disk before
:meth:`EvalStore.put` returns, so a search killed at any point loses nothing it finished and a
resumed search never recomputes it (docs/architecture.md, invariant 5). Failed evaluations are stored too:
a failure is a result.

One record per line: ``{"key": ..., "row": ..., "sha256": ...}``, where ``sha256`` is the digest
of the canonical JSON (sorted keys, no spaces) of ``{"key": ..., "row": ...}``. On load:

* a torn last line (a kill during a write: no final newline) is not loaded, and is cut off the
  file before the next append, so that record does not swallow the torn bytes;
* a line that is not JSON, not a record, fails its checksum, or whose row does not decode is
  *corrupt*: it is not loaded (the evaluation runs again and is appended) and reported;
* a record without ``sha256`` (written before checksums existed) is loaded if its row decodes,
  and reported as *unverified*: such a row cannot be checked, only parsed.

What was found is :attr:`EvalStore.check` (also logged as a warning). The file is never
rewritten: corrupt lines stay where they are (and are reported again by later loads), a record
appended later for the same key supersedes nothing that was loaded (first valid record wins).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from evals.cache.evaluator import TaskResult, result_from_row

ENGINE_VERSION = "akv-engine-1"

log = logging.getLogger("akv.search.store")  # a child of the search's logger: warnings reach search.log


def eval_key(policy_key: str, task_id: str, model: str, eval_digest: str) -> str:
    """The identity of one evaluation (program hash and params are inside ``policy_key``)."""
    blob = json.dumps([policy_key, task_id, model, ENGINE_VERSION, eval_digest])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def record_digest(key: str, row: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of ``{"key": key, "row": row}`` (the record without its checksum)."""
    blob = json.dumps({"key": key, "row": row}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class StoreCheck:
    """What loading ``evaluations.jsonl`` found (line numbers are 1-based).

    Attributes:
        path: the file.
        loaded: records loaded (distinct keys).
        corrupt_lines: lines not loaded: not JSON, not a record, checksum mismatch, or a row that
            does not decode. Their evaluations run again.
        unverified_lines: records without a checksum (older versions), loaded.
        torn_tail: the last line had no newline (a torn write); it was not loaded and is cut off
            before the next append.
    """

    path: Path
    loaded: int = 0
    corrupt_lines: tuple[int, ...] = ()
    unverified_lines: tuple[int, ...] = ()
    torn_tail: int | None = None

    @property
    def clean(self) -> bool:
        return not self.corrupt_lines and not self.unverified_lines and self.torn_tail is None

    def summary(self) -> str:
        parts = [f"{self.path}: {_n(self.loaded, 'evaluation')} loaded"]
        if self.corrupt_lines:
            parts.append(f"{_n(len(self.corrupt_lines), 'corrupt record')} not loaded, to be recomputed "
                         f"(line {_lines(self.corrupt_lines)})")
        if self.torn_tail is not None:
            parts.append(f"a torn last record (line {self.torn_tail}) not loaded, cut off before the next append")
        if self.unverified_lines:
            parts.append(f"{_n(len(self.unverified_lines), 'record')} without checksum (written by an older "
                         f"version) accepted unverified")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "loaded": self.loaded, "corrupt_lines": list(self.corrupt_lines),
                "unverified_lines": list(self.unverified_lines), "torn_tail": self.torn_tail}


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _lines(numbers: tuple[int, ...], limit: int = 20) -> str:
    shown = ", ".join(map(str, numbers[:limit]))
    return shown + (f", ... ({len(numbers) - limit} more)" if len(numbers) > limit else "")


R = TypeVar("R")


class RowStore(Generic[R]):
    """Append-only, fsync'ed, checksummed map from key to a row of type ``R`` (module docstring),
    the store of both tracks: a subclass says how a row is written (:meth:`encode`, a JSON object)
    and read (:meth:`decode`, which raises ``KeyError``, ``TypeError``, ``ValueError`` or
    ``AttributeError`` for a row it cannot read: that record is corrupt).

    ``listeners`` are called with the key of every newly stored row (after it is on disk).
    """

    LEGACY_ROW: str | None = None  # an older format's name for "row" (its records load unverified)

    def encode(self, row: R) -> dict[str, Any]:
        raise NotImplementedError

    def decode(self, row: dict[str, Any]) -> R:
        raise NotImplementedError

    def _parse(self, line: bytes) -> tuple[str, dict[str, Any], bool] | None:
        """(key, row, verified) of one line, or None when it is corrupt."""
        try:
            rec = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        if isinstance(rec, dict) and self.LEGACY_ROW and "row" not in rec and self.LEGACY_ROW in rec:
            rec = {"key": rec.get("key"), "row": rec[self.LEGACY_ROW]}
        if not isinstance(rec, dict) or not isinstance(rec.get("key"), str) or not isinstance(rec.get("row"), dict):
            return None
        verified = "sha256" in rec
        if verified and rec["sha256"] != record_digest(rec["key"], rec["row"]):
            return None
        try:
            self.decode(rec["row"])
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        return rec["key"], rec["row"], verified

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._rows: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._cut_at: int | None = None  # byte offset to truncate to before the next append (torn tail)
        self.listeners: list[Callable[[str], None]] = []
        self.check = self._load()
        if not self.check.clean:
            log.warning("%s", self.check.summary())

    def _load(self) -> StoreCheck:
        if not self.path.exists():
            return StoreCheck(self.path)
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        torn: int | None = None
        if lines[-1].strip():  # no final newline: the last write was torn
            torn = len(lines)
            self._cut_at = len(data) - len(lines[-1])
        lines = lines[:-1]  # after the final newline: empty, or the torn part
        corrupt, unverified = [], []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            parsed = self._parse(line)
            if parsed is None:
                corrupt.append(number)
                continue
            key, row, verified = parsed
            if not verified:
                unverified.append(number)
            self._rows.setdefault(key, row)
        return StoreCheck(self.path, len(self._rows), tuple(corrupt), tuple(unverified), torn)

    @property
    def torn_lines(self) -> int:
        """Lines not loaded (corrupt or torn), for older callers."""
        return len(self.check.corrupt_lines) + (self.check.torn_tail is not None)

    def __contains__(self, key: str) -> bool:
        return key in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, key: str) -> R | None:
        row = self._rows.get(key)
        return self.decode(row) if row is not None else None

    def put(self, key: str, result: R) -> bool:
        """Store ``result`` under ``key``; returns False (and keeps the first) if it was stored before."""
        with self._lock:
            if key in self._rows:
                return False
            # The row as it will read back (JSON types), so the checksum verifies after a reload.
            row = json.loads(json.dumps(self.encode(result), default=str))
            line = json.dumps({"key": key, "row": row, "sha256": record_digest(key, row)}) + "\n"
            with open(self.path, "ab") as fh:
                if self._cut_at is not None:
                    log.warning("%s: cutting a torn last record (%d bytes) before appending",
                                self.path, fh.tell() - self._cut_at)
                    fh.truncate(self._cut_at)
                    self._cut_at = None
                fh.write(line.encode("utf-8"))
                fh.flush()
                os.fsync(fh.fileno())
            self._rows[key] = row
        for listener in self.listeners:
            listener(key)
        return True

    def rows(self) -> list[dict[str, Any]]:
        return list(self._rows.values())


class EvalStore(RowStore[TaskResult]):
    """The cache track's store: evaluation key -> :class:`TaskResult` (its ``to_row`` form)."""

    def encode(self, row: TaskResult) -> dict[str, Any]:
        return row.to_row()

    def decode(self, row: dict[str, Any]) -> TaskResult:
        return result_from_row(row)
