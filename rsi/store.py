"""The evaluation store: every (policy, params, task, model, engine, eval config) result, once.

Results are appended to ``evaluations.jsonl`` in the run directory and flushed to disk before
:meth:`EvalStore.put` returns, so a search killed at any point loses nothing it finished and a
resumed search never recomputes it (DESIGN.md, invariant 5). A torn last line (a kill during a
write) is ignored on load. Failed evaluations are stored too: a failure is a result.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from evals.replay import TaskResult, result_from_row

ENGINE_VERSION = "akv-engine-1"


def eval_key(policy_key: str, task_id: str, model: str, eval_digest: str) -> str:
    """The identity of one evaluation (program hash and params are inside ``policy_key``)."""
    blob = json.dumps([policy_key, task_id, model, ENGINE_VERSION, eval_digest])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


class EvalStore:
    """Append-only, fsync'ed map from evaluation key to :class:`TaskResult`."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._rows: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.torn_lines = 0
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                    self._rows[rec["key"]] = rec["row"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    self.torn_lines += 1

    def __contains__(self, key: str) -> bool:
        return key in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, key: str) -> TaskResult | None:
        row = self._rows.get(key)
        return result_from_row(row) if row is not None else None

    def put(self, key: str, result: TaskResult) -> bool:
        """Store ``result`` under ``key``; returns False (and keeps the first) if it was stored before."""
        with self._lock:
            if key in self._rows:
                return False
            row = result.to_row()
            with open(self.path, "a") as fh:
                fh.write(json.dumps({"key": key, "row": row}) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            self._rows[key] = row
            return True

    def rows(self) -> list[dict[str, Any]]:
        return list(self._rows.values())
