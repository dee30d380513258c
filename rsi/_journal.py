"""Optuna's journal file storage, with a way to make many writes durable by one ``fsync``.

Optuna syncs every write of a journal file to disk. A screen writes its in-memory proxy study
there once it ends, one record per trial, so its 32 trials paid 32 ``fsync`` calls, about 4 ms each
on the project's machine: more than the proxy evaluations of a trial's tasks. Inside
:meth:`Journal.synced_once` the records are written as Optuna writes them (same bytes, same lock,
each flushed to the file at once, so other readers see them as before) and made durable together
when it ends. Not for: anything else about the journal (reading, locking and the record format are
Optuna's own).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal._file import get_lock_file


class _File(JournalFileBackend):
    """:class:`JournalFileBackend` whose ``fsync`` after each write can be put off (:attr:`deferred`)."""

    deferred = False

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        if not self.deferred:
            super().append_logs(logs)
            return
        with get_lock_file(self._lock):  # as Optuna writes, without the fsync
            text = "\n".join([json.dumps(log, separators=(",", ":")) for log in logs]) + "\n"
            with open(self._file_path, "ab") as f:
                f.write(text.encode("utf-8"))
                f.flush()

    def sync(self) -> None:
        """Make every write so far durable (``fsync`` syncs the file, whichever descriptor wrote it)."""
        fd = os.open(self._file_path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class Journal(JournalStorage):
    """A journal file storage (``path``) as :func:`rsi.tuning.make_storage` makes it."""

    def __init__(self, path: str) -> None:
        self._file = _File(path)
        super().__init__(self._file)

    @contextmanager
    def synced_once(self) -> Iterator[None]:
        """Writes inside are made durable together when it ends (also when it raises)."""
        self._file.deferred = True
        try:
            yield
        finally:
            self._file.deferred = False
            self._file.sync()
