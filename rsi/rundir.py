"""Reading and writing the small files of a search run directory.

Every JSON file a resume reads (``state.json``, ``config.json``, ``proposals/g*.json``,
``mlflow_runs.json``, ``archive.json``) goes through :func:`read_json`, so a truncated or edited
file is a :class:`RunDirError` that names the file and the line, not a traceback. Every file the
search writes goes through :func:`write_json` / :func:`write_text` (temporary file, fsync,
rename): a kill leaves the old file or the new one, never half of one. The evaluation store
(``evaluations.jsonl``) has its own checks (``rsi.store``). Not for the run's databases (Optuna,
MLflow), beyond :func:`check_sqlite`.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from engine.errors import AKVError, show
from engine.files import atomic_write


class RunDirError(AKVError):
    """A run-directory file that is missing, not JSON, or not of the expected shape (names the file)."""


def read_json(path: str | Path, kind: type = object) -> Any:
    """The JSON content of ``path``, which must be an instance of ``kind`` (``dict``, ``list``...).

    Raises:
        RunDirError: the file cannot be read, is not UTF-8 JSON (with the line and column of the
            first problem), or holds another type than ``kind``.
    """
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except OSError as err:
        raise RunDirError(f"{p}: cannot be read ({err.strerror or err})", field=str(p), value=None) from err
    except UnicodeDecodeError as err:
        line = p.read_bytes()[: err.start].count(b"\n") + 1
        raise RunDirError(f"{p}: line {line}: not UTF-8 text ({err.reason})", field=str(p), value=None) from err
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        what = "empty" if not text.strip() else f"not valid JSON ({err.msg})"
        raise RunDirError(f"{p}: line {err.lineno} column {err.colno}: {what}", field=str(p),
                          value=show(text[max(0, err.pos - 20): err.pos + 20])) from err
    if not isinstance(data, kind):
        raise RunDirError(f"{p}: expected a JSON {_kind_name(kind)}, got {type(data).__name__} {show(data)}",
                          field=str(p), value=show(data))
    return data


def _kind_name(kind: type) -> str:
    names: dict[type, str] = {dict: "object", list: "array", str: "string"}
    return names.get(kind, kind.__name__)


def write_text(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (``engine.files.atomic_write``)."""
    atomic_write(Path(path), text.encode("utf-8"))


def write_json(path: str | Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=1))


def check_sqlite(path: str | Path) -> None:
    """Raise :class:`RunDirError` if ``path`` exists and is not an intact SQLite database."""
    p = Path(path)
    if not p.exists():
        return
    try:
        # Read-write: after a kill, opening rolls back a hot journal (SQLite's own recovery, which the
        # search's first query would do anyway); a read-only connection cannot, and fails.
        con = sqlite3.connect(p, timeout=30)
        try:
            rows = con.execute("PRAGMA quick_check").fetchall()
        finally:
            con.close()
    except sqlite3.Error as err:
        raise RunDirError(f"{p}: not a readable SQLite database ({err})", field=str(p), value=None) from err
    if rows != [("ok",)]:
        raise RunDirError(f"{p}: SQLite integrity check failed: {show(rows)}", field=str(p), value=show(rows))
