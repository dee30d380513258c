"""Decoding: a contiguous working cache of the final view, token sampling and stop handling.

After prefill, the alive tokens' KV (keys rotated to their final positions) is copied once into
preallocated [L, Hkv, capacity, D] buffers; every decode step appends one token in place and
attends over a slice (sliding layers: only the keys inside the window, found by one binary
search per step). The LM head runs for one row per step; nothing else is computed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from engine.models.lean import LeanModel
from engine.rope import rotate_keys


class DecodeCache:
    """The final view's KV, contiguous, with room for generated tokens.

    Args:
        model: the decoder.
        keys, values: [L, Hkv, n, D] the view's KV as stored (keys at compute positions).
        stored_pos: [n] compute positions of those keys; view_pos: [n] their positions now.
        capacity: n + the most tokens that will be appended.
    """

    def __init__(self, model: LeanModel, keys: torch.Tensor, values: torch.Tensor,
                 stored_pos: np.ndarray, view_pos: np.ndarray, capacity: int):
        self.model = model
        n = keys.shape[2]
        shape = (keys.shape[0], keys.shape[1], capacity, keys.shape[3])
        self.k = torch.empty(shape, dtype=keys.dtype, device=keys.device)
        self.v = torch.empty(shape, dtype=keys.dtype, device=keys.device)
        self.v[:, :, :n] = values
        deltas = np.asarray(view_pos, dtype=np.int64) - np.asarray(stored_pos, dtype=np.int64)
        moved = np.flatnonzero(deltas)
        self.k[:, :, :n] = keys
        if moved.size:
            idx = torch.as_tensor(moved, device=keys.device)
            for kind, rope in model.ropes.items():
                layers = [i for i, t in enumerate(model.layer_types) if t == kind]
                li = torch.as_tensor(layers, device=keys.device)
                sub = keys.index_select(0, li).index_select(2, idx)
                rotated = rotate_keys(sub, rope, deltas[moved])
                for j, layer in enumerate(layers):
                    self.k[layer][:, idx] = rotated[j]
        self.pos = np.empty(capacity, dtype=np.int64)
        self.pos[:n] = view_pos
        self.n = n
        self.start = n  # first appended token's slot

    def begin(self, position: int) -> dict[int | None, int]:
        """Reserve the next slot for a token at ``position``; returns each window's first visible slot."""
        slot = self.n
        assert slot < self.k.shape[2], "decode cache is full"
        self.pos[slot] = position
        return {w: (int(np.searchsorted(self.pos[:slot + 1], position - w, side="right")) if w else 0)
                for w in set(self.model.windows)}

    def attend_row(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lo: int) -> torch.Tensor:
        """Store one token's k/v [Hkv, D] in the reserved slot and attend q [Hq, D] over slots [lo, slot]."""
        m = self.model
        slot = self.n
        self.k[layer][:, slot] = k
        self.v[layer][:, slot] = v
        # One query per head: two batched matrix-vector products over the cache slice, read in place
        # (scaled_dot_product_attention's generic path would first write a scaled copy of the keys).
        qg = q.reshape(m.n_kv_heads, m.n_heads // m.n_kv_heads, q.shape[-1])
        scores = torch.bmm(qg, self.k[layer][:, lo:slot + 1].transpose(1, 2)).mul_(m.scaling)
        o = torch.bmm(torch.softmax(scores, dim=-1), self.v[layer][:, lo:slot + 1])
        return o.reshape(m.n_heads, q.shape[-1])

    def commit(self) -> None:
        """The reserved slot now holds the token's KV in every layer."""
        self.n += 1

    def appended(self, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """KV [L, Hkv, end - start, D] of appended tokens [start, end) (keys at their positions)."""
        assert 0 <= start <= end <= self.n - self.start
        return (self.k[:, :, self.start + start:self.start + end].clone(),
                self.v[:, :, self.start + start:self.start + end].clone())


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens. ``temperature == 0`` is greedy; ``seed`` makes sampling repeatable."""

    max_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    min_tokens: int = 0

    def __post_init__(self) -> None:
        from engine.errors import AKVError

        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens <= 0:
            raise AKVError(f"max_tokens must be a positive integer, got {self.max_tokens!r}",
                           field="max_tokens", value=self.max_tokens)
        if not (0.0 <= float(self.temperature) <= 100.0):
            raise AKVError(f"temperature must be in [0, 100], got {self.temperature!r}",
                           field="temperature", value=self.temperature)
        if not (0.0 < float(self.top_p) <= 1.0):
            raise AKVError(f"top_p must be in (0, 1], got {self.top_p!r}", field="top_p", value=self.top_p)
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not -(2**63) <= self.seed < 2**63):
            raise AKVError(f"seed must be an integer that fits 64 signed bits, got {self.seed!r}",
                           field="seed", value=self.seed)
        if isinstance(self.min_tokens, bool) or not isinstance(self.min_tokens, int) \
                or not 0 <= self.min_tokens <= self.max_tokens:
            raise AKVError(f"min_tokens must be an integer from 0 to max_tokens ({self.max_tokens}), "
                           f"got {self.min_tokens!r}", field="min_tokens", value=self.min_tokens)
        if not isinstance(self.ignore_eos, bool):
            raise AKVError(f"ignore_eos must be true or false, got {self.ignore_eos!r}",
                           field="ignore_eos", value=self.ignore_eos)

    @classmethod
    def of(cls, options: Mapping[str, Any], stop: Sequence[str] = ()) -> SamplingParams:
        """The sampling part of chat options (``engine.interface.ChatOptions``): missing keys take
        the defaults above; ``stop`` (a template's own stop strings) is appended to the caller's."""
        from engine.interface import check_chat_options

        check_chat_options(options)
        names = ("max_tokens", "temperature", "top_p", "seed", "ignore_eos", "min_tokens")
        picked = {k: options[k] for k in names if k in options}
        return cls(**picked, stop=tuple(options.get("stop") or ()) + tuple(stop))


class Sampler:
    """Turns logits into tokens under :class:`SamplingParams`."""

    def __init__(self, params: SamplingParams):
        self.params = params
        self.generator = torch.Generator()
        seed = params.seed if params.seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
        self.generator.manual_seed(seed)

    @property
    def greedy(self) -> bool:
        return self.params.temperature == 0.0

    def __call__(self, logits: torch.Tensor) -> int:
        p = self.params
        if p.temperature == 0.0:
            return int(torch.argmax(logits).item())
        probs = torch.softmax(logits.float().cpu() / p.temperature, dim=-1)
        if p.top_p < 1.0:
            sorted_p, sorted_i = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < p.top_p
            sorted_p = torch.where(keep, sorted_p, torch.zeros_like(sorted_p))
            choice = torch.multinomial(sorted_p / sorted_p.sum(), 1, generator=self.generator)
            return int(sorted_i[choice].item())
        return int(torch.multinomial(probs, 1, generator=self.generator).item())


def find_stop(text: str, stops: Sequence[str]) -> int | None:
    """Index where the earliest stop string starts in ``text``, or ``None``."""
    hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return min(hits) if hits else None


def step_caches(model: LeanModel, caches: list[DecodeCache], tokens: list[int], positions: list[int]) -> torch.Tensor:
    """Feed one token to each cache in a single forward pass; returns hidden states [B, H].

    Everything but attention runs batched over the B tokens; each row attends over its own cache.
    """
    windows = [c.begin(p) for c, p in zip(caches, positions)]

    def attend_rows(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    rows: np.ndarray | None) -> torch.Tensor:
        assert rows is None, "every row's hidden state is requested"
        w = model.windows[layer]
        out = torch.empty_like(q)
        for b, cache in enumerate(caches):
            out[:, b] = cache.attend_row(layer, q[:, b], k[:, b], v[:, b], windows[b][w])
        return out

    fwd = model.forward(tokens, positions, attend_rows, logit_rows=list(range(len(caches))), logits=False)
    for c in caches:
        c.commit()
    assert fwd.hidden is not None
    return fwd.hidden
