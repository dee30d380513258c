"""Attention over an explicit key set, masked by positions.

Every attention call in the engine has the same shape: queries at known positions attend to a
set of keys at known positions (the view). Because views list keys in position order and the
queries of a segment come after every key of their view, causality *and* the sliding window are
both functions of positions alone::

    allowed[i, j] = k_pos[j] <= q_pos[i]  and  (window is None or q_pos[i] - k_pos[j] < window)

Sliding-window layers therefore apply the window by position in the current view (after drops
and repositions), never by entry count. Query blocks are processed in chunks so that a sliding
layer only touches keys within the window of the chunk.

:func:`naive_attention` is the slow, obvious version used by the reference executor.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

QUERY_CHUNK = 512


def position_mask(
    q_pos: np.ndarray, k_pos: np.ndarray, window: int | None, dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Float additive mask [Tq, Tk]: 0 where allowed, the dtype's minimum where not.

    Built on ``device`` (only the position vectors are copied there, not the mask).
    """
    q = torch.as_tensor(q_pos, device=device)[:, None]
    k = torch.as_tensor(k_pos, device=device)[None, :]
    allowed = k <= q
    if window is not None:
        allowed &= (q - k) < window
    mask = torch.zeros(allowed.shape, dtype=dtype, device=q.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)


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
    """
    hq, tq, d = q.shape
    hkv = k.shape[0]
    groups = hq // hkv
    out = torch.empty_like(q)
    for c0 in range(0, tq, QUERY_CHUNK):
        c1 = min(tq, c0 + QUERY_CHUNK)
        qp = q_pos[c0:c1]
        hi = int(np.searchsorted(k_pos, qp[-1], side="right"))
        lo = 0 if window is None else int(np.searchsorted(k_pos, qp[0] - window, side="right"))
        kc, vc, kp = k[:, lo:hi], v[:, lo:hi], k_pos[lo:hi]
        # Group query heads per KV head: [Hkv, G*Tc, D] attends to [Hkv, Tk, D] without repeating K/V.
        qc = q[:, c0:c1].reshape(hkv, groups * (c1 - c0), d)
        # A single query needs no mask: the slice [lo, hi) holds exactly the keys it may see.
        mask = position_mask(qp, kp, window, q.dtype, q.device).repeat(groups, 1) if c1 - c0 > 1 else None
        o = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=mask, scale=scaling)
        out[:, c0:c1] = o.reshape(hq, c1 - c0, d)
    return out


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
