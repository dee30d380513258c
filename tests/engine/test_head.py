"""The greedy head returns exactly the float32 argmax, proving it or falling back."""

from __future__ import annotations

import torch

from engine.models.head import GreedyHead


def test_greedy_head_equals_float32_argmax():
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(20_000, 64, generator=gen) * 0.05
    head = GreedyHead(w)
    for _ in range(200):
        h = torch.randn(64, generator=gen) * 3
        assert head.argmax(h) == int(torch.argmax(w @ h))
    assert head.stats.proved > 150  # the fast path usually proves its answer


def test_near_ties_fall_back_and_stay_exact():
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(5_000, 32, generator=gen)
    w[4999] = w[17] * (1 + 1e-7)  # two rows whose logits differ below half-precision resolution
    head = GreedyHead(w, candidates=1)
    h = w[17] / w[17].norm()
    assert head.argmax(h) == int(torch.argmax(w @ h))
    assert head.stats.fallbacks == 1


def test_non_finite_half_scores_fall_back():
    w = torch.randn(100, 8)
    w[3] = 1e6  # overflows float16
    head = GreedyHead(w)
    h = torch.ones(8)
    assert head.argmax(h) == int(torch.argmax(w @ h)) and head.stats.fallbacks == 1
