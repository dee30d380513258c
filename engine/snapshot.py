"""Session durability: save a history's KV to one safetensors file and warm a tree from it.

File layout (one ``.safetensors`` file):

- tensors ``keys`` and ``values`` [L, Hkv, n, D]: the KV of the n tokens that had KV (keys at
  their compute positions, exactly as the tree stores them), and ``end_hidden`` [H] when known;
- metadata ``akv`` (JSON): format, model name, tokenizer fingerprint, KV geometry, dtype,
  template, the event history (tokens and events), which token ranges the tensors cover, the
  messages and schedule it came from, and a SHA-256 of the tensor bytes;
- metadata ``akv_mac`` (only when saved with a secret): HMAC-SHA256 under that secret of the
  ``akv`` metadata and of every tensor's name, dtype, shape and bytes.

Loading validates everything (the MAC when a secret is given, format, model, tokenizer,
geometry, checksum, token ids within the vocabulary, ranges, tensor shapes and dtypes) before it
touches the tree, so a corrupt, edited or foreign file is refused with a :class:`SnapshotError`
and the tree is left exactly as it was. A checksum alone only catches accidents: whoever edits a
file can recompute it, so a server (which shares one tree between clients) always saves and
loads with a secret. A loaded history yields the same logits as the original: the tensors are
the same bytes. The history is stored without its salt (``engine.history.Salt``) and loaded into
the namespace the caller names.

Files are read and written without following a symbolic link at the final name (``O_NOFOLLOW``),
and written to a temporary file first and then renamed into place, so a planted link can neither
redirect a save nor feed a load. This module is not a multi-tenant store: naming, quotas and
per-tenant directories are the server's (``engine.server.snapshots``).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_bytes
from safetensors.torch import save as save_bytes

from engine.cache.kvstore import TensorKV
from engine.cache.plan import RequestPlan, TokenUsage, commit, release
from engine.cache.radix import KVState
from engine.errors import SnapshotError, show
from engine.history import REPOSITION, Drop, Item, Reposition, Salt, mask_runs, replay, salted

if TYPE_CHECKING:
    from engine.engine import Engine

FORMAT = "akv-snapshot/1"
MAC_KEY = "akv_mac"


class SnapshotExistsError(SnapshotError):
    """A save would replace an existing snapshot and the caller did not ask to overwrite it."""

    status = 409


@dataclass(frozen=True)
class SnapshotInfo:
    """What a save or load did (``path`` is the caller's own path, for local use)."""

    path: str
    tokens: int
    kv_tokens: int
    bytes: int


@dataclass(frozen=True)
class Encoded:
    """A history serialised to snapshot bytes, not yet written anywhere."""

    data: bytes
    tokens: int
    kv_tokens: int


@dataclass(frozen=True)
class Warmed:
    """What loading snapshot bytes put into the tree."""

    tokens: int
    kv_tokens: int


def encode_items(items: Sequence[Item]) -> list[Any]:
    """The JSON form of a history, without its salt (a snapshot belongs to no namespace)."""
    out: list[Any] = []
    for it in items:
        if isinstance(it, Drop):
            out.append({"drop": [list(r) for r in it.ranges]})
        elif isinstance(it, Reposition):
            out.append({"reposition": True})
        elif isinstance(it, Salt):
            continue
        else:
            out.append(int(it))
    return out


def decode_items(raw: Any, vocab_size: int | None = None) -> list[Item]:
    """Parse :func:`encode_items`'s form; token ids must lie in ``[0, vocab_size)`` when given."""
    if not isinstance(raw, list):
        raise SnapshotError("snapshot metadata: items must be a list", field="items", value=type(raw).__name__)
    items: list[Item] = []
    for x in raw:
        if isinstance(x, int) and not isinstance(x, bool):
            if x < 0 or (vocab_size is not None and x >= vocab_size):
                raise SnapshotError(f"snapshot metadata: token id {x} is outside the vocabulary "
                                    f"[0, {vocab_size if vocab_size is not None else 'inf'})", field="items", value=x)
            items.append(x)
        elif isinstance(x, dict) and x.get("reposition") is True:
            items.append(REPOSITION)
        elif isinstance(x, dict) and isinstance(x.get("drop"), list):
            try:
                ranges = tuple((int(s), int(e)) for s, e in x["drop"])
                if any(s < 0 for s, _ in ranges):
                    raise ValueError("negative token index")
                items.append(Drop(ranges))
            except (AssertionError, TypeError, ValueError) as err:
                raise SnapshotError(f"snapshot metadata: bad drop event {show(x)}", field="items", value=x) from err
        else:
            raise SnapshotError(f"snapshot metadata: unknown item {show(x)}", field="items", value=x)
    return items


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """SHA-256 of the tokenizer's full definition (vocabulary, merges, special tokens)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(text.encode()).hexdigest()


def _raw(t: torch.Tensor) -> bytes:
    """The tensor's bytes as stored (any dtype, bfloat16 included)."""
    return t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()


def _checksum(tensors: Mapping[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(_raw(tensors[name]))
    return h.hexdigest()


def _mac(secret: bytes, meta_json: str, tensors: Mapping[str, torch.Tensor]) -> str:
    """HMAC-SHA256 of the metadata and of every tensor's name, dtype, shape and bytes."""
    h = hmac.new(secret, digestmod=hashlib.sha256)
    h.update(FORMAT.encode() + b"\0" + meta_json.encode() + b"\0")
    for name in sorted(tensors):
        t = tensors[name]
        h.update(f"{name}\0{t.dtype}\0{list(t.shape)}\0".encode())
        h.update(_raw(t))
    return h.hexdigest()


def new_secret() -> bytes:
    """A fresh random snapshot secret (32 bytes)."""
    return secrets.token_bytes(32)


# ---------------------------------------------------------------------- bytes <-> tree

def encode_session(engine: Engine, messages: Sequence[Any], schedule: Any, *, salt: str | None = None,
                   secret: bytes | None = None) -> Encoded:
    """Compute (or reuse, in ``salt``'s namespace) the history of ``messages`` + ``schedule`` and
    serialise it; with ``secret`` the bytes carry an HMAC that :func:`warm` checks."""
    layout = engine.layout(messages, schedule)
    items = salted(layout.items, salt)
    engine.prefill(messages, schedule, salt=salt)
    match = engine.tree.match(items)
    assert match.n_items == len(items), "the history was just inserted"
    last = match.last
    assert last is not None
    engine.tree.lock(last)
    try:
        n = sum(1 for it in items if isinstance(it, int))
        has = np.zeros(n, dtype=bool)
        keys, values = [], []
        for node in match.path:
            if node.n_tokens and node.state is not KVState.ABSENT:
                assert isinstance(node.payload, TensorKV)
                has[node.token_start:node.token_end] = True
                keys.append(node.payload.keys.cpu())
                values.append(node.payload.values.cpu())
        g = engine.geometry
        empty = torch.zeros(g.n_layers, g.n_kv_heads, 0, g.head_dim, dtype=engine.model.dtype)
        tensors = {"keys": torch.cat(keys, 2) if keys else empty, "values": torch.cat(values, 2) if values else empty}
        if last.end_hidden is not None:
            tensors["end_hidden"] = last.end_hidden.detach().cpu().contiguous()
        tensors = {k: v.contiguous() for k, v in tensors.items()}
        meta = {
            "format": FORMAT, "model": engine.name, "tokenizer": engine.tokenizer_fingerprint,
            "geometry": [g.n_layers, g.n_kv_heads, g.head_dim, g.dtype_bytes], "dtype": str(engine.model.dtype),
            "template": engine.renderer.template.name, "items": encode_items(items),
            "kv_ranges": mask_runs(has), "messages": list(messages), "schedule": layout.schedule.to_wire(),
            "checksum": _checksum(tensors),
        }
    finally:
        engine.tree.unlock(last)
    meta_json = json.dumps(meta)
    header = {"akv": meta_json}
    if secret is not None:
        header[MAC_KEY] = _mac(secret, meta_json, tensors)
    return Encoded(save_bytes(tensors, metadata=header), n, int(has.sum()))


def _parse(engine: Engine, data: bytes, label: str, field: str,
           secret: bytes | None) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    try:
        tensors = load_bytes(data)
        size = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + size])
        raw_meta = (header.get("__metadata__") or {}) if isinstance(header, dict) else {}
    except (SafetensorError, OSError, ValueError, RuntimeError, TypeError) as err:
        raise SnapshotError(f"snapshot {label!r} is not a readable safetensors file: {type(err).__name__}",
                            field=field, value=label) from err
    meta_json = raw_meta.get("akv")
    if not isinstance(meta_json, str):
        raise SnapshotError(f"snapshot {label!r} has no AKV metadata", field=field, value=label)
    if secret is not None:
        mac = raw_meta.get(MAC_KEY)
        if not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(secret, meta_json, tensors)):
            raise SnapshotError(f"snapshot {label!r} is not authentic: its HMAC is missing or does not match (the "
                                "file was edited, or saved by another server)", field="mac", value=label)
    try:
        meta = json.loads(meta_json)
    except json.JSONDecodeError as err:
        raise SnapshotError(f"snapshot {label!r}: metadata is not JSON", field=field, value=label) from err
    if not isinstance(meta, dict):
        raise SnapshotError(f"snapshot {label!r}: metadata is not a JSON object", field=field, value=label)
    g = engine.geometry
    checks = [
        ("format", meta.get("format"), FORMAT),
        ("model", meta.get("model"), engine.name),
        ("tokenizer", meta.get("tokenizer"), engine.tokenizer_fingerprint),
        ("geometry", meta.get("geometry"), [g.n_layers, g.n_kv_heads, g.head_dim, g.dtype_bytes]),
        ("dtype", meta.get("dtype"), str(engine.model.dtype)),
        ("template", meta.get("template"), engine.renderer.template.name),
    ]
    for name, got, want in checks:
        if got != want:
            raise SnapshotError(f"snapshot {label!r} was made for {name} {show(got)}; this engine has {want!r}",
                                field=name, value=got)
    if meta.get("checksum") != _checksum(tensors):
        raise SnapshotError(f"snapshot {label!r}: tensor checksum mismatch (corrupt file)",
                            field="checksum", value=meta.get("checksum"))
    return meta, tensors


