"""Reposition's rotation: a rotated key equals the key RoPE'd directly at the new position."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig

from engine.rope import Rope, apply_rope, rope_for, rotate_keys


def _default_rope(theta: float, dim: int = 256) -> Rope:
    return Rope(1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)))


def _llama3_rope() -> Rope:
    cfg = LlamaConfig(hidden_size=512, num_attention_heads=4, head_dim=128, max_position_embeddings=131072,
                      rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 8192})
    return rope_for(cfg, None)


@pytest.mark.parametrize("rope", [_default_rope(1e4), _default_rope(1e6), _llama3_rope()],
                         ids=["gemma-sliding-1e4", "gemma-global-1e6", "llama3-scaled"])
def test_rotation_equals_direct_rope(rope):
    gen = torch.Generator().manual_seed(0)
    d = rope.head_dim
    raw = torch.randn(2, 64, d, generator=gen)  # [heads, tokens, dim] pre-RoPE keys
    rng = np.random.default_rng(0)
    old = rng.integers(0, 30_000, size=64)
    delta = rng.integers(-20_000, 20_001, size=64)
    delta = np.clip(delta, -old, None)  # new positions stay >= 0
    new = old + delta
    cos_o, sin_o = rope.cos_sin(old)
    cos_n, sin_n = rope.cos_sin(new)
    stored = apply_rope(raw, cos_o, sin_o)
    moved = rotate_keys(stored, rope, delta)
    direct = apply_rope(raw, cos_n, sin_n)
    rel = ((moved - direct).norm(dim=-1) / direct.norm(dim=-1)).max().item()
    assert rel <= 1e-4, rel
    # Values (and norms) are untouched by a rotation.
    assert torch.allclose(moved.norm(dim=-1), stored.norm(dim=-1), rtol=1e-5)


def test_zero_delta_is_identity():
    rope = _default_rope(1e4, 16)
    k = torch.randn(1, 5, 16)
    assert torch.allclose(rotate_keys(k, rope, np.zeros(5, dtype=np.int64)), k)


def test_gemma_layers_get_their_own_theta(gemma_config_ropes):
    sliding, full = gemma_config_ropes
    assert sliding.inv_freq[1].item() == pytest.approx(1e4 ** (-2 / 256), rel=1e-12)
    assert full.inv_freq[1].item() == pytest.approx(1e6 ** (-2 / 256), rel=1e-12)


@pytest.fixture(scope="module")
def gemma_config_ropes():
    from transformers import Gemma3TextConfig

    cfg = Gemma3TextConfig(head_dim=256, rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}})
    return rope_for(cfg, "sliding_attention"), rope_for(cfg, "full_attention")
