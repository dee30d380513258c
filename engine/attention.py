"""Attention over an explicit key set, masked by positions.

Every attention call in the engine has the same shape: queries at known positions attend to a
set of keys at known positions (the view). Because views list keys in position order and the
queries of a segment come after every key of their view, causality *and* the sliding window are
both functions of positions alone::

    allowed[i, j] = k_pos[j] <= q_pos[i]  and  (window is None or q_pos[i] - k_pos[j] < window)

Sliding-window layers therefore apply the window by position in the current view (after drops
and repositions), never by entry count. Queries are processed in blocks so that a block only
touches the keys it may see: a full-attention block reads the keys up to its last query, a
sliding block only those within the window of its first query (smaller blocks waste less of the
window)::

    keys  0 ............................................ Tk
    block [q0, q1)        sees columns [k0, k1):  k0 = first key inside the window of q0
                                                  k1 = one past the last key at or before q1 - 1

A block's mask depends on positions only, so :func:`plan_blocks` builds it once and every layer
of the same window reuses it. Blocks whose mask is trivial carry none, which keeps
``scaled_dot_product_attention`` on its fused CPU kernel: a square block of a run attending to
itself is ``is_causal``; a block that sees every key (a single query, or queries after all their
keys) has no mask at all.

:func:`naive_attention` is the slow, obvious version used by the reference executor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

QUERY_CHUNK = 512
"""Queries per block of a full-attention layer."""
SLIDING_CHUNK = 256
"""Queries per block of a sliding-window layer (a block reads up to ``SLIDING_CHUNK + window - 1`` keys)."""


def position_mask(
    q_pos: np.ndarray, k_pos: np.ndarray, window: int | None, dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None, seen: np.ndarray | None = None,
) -> torch.Tensor:
    """Float additive mask [Tq, Tk]: 0 where allowed, the dtype's minimum where not.

    ``seen`` [Tq, Tk] (optional): which keys each query may see at all, besides causality and the
    window. Built on ``device`` (only the position vectors and ``seen`` are copied there).
    """
    q = torch.as_tensor(q_pos, device=device)[:, None]
    k = torch.as_tensor(k_pos, device=device)[None, :]
    allowed = k <= q
    if window is not None:
        allowed &= (q - k) < window
    if seen is not None:
        allowed &= torch.as_tensor(seen, device=q.device)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=q.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)


@dataclass(frozen=True)
class Block:
    """Query rows [q0, q1) attend to key columns [k0, k1).

    Attributes:
        mask: [q1 - q0, k1 - k0] additive mask, or ``None`` when the block needs none.
        causal: (only without a mask) the block is square and query i sees keys 0..i; otherwise
            every query sees every key of the block.
    """

    q0: int
    q1: int
    k0: int
    k1: int
    mask: torch.Tensor | None
    causal: bool


def plan_blocks(
    q_pos: np.ndarray, k_pos: np.ndarray, window: int | None, dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None, chunk: int | None = None,
    groups: np.ndarray | None = None, member: np.ndarray | None = None,
) -> tuple[Block, ...]:
    """The blocks (and masks) of queries at ``q_pos`` over keys at ``k_pos``, both ascending.

    Args:
        chunk: queries per block (default: :data:`QUERY_CHUNK`, or :data:`SLIDING_CHUNK` with a window).
        groups, member: queries of several views over one key order: query i may see key j only
            where ``member[groups[i], j]`` ([Tq] group ids, [G, Tk] booleans); a block whose
            queries all see every key of its range plans as without them.

    Every query must see at least one key (itself, normally).
    """
    q_pos = np.asarray(q_pos, dtype=np.int64)
    k_pos = np.asarray(k_pos, dtype=np.int64)
    step = chunk or (QUERY_CHUNK if window is None else SLIDING_CHUNK)
    blocks = []
    for q0 in range(0, len(q_pos), step):
        q1 = min(len(q_pos), q0 + step)
        qp = q_pos[q0:q1]
        k1 = int(np.searchsorted(k_pos, qp[-1], side="right"))
        k0 = 0 if window is None else int(np.searchsorted(k_pos, qp[0] - window, side="right"))
        kp = k_pos[k0:k1]
        seen = None if member is None or groups is None else member[groups[q0:q1], k0:k1]
        if seen is not None and bool(seen.all()):
            seen = None
        in_window = window is None or int(qp[-1] - kp[0]) < window
        if seen is None and (q1 - q0 == 1 or (in_window and kp[-1] <= qp[0])):
            blocks.append(Block(q0, q1, k0, k1, None, causal=False))  # every key visible
        elif seen is None and in_window and np.array_equal(qp, kp) and bool(np.all(np.diff(qp) > 0)):
            blocks.append(Block(q0, q1, k0, k1, None, causal=True))
        else:
            blocks.append(Block(q0, q1, k0, k1, position_mask(qp, kp, window, dtype, device, seen), causal=False))
    return tuple(blocks)


def attend_blocks(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, blocks: tuple[Block, ...], scaling: float,
) -> torch.Tensor:
    """Attention of queries over keys block by block (see :func:`plan_blocks`).

    Args:
        q: [Hq, Tq, D] queries (RoPE applied). ``Hq`` is a multiple of ``Hkv``.
        k, v: [Hkv, Tk, D] keys (RoPE applied at their view positions) and values.
        blocks: a plan of these queries over these keys.
        scaling: softmax scale.

    Returns:
        [Hq, Tq, D] attention outputs.
    """
    hq, tq, d = q.shape
    hkv, tk = k.shape[0], k.shape[1]
    groups = hq // hkv
    # Batch = KV heads, heads = the query heads of each group: K/V broadcast (stride 0), never repeated.
    q4 = q.view(hkv, groups, tq, d)
    k4 = k[:, None].expand(hkv, groups, tk, d)
    v4 = v[:, None].expand(hkv, groups, tk, d)

    def one(b: Block) -> torch.Tensor:
        return F.scaled_dot_product_attention(q4[:, :, b.q0:b.q1], k4[:, :, b.k0:b.k1], v4[:, :, b.k0:b.k1],
                                              attn_mask=b.mask, is_causal=b.causal, scale=scaling)

    if len(blocks) == 1:
        return one(blocks[0]).reshape(hq, tq, d)
    out = torch.empty(hkv, groups, tq, d, dtype=q.dtype, device=q.device)
    for b in blocks:
        out[:, :, b.q0:b.q1] = one(b)
    return out.view(hq, tq, d)


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: np.ndarray,
    k_pos: np.ndarray,
    scaling: float,
    window: int | None,
) -> torch.Tensor:
    """Attention of queries over keys, masked by position.

    Args:
        q: [Hq, Tq, D] queries (RoPE applied). ``Hq`` is a multiple of ``Hkv``.
        k, v: [Hkv, Tk, D] keys (RoPE applied at their view positions) and values.
        q_pos: [Tq] ascending query positions; k_pos: [Tk] ascending key positions.
        scaling: softmax scale.
        window: sliding window length, or ``None`` for full attention.

    Returns:
        [Hq, Tq, D] attention outputs. Every query must see at least one key (itself, normally).
        Callers that attend many layers over the same positions plan once (:func:`plan_blocks`)
        and call :func:`attend_blocks`.
    """
    return attend_blocks(q, k, v, plan_blocks(q_pos, k_pos, window, q.dtype, q.device), scaling)


def naive_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: np.ndarray,
    k_pos: np.ndarray,
    scaling: float,
    window: int | None,
) -> torch.Tensor:
    """The same contract as :func:`attend`, written the slow obvious way (reference only)."""
    groups = q.shape[0] // k.shape[0]
    k_full = k.repeat_interleave(groups, dim=0)
    v_full = v.repeat_interleave(groups, dim=0)
    scores = torch.matmul(q, k_full.transpose(1, 2)) * scaling
    scores = scores + position_mask(q_pos, k_pos, window, q.dtype, q.device)[None]
    return torch.matmul(torch.softmax(scores, dim=-1), v_full)