def warm(engine: Engine, data: bytes, *, label: str, field: str = "path", salt: str | None = None,
         secret: bytes | None = None) -> Warmed:
    """Warm ``engine``'s tree, in ``salt``'s namespace, with snapshot bytes.

    Everything is validated first; a refused snapshot raises :class:`SnapshotError` (naming it by
    ``label``, never otherwise) and changes nothing. With ``secret``, bytes without a valid MAC
    under it are refused before anything else is believed.
    """
    meta, tensors = _parse(engine, data, label, field, secret)
    items = decode_items(meta.get("items"), engine.model.vocab_size)
    if not items or not isinstance(items[-1], int):
        raise SnapshotError("snapshot metadata: the history must end with a token", field="items", value=None)
    try:
        history = replay(items)
    except AssertionError as err:
        raise SnapshotError(f"snapshot metadata: inconsistent history ({err})", field="items", value=None) from err
    n = history.n_tokens
    has = np.zeros(n, dtype=bool)
    ranges = meta.get("kv_ranges", [])
    try:
        for s, e in ranges:
            if not 0 <= int(s) < int(e) <= n:
                raise SnapshotError(f"snapshot metadata: KV range {[s, e]} is outside the {n} tokens",
                                    field="kv_ranges", value=[s, e])
            has[int(s):int(e)] = True
    except (TypeError, ValueError) as err:
        if isinstance(err, SnapshotError):
            raise
        raise SnapshotError("snapshot metadata: kv_ranges must be [[start, end], ...]", field="kv_ranges",
                            value=None) from err
    keys, values = tensors.get("keys"), tensors.get("values")
    g = engine.geometry
    dtype = engine.model.dtype
    want = (g.n_layers, g.n_kv_heads, int(has.sum()), g.head_dim)
    if (keys is None or values is None or tuple(keys.shape) != want or tuple(values.shape) != want
            or keys.dtype != dtype or values.dtype != dtype):
        raise SnapshotError(f"snapshot tensors must be {want} of {dtype}", field="keys",
                            value=None if keys is None else [*keys.shape, str(keys.dtype)])
    end_hidden = tensors.get("end_hidden")
    hidden_size = int(engine.model.config.hidden_size)
    if end_hidden is not None and (tuple(end_hidden.shape) != (hidden_size,) or end_hidden.dtype != dtype):
        raise SnapshotError(f"snapshot tensor end_hidden must be ({hidden_size},) of {dtype}", field="end_hidden",
                            value=[*end_hidden.shape, str(end_hidden.dtype)])
    col = np.cumsum(has) - 1
    device = engine.model.device
    # Validated: now warm the tree, as if a request had computed exactly the stored tokens.
    items = salted(items, salt)
    history = replay(items)
    tree = engine.tree
    match = tree.match(items)
    if match.last is not None:
        tree.lock(match.last)
    avail = np.zeros(n, dtype=bool)
    for node in match.path:
        if node.n_tokens and node.state is not KVState.ABSENT:
            avail[node.token_start:node.token_end] = True
    plan = RequestPlan(history, match, int(history.item_token[match.n_items]), avail, has,
                TokenUsage(n, 0, 0, 0, 0))

    def payload(s: int, e: int) -> TensorKV:
        a = int(col[s])
        return TensorKV(keys[:, :, a:a + e - s].to(device).clone(), values[:, :, a:a + e - s].to(device).clone(),
                        str(device))

    hidden = end_hidden.to(device) if end_hidden is not None and has[-1] else None
    end = commit(tree, plan, items, payload, g.bytes_per_token, last_hidden=hidden)
    if hidden is not None and end is not tree.root and end.end_hidden is None:
        end.end_hidden = hidden
    release(tree, end)
    return Warmed(n, int(has.sum()))


