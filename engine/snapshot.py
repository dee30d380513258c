"""Session durability: save a history's KV to one safetensors file and warm a tree from it.

File layout (one ``.safetensors`` file):

- tensors ``keys`` and ``values`` [L, Hkv, n, D]: the KV of the n tokens that had KV (keys at
  their compute positions, exactly as the tree stores them), and ``end_hidden`` [H] when known;
- metadata ``akv`` (JSON): format, model name, tokenizer fingerprint, KV geometry, dtype,
  template, the event history (tokens and events), which token ranges the tensors cover, the
  messages and schedule it came from, and a SHA-256 of the tensor bytes.

Loading validates everything (format, model, tokenizer, geometry, checksum, ranges) before it
touches the tree, so a corrupt or foreign file is refused with a :class:`SnapshotError` and the
tree is left exactly as it was. A loaded history yields the same logits as the original: the
tensors are the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from engine.errors import SnapshotError
from engine.history import REPOSITION, Drop, Item, Reposition, replay
from engine.kvstore import TensorKV
from engine.plan import Plan, TokenUsage, commit, release
from engine.radix import KVState

if TYPE_CHECKING:
    from engine.engine import Engine

FORMAT = "akv-snapshot/1"


@dataclass(frozen=True)
class SnapshotInfo:
    """What a save or load did."""

    path: str
    tokens: int
    kv_tokens: int
    bytes: int


def encode_items(items: Sequence[Item]) -> list[Any]:
    out: list[Any] = []
    for it in items:
        if isinstance(it, Drop):
            out.append({"drop": [list(r) for r in it.ranges]})
        elif isinstance(it, Reposition):
            out.append({"reposition": True})
        else:
            out.append(int(it))
    return out


def decode_items(raw: Any) -> list[Item]:
    if not isinstance(raw, list):
        raise SnapshotError("snapshot metadata: items must be a list", field="items", value=type(raw).__name__)
    items: list[Item] = []
    for x in raw:
        if isinstance(x, int) and not isinstance(x, bool):
            items.append(x)
        elif isinstance(x, dict) and x.get("reposition") is True:
            items.append(REPOSITION)
        elif isinstance(x, dict) and isinstance(x.get("drop"), list):
            try:
                items.append(Drop(tuple((int(s), int(e)) for s, e in x["drop"])))
            except (AssertionError, TypeError, ValueError) as err:
                raise SnapshotError(f"snapshot metadata: bad drop event {x!r}", field="items", value=x) from err
        else:
            raise SnapshotError(f"snapshot metadata: unknown item {x!r}", field="items", value=x)
    return items


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """SHA-256 of the tokenizer's full definition (vocabulary, merges, special tokens)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(text.encode()).hexdigest()


def _checksum(tensors: Mapping[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


def save_session(engine: Engine, messages: Sequence[Any], schedule: Any, path: str | Path) -> SnapshotInfo:
    """Compute (or reuse) the history of ``messages`` + ``schedule`` and write it to ``path``."""
    layout = engine.layout(messages, schedule)
    items = layout.items
    engine.prefill(messages, schedule)
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
            "kv_ranges": _runs(has), "messages": list(messages), "schedule": layout.schedule.to_wire(),
            "checksum": _checksum(tensors),
        }
    finally:
        engine.tree.unlock(last)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    save_file(tensors, str(tmp), metadata={"akv": json.dumps(meta)})
    tmp.replace(target)
    return SnapshotInfo(str(target), n, int(has.sum()), target.stat().st_size)


def _read(engine: Engine, path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    if not path.is_file():
        raise SnapshotError(f"snapshot {str(path)!r} does not exist", field="path", value=str(path))
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as fh:
            raw_meta = (fh.metadata() or {}).get("akv")
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise SnapshotError(f"snapshot {str(path)!r} is not a readable safetensors file: {err}",
                            field="path", value=str(path)) from err
    if raw_meta is None:
        raise SnapshotError(f"snapshot {str(path)!r} has no AKV metadata", field="path", value=str(path))
    try:
        meta = json.loads(raw_meta)
    except json.JSONDecodeError as err:
        raise SnapshotError(f"snapshot {str(path)!r}: metadata is not JSON", field="path", value=str(path)) from err
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
            raise SnapshotError(f"snapshot {str(path)!r} was made for {name} {got!r}; this engine has {want!r}",
                                field=name, value=got)
    if meta.get("checksum") != _checksum(tensors):
        raise SnapshotError(f"snapshot {str(path)!r}: tensor checksum mismatch (corrupt file)",
                            field="checksum", value=meta.get("checksum"))
    return meta, tensors


def load_session(engine: Engine, path: str | Path) -> SnapshotInfo:
    """Warm ``engine``'s tree with a saved history (validated first; refused files change nothing)."""
    target = Path(path)
    meta, tensors = _read(engine, target)
    items = decode_items(meta.get("items"))
    if not items or not isinstance(items[-1], int):
        raise SnapshotError("snapshot metadata: the history must end with a token", field="items", value=None)
    try:
        history = replay(items)
    except AssertionError as err:
        raise SnapshotError(f"snapshot metadata: inconsistent history ({err})", field="items", value=None) from err
    n = history.n_tokens
    has = np.zeros(n, dtype=bool)
    try:
        for s, e in meta.get("kv_ranges", []):
            if not 0 <= int(s) < int(e) <= n:
                raise SnapshotError(f"snapshot metadata: KV range {[s, e]} is outside the {n} tokens",
                                    field="kv_ranges", value=[s, e])
            has[int(s):int(e)] = True
    except (TypeError, ValueError) as err:
        raise SnapshotError("snapshot metadata: kv_ranges must be [[start, end], ...]", field="kv_ranges",
                            value=None) from err
    keys, values = tensors.get("keys"), tensors.get("values")
    g = engine.geometry
    want = (g.n_layers, g.n_kv_heads, int(has.sum()), g.head_dim)
    if keys is None or values is None or tuple(keys.shape) != want or tuple(values.shape) != want:
        raise SnapshotError(f"snapshot tensors must be {want}", field="keys",
                            value=None if keys is None else list(keys.shape))
    col = np.cumsum(has) - 1
    device = engine.model.device
    end_hidden = tensors.get("end_hidden")
    # Validated: now warm the tree, as if a request had computed exactly the stored tokens.
    tree = engine.tree
    match = tree.match(items)
    if match.last is not None:
        tree.lock(match.last)
    avail = np.zeros(n, dtype=bool)
    for node in match.path:
        if node.n_tokens and node.state is not KVState.ABSENT:
            avail[node.token_start:node.token_end] = True
    plan = Plan(history, match, int(history.item_token[match.n_items]), avail, has,
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
    return SnapshotInfo(str(target), n, int(has.sum()), target.stat().st_size)
