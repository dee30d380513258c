"""The reference executor: apply an event history one event at a time. Keep it forever as the oracle.

It holds, for every token, its key (RoPE'd at its *current* position), its value and whether it
is alive, and it processes the history literally:

- a run of tokens is prefilled attending to the alive tokens at their current positions
  (plus causally to itself), with the slow obvious attention of ``engine.attention``;
- a drop marks tokens dead;
- a reposition renumbers the alive tokens 0..n-1 and physically rotates their keys by the delta.

It shares only the decoder layers (``LeanModel``, itself checked against transformers) with the
fast path; views, rotations, masks and gathering are all its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from engine.attention import naive_attention
from engine.history import Drop, Item, Reposition, Salt
from engine.models.lean import LeanModel
from engine.rope import rotate_keys


@dataclass(frozen=True)
class ReferenceResult:
    """State after the whole history.

    Attributes:
        keys: [L, Hkv, N, D] keys at each token's final position (dead tokens: as last seen).
        values: [L, Hkv, N, D].
        alive: [N] bool.
        positions: [N] final positions (meaningful where alive).
        next_pos: position of the next token.
        last_logits: [V] next-token logits after the last token.
    """

    keys: torch.Tensor
    values: torch.Tensor
    alive: np.ndarray
    positions: np.ndarray
    next_pos: int
    last_logits: torch.Tensor


class ReferenceExecutor:
    """Runs histories step by step on ``model``."""

    def __init__(self, model: LeanModel):
        self.model = model

    @torch.no_grad()
    def run(self, items: Sequence[Item]) -> ReferenceResult:
        m = self.model
        n = sum(1 for it in items if isinstance(it, int))
        keys = torch.zeros(len(m.layers), m.n_kv_heads, n, m.head_dim, dtype=m.dtype, device=m.device)
        values = torch.zeros_like(keys)
        alive = np.zeros(n, dtype=bool)
        pos = np.zeros(n, dtype=np.int64)
        count, next_pos = 0, 0
        last_logits: torch.Tensor | None = None
        run: list[int] = []

        def flush() -> None:
            nonlocal count, next_pos, last_logits
            if not run:
                return
            t = len(run)
            run_pos = np.arange(next_pos, next_pos + t, dtype=np.int64)
            ctx = np.flatnonzero(alive[:count])

            def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       rows: np.ndarray | None) -> torch.Tensor:
                all_k = torch.cat([keys[layer][:, ctx], k], dim=1)
                all_v = torch.cat([values[layer][:, ctx], v], dim=1)
                k_pos = np.concatenate([pos[ctx], run_pos])
                q_pos = run_pos if rows is None else run_pos[rows]
                return naive_attention(q, all_k, all_v, q_pos, k_pos, m.scaling, m.windows[layer])

            out = m.forward(run, run_pos, attend, logit_rows=[t - 1])
            keys[:, :, count:count + t] = out.keys
            values[:, :, count:count + t] = out.values
            assert out.logits is not None
            last_logits = out.logits[0]
            alive[count:count + t] = True
            pos[count:count + t] = run_pos
            count += t
            next_pos += t
            run.clear()

        for it in items:
            if isinstance(it, Drop):
                flush()
                for s, e in it.ranges:
                    alive[s:e] = False
            elif isinstance(it, Reposition):
                flush()
                idx = np.flatnonzero(alive[:count])
                new = np.arange(idx.shape[0], dtype=np.int64)
                delta = new - pos[idx]
                for layer in range(len(m.layers)):
                    keys[layer][:, idx] = rotate_keys(keys[layer][:, idx], m.rope(layer), delta)
                pos[idx] = new
                next_pos = int(idx.shape[0])
            elif isinstance(it, Salt):
                continue  # a namespace marker: no token, no position
            else:
                run.append(int(it))
        flush()
        assert last_logits is not None, "a history must end with tokens"
        return ReferenceResult(keys, values, alive, pos, next_pos, last_logits)