# ---------------------------------------------------------------------- files, never through a link

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def read_file(path: Path, *, label: str, field: str = "path", max_bytes: int | None = None) -> bytes:
    """The bytes of the regular file at ``path``; a symbolic link, a directory or a device there
    is refused (:class:`SnapshotError` naming ``label``, never the path)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise SnapshotError(f"snapshot {label!r} does not exist", field=field, value=label) from None
    except OSError as err:
        why = "is a symbolic link" if err.errno == errno.ELOOP else f"cannot be opened ({err.strerror})"
        raise SnapshotError(f"snapshot {label!r} {why}; refused", field=field, value=label) from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise SnapshotError(f"snapshot {label!r} is not a regular file; refused", field=field, value=label)
        if max_bytes is not None and st.st_size > max_bytes:
            raise SnapshotError(f"snapshot {label!r} is {st.st_size} bytes, more than the {max_bytes} allowed",
                                field=field, value=label)
        return fh.read()


def write_file(path: Path, data: bytes, *, label: str, field: str = "path", overwrite: bool = True) -> None:
    """Write ``data`` to ``path`` atomically: a fresh temporary file (mode 0600, never through a
    link) renamed into place. A link at ``path`` is replaced, never followed. Without
    ``overwrite`` an existing name (any kind of entry) raises :class:`SnapshotExistsError`."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
    except OSError as err:
        raise SnapshotError(f"snapshot {label!r} cannot be written ({err.strerror})", field=field,
                            value=label) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if overwrite:
            os.replace(tmp, path)  # rename(2) replaces a link itself; it never writes through one
            return
        try:
            os.link(tmp, path, follow_symlinks=False)  # atomic: fails if the name exists in any form
        except FileExistsError:
            raise SnapshotExistsError(f"snapshot {label!r} already exists; pass overwrite to replace it",
                                      field="name", value=label) from None
    except OSError as err:
        raise SnapshotError(f"snapshot {label!r} cannot be written ({err.strerror})", field=field,
                            value=label) from None
    finally:
        tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------------- the library API

def save_session(engine: Engine, messages: Sequence[Any], schedule: Any, path: str | Path, *,
                 salt: str | None = None, secret: bytes | None = None) -> SnapshotInfo:
    """Compute (or reuse) the history of ``messages`` + ``schedule`` and write it to ``path``
    (replacing what is there; the parent directory is created)."""
    target = Path(path)
    encoded = encode_session(engine, messages, schedule, salt=salt, secret=secret)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_file(target, encoded.data, label=str(target))
    return SnapshotInfo(str(target), encoded.tokens, encoded.kv_tokens, len(encoded.data))


def load_session(engine: Engine, path: str | Path, *, salt: str | None = None,
                 secret: bytes | None = None) -> SnapshotInfo:
    """Warm ``engine``'s tree with a saved history (validated first; refused files change nothing)."""
    target = Path(path)
    data = read_file(target, label=str(target))
    done = warm(engine, data, label=str(target), salt=salt, secret=secret)
    return SnapshotInfo(str(target), done.tokens, done.kv_tokens, len(data))
