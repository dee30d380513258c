"""Durable storage of agent-session checkpoints: one directory per session, atomic writes.

Layout under the store's root::

    <session>/ckpt-00000007.json    one checkpoint per write (never rewritten)
    <session>/HEAD                  the name of the latest checkpoint
    <session>/kv-00000007.safetensors   optional KV snapshot (``engine.snapshot`` format)

Every file is written to a unique temporary name in the same directory, flushed and fsynced, then
renamed over its target (``os.replace`` is atomic), and the directory is fsynced: a crash leaves
either the old file or the new one, never a torn one. A checkpoint carries a SHA-256 of its
state; a checkpoint that fails to parse or verify is never used (the store falls back to the
newest one that does, and says so in :attr:`Loaded.skipped`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import AKVError, show
from engine.files import atomic_write

FORMAT = "akv-durable/1"
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
_CKPT = re.compile(r"^ckpt-(\d{8})\.json$")


class DurableError(AKVError):
    """A durable-session mistake: an unknown session or tool, a corrupt store, a replay that diverges."""


def _digest(state: Any) -> str:
    return hashlib.sha256(json.dumps(state, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class Loaded:
    """The newest valid checkpoint of a session, and the newer files that were not valid."""

    seq: int
    state: dict[str, Any]
    path: Path
    skipped: tuple[str, ...] = ()


class CheckpointStore:
    """Checkpoints of many sessions under ``root`` (see the module docstring)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def session_dir(self, session: str) -> Path:
        if not isinstance(session, str) or not _NAME.match(session):
            raise DurableError(f"session id must match [A-Za-z0-9._-]{{1,200}}, got {show(session)}",
                               field="session", value=session)
        return self.root / session

    def exists(self, session: str) -> bool:
        d = self.session_dir(session)
        return d.is_dir() and any(_CKPT.match(p.name) for p in d.iterdir())

    def kv_path(self, session: str, seq: int) -> Path:
        return self.session_dir(session) / f"kv-{seq:08d}.safetensors"

    def write(self, session: str, seq: int, state: dict[str, Any]) -> Path:
        """Write checkpoint ``seq`` of ``session`` and point HEAD at it."""
        d = self.session_dir(session)
        body = {"format": FORMAT, "session": session, "seq": seq, "state": state, "sha256": _digest(state)}
        path = d / f"ckpt-{seq:08d}.json"
        atomic_write(path, json.dumps(body).encode())
        atomic_write(d / "HEAD", path.name.encode())
        return path

    def _read(self, session: str, path: Path) -> dict[str, Any] | None:
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not isinstance(body, dict) or body.get("format") != FORMAT or body.get("session") != session:
            return None
        state = body.get("state")
        if not isinstance(state, dict) or body.get("sha256") != _digest(state):
            return None
        return body

    def latest(self, session: str) -> Loaded:
        """The newest valid checkpoint (HEAD first, else the highest valid sequence number).

        Raises:
            DurableError: the session has no valid checkpoint (named, with the files that failed).
        """
        d = self.session_dir(session)
        if not d.is_dir():
            raise DurableError(f"no durable session {session!r} under {str(self.root)!r}", field="session",
                               value=session)
        names = sorted((p.name for p in d.iterdir() if _CKPT.match(p.name)), reverse=True)
        head = d / "HEAD"
        if head.is_file():
            target = head.read_text(encoding="utf-8", errors="replace").strip()
            if target in names:
                names.remove(target)
                names.insert(0, target)
        skipped: list[str] = []
        for name in names:
            body = self._read(session, d / name)
            if body is not None:
                return Loaded(int(body["seq"]), body["state"], d / name, tuple(skipped))
            skipped.append(name)
        raise DurableError(f"session {session!r} has no valid checkpoint (corrupt: {', '.join(skipped) or 'none'})",
                           field="session", value=session)
