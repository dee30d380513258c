"""Atomic replacement of a file or a directory: a crash leaves the old one or the new one, never a
torn one. Every package writes through these two (run directories, checkpoints, model caches,
task suites); ``engine.snapshot`` alone writes its own way (no-follow, no-overwrite links).
:func:`read_text` reads a file the user named, with one error that names it whatever is wrong.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engine.errors import AKVError


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file, fsync, rename, directory fsync).

    Raises:
        AKVError: ``path`` is a directory (nothing is written).
    """
    if path.is_dir():
        raise AKVError(f"{str(path)!r} is a directory, not a file: give a file path", field="path", value=str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


@contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """Build a directory that replaces ``path`` only when the ``with`` body completes.

    Yields an empty temporary directory beside ``path``; on success the old ``path`` (if any) is
    removed and the new one renamed into its place; on an exception ``path`` is left as it was and
    the temporary directory is removed.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        yield tmp
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _fsync_dir(directory: Path) -> None:
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read_text(path: str | Path, what: str, error: type[AKVError] = AKVError) -> str:
    """The UTF-8 text of the file a user named as ``what`` ("trace", "config file"...).

    Raises:
        error: the path is missing, a directory, unreadable, or not UTF-8 (with the line), in one
            message naming ``what`` and the path (``field`` is ``what``).
    """
    p = Path(path)
    if not p.exists():
        raise error(f"{what} {str(p)!r} does not exist", field=what, value=str(p))
    if p.is_dir():
        raise error(f"{what} {str(p)!r} is a directory, not a file", field=what, value=str(p))
    try:
        raw = p.read_bytes()
    except OSError as err:
        raise error(f"{what} {str(p)!r} cannot be read ({err.strerror or err})", field=what, value=str(p)) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise error(f"{what} {str(p)!r}: line {line}: not UTF-8 text ({err.reason})", field=what,
                    value=str(p)) from None
