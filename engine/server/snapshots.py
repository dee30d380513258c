"""The server's snapshot store: per-tenant directories, names, quotas and the server secret.

``POST /v1/cache/save|load`` name a snapshot; this module turns (tenant, name) into a file and
guards it. It is not the file format (``engine.snapshot``), and it runs on the engine's worker
thread only, so two saves never race each other.

- Names are validated (letters, digits, ``.``, ``_``, ``-``; starting with a letter or digit; no
  ``..``; at most :data:`MAX_NAME` characters), so a name is always one file in one directory.
- Each tenant has its own directory (the anonymous tenant keeps the snapshot dir itself, as
  before tenants existed): another tenant's snapshot of the same name is simply another file.
- Saving over an existing name is refused (409) unless the request says ``overwrite``.
- A per-tenant quota (bytes over the tenant's snapshot files) is checked before writing.
- Every file is saved and loaded with the server secret (HMAC-SHA256, ``engine.snapshot``), so a
  file edited on disk, even with a recomputed checksum, is refused and never reaches the tree.
  The secret is given (``--snapshot-secret`` / ``AKV_SNAPSHOT_SECRET``) or kept in
  ``<snapshot dir>/.akv-snapshot-secret``, generated once with mode 0600.
- Errors and responses name a snapshot by its name, never by its path on the server's disk.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import SnapshotError
from engine.snapshot import SnapshotExistsError, encode_session, new_secret, read_file, warm, write_file

if TYPE_CHECKING:
    from engine.engine import Engine
    from engine.server.tenants import Tenant

log = logging.getLogger("akv.snapshots")

MAX_NAME = 128
SUFFIX = ".safetensors"
SECRET_FILE = ".akv-snapshot-secret"
TENANTS_DIR = "tenants"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class SnapshotQuotaError(SnapshotError):
    """A save would take the tenant's snapshots past its disk quota."""

    status = 507


@dataclass(frozen=True)
class StoredSnapshot:
    """What a save or load did, as the server reports it (no server path)."""

    name: str
    tokens: int
    kv_tokens: int
    bytes: int

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "tokens": self.tokens, "kv_tokens": self.kv_tokens, "bytes": self.bytes}


def check_name(name: Any) -> str:
    """Return ``name`` if it is a valid snapshot name, else raise :class:`SnapshotError`."""
    if (not isinstance(name, str) or not 0 < len(name) <= MAX_NAME or _NAME.fullmatch(name) is None
            or ".." in name):
        shown = repr(name)[:80] if isinstance(name, str) else type(name).__name__
        raise SnapshotError(f"name: {shown} is not a valid snapshot name (1 to {MAX_NAME} letters, digits, '.', "
                            "'_' or '-', starting with a letter or digit, no '..')", field="name",
                            value=name if isinstance(name, str) else None)
    return name


def load_or_create_secret(snapshot_dir: Path) -> bytes:
    """The secret in ``snapshot_dir/.akv-snapshot-secret``, created (0600, never through a link)
    on first use. A link, a non-regular file or one readable by others is refused."""
    snapshot_dir.mkdir(parents=True, exist_ok=True)
    path = snapshot_dir / SECRET_FILE
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as fh:
            fh.write(new_secret().hex())
        log.info("generated a snapshot secret in %s", path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as err:
        why = "is a symbolic link" if err.errno == errno.ELOOP else f"cannot be read ({err.strerror})"
        raise SnapshotError(f"the snapshot secret file {SECRET_FILE} {why}", field="snapshot_secret",
                            value=None) from None
    with os.fdopen(fd) as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077:
            raise SnapshotError(f"the snapshot secret file {SECRET_FILE} must be a regular file with mode 0600",
                                field="snapshot_secret", value=oct(st.st_mode & 0o777))
        text = fh.read().strip()
    if len(text) < 32:
        raise SnapshotError(f"the snapshot secret file {SECRET_FILE} is too short", field="snapshot_secret",
                            value=len(text))
    return text.encode()


class SnapshotStore:
    """Snapshots of every tenant under one directory.

    Args:
        root: the server's snapshot directory.
        secret: the HMAC key every file is saved and loaded with (``None``: the secret file in
            ``root``, created on first use).
        quota_bytes: most bytes of snapshot files per tenant (``None``: no limit).
    """

    def __init__(self, root: str | Path, *, secret: bytes | None = None, quota_bytes: int | None = None):
        if quota_bytes is not None and quota_bytes < 0:
            raise ValueError(f"quota_bytes must be >= 0, got {quota_bytes}")
        self.root = Path(root)
        self.secret = secret if secret else load_or_create_secret(self.root)
        self.quota_bytes = quota_bytes

    def directory(self, tenant: Tenant, *, create: bool) -> Path:
        """The tenant's directory; a symbolic link or a non-directory there is refused."""
        d = self.root / TENANTS_DIR / tenant.name if tenant.keyed else self.root
        if create:
            for part in (d.parent, d) if d != self.root else (d,):
                part.mkdir(mode=0o700, parents=True, exist_ok=True)
        for part in (d.parent, d) if d != self.root else ():
            try:
                st = os.lstat(part)
            except FileNotFoundError:
                return d
            if not stat.S_ISDIR(st.st_mode):
                raise SnapshotError("the tenant's snapshot directory is not a plain directory; refused",
                                    field="name", value=None)
        return d

    def used_bytes(self, directory: Path, *, excluding: str | None = None) -> int:
        """Bytes of the snapshot files in ``directory`` (links and other entries do not count)."""
        total = 0
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            return 0
        for entry in entries:
            if entry.name.endswith(SUFFIX) and entry.name != excluding and entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
        return total

    def save(self, engine: Engine, tenant: Tenant, name: str, messages: Sequence[Any], schedule: Any, *,
             overwrite: bool = False) -> StoredSnapshot:
        """Save the history in the tenant's namespace as ``name`` (on the engine's worker thread).

        Raises:
            SnapshotError: a bad name; :class:`engine.snapshot.SnapshotExistsError` (409) when
                ``name`` exists and ``overwrite`` is false; :class:`SnapshotQuotaError` (507).
        """
        check_name(name)
        directory = self.directory(tenant, create=True)
        filename = name + SUFFIX
        target = directory / filename
        if not overwrite and os.path.lexists(target):
            raise SnapshotExistsError(f"snapshot {name!r} already exists; pass overwrite: true to replace it",
                                      field="name", value=name)
        encoded = encode_session(engine, messages, schedule, salt=tenant.salt, secret=self.secret)
        if self.quota_bytes is not None:
            used = self.used_bytes(directory, excluding=filename)
            if used + len(encoded.data) > self.quota_bytes:
                raise SnapshotQuotaError(
                    f"snapshot {name!r} needs {len(encoded.data)} bytes and this tenant's snapshots already use "
                    f"{used} of its {self.quota_bytes}-byte quota; delete or overwrite some", field="name", value=name)
        write_file(target, encoded.data, label=name, field="name", overwrite=overwrite)
        return StoredSnapshot(name, encoded.tokens, encoded.kv_tokens, len(encoded.data))

    def load(self, engine: Engine, tenant: Tenant, name: str) -> StoredSnapshot:
        """Warm the tree, in the tenant's namespace, from its snapshot ``name``."""
        check_name(name)
        directory = self.directory(tenant, create=False)
        data = read_file(directory / (name + SUFFIX), label=name, field="name", max_bytes=self.quota_bytes)
        done = warm(engine, data, label=name, field="name", salt=tenant.salt, secret=self.secret)
        return StoredSnapshot(name, done.tokens, done.kv_tokens, len(data))
