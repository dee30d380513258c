"""Blocked attention (engine.attention) equals the naive masked softmax; the fused-kernel fast paths
(is_causal blocks, maskless blocks, masks shared across layers) change no result.

Tolerance: float32 outputs agree within 1e-5 relative to the largest magnitude (both compute the
same softmax in float32; only the summation order differs).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.attention import attend, attend_blocks, naive_attention, plan_blocks
from engine.rope import apply_rope, apply_rope_rolled, signed_sin

RTOL = 1e-5


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


@st.composite
def views(draw):
    """A job as the engine makes one: a view (earlier positions with gaps, as after drops) and an own
    segment of consecutive positions after it; queries are a subset of the own segment that ends it."""
    n_view = draw(st.integers(0, 40))
    view_pos = np.asarray(sorted(draw(st.sets(st.integers(0, 60), min_size=n_view, max_size=n_view))), dtype=np.int64)
    first = int(view_pos[-1]) + 1 + draw(st.integers(0, 5)) if n_view else draw(st.integers(0, 5))
    n_own = draw(st.integers(1, 40))
    own_pos = first + np.arange(n_own, dtype=np.int64)
    picked = draw(st.lists(st.booleans(), min_size=n_own, max_size=n_own))
    picked[-1] = True
    q_pos = own_pos[np.asarray(picked)]
    window = draw(st.sampled_from([None, 1, 4, 16, 100]))
    chunk = draw(st.sampled_from([1, 3, 8, 512]))
    heads = draw(st.sampled_from([(2, 1), (4, 2), (3, 3)]))
    return np.concatenate([view_pos, own_pos]), q_pos, window, chunk, heads


@settings(max_examples=200, deadline=None)
@given(case=views(), seed=st.integers(0, 2**16))
def test_blocked_attention_equals_naive(case, seed):
    k_pos, q_pos, window, chunk, (hq, hkv) = case
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(hq, len(q_pos), 8, generator=gen)
    k = torch.randn(hkv, len(k_pos), 8, generator=gen)
    v = torch.randn(hkv, len(k_pos), 8, generator=gen)
    blocks = plan_blocks(q_pos, k_pos, window, chunk=chunk)
    out = attend_blocks(q, k, v, blocks, 0.3)
    assert rel_err(out, naive_attention(q, k, v, q_pos, k_pos, 0.3, window)) <= RTOL
    assert [(b.q0, b.q1) for b in blocks] == [(i, min(len(q_pos), i + chunk)) for i in range(0, len(q_pos), chunk)]


def test_block_kinds_keep_the_fused_kernel_where_they_can():
    pos = np.arange(1000)
    full = plan_blocks(pos, pos, None)
    assert full[0].causal and full[0].mask is None  # a run attending to itself: is_causal
    assert [b.mask is not None for b in full] == [False, True]  # the second block also sees the first
    assert plan_blocks(pos[-1:], pos, None)[0].mask is None  # one query: no mask
    after = plan_blocks(np.arange(50, 60), np.arange(50), None, chunk=4)
    assert all(b.mask is None and not b.causal for b in after)  # queries after all their keys
    sliding = plan_blocks(pos, pos, 300, chunk=256)
    assert sliding[0].causal  # 256 consecutive queries fit inside the window
    assert all(b.k0 == max(0, b.q0 - 299) for b in sliding)  # a block reads only its window


def test_attend_is_the_planned_attention():
    gen = torch.Generator().manual_seed(0)
    pos = np.arange(700)
    q, k, v = torch.randn(4, 700, 16, generator=gen), torch.randn(1, 700, 16, generator=gen), torch.randn(
        1, 700, 16, generator=gen)
    for window in (None, 100):
        ref = naive_attention(q, k, v, pos, pos, 0.25, window)
        assert rel_err(attend(q, k, v, pos, pos, 0.25, window), ref) <= RTOL


@pytest.mark.parametrize("shape", [(5, 8), (3, 4, 6, 16), (7, 2, 64)])
def test_rolled_rope_is_bit_identical(shape):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(*shape, generator=gen)
    angles = torch.rand(shape[-2], shape[-1] // 2, generator=gen, dtype=torch.float64) * 100
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos().float(), emb.sin().float()
    assert torch.equal(apply_rope_rolled(x, cos, signed_sin(sin)), apply_rope(x, cos, sin))
