"""Floating-point operations of a decoder forward, counted from a transformers config.

For benchmarks: prefill throughput becomes a share of a measured matmul peak only when the work
is counted the same way everywhere. One multiply-add is 2 FLOPs. Counted:

- projections: Q/K/V, O, gate/up and down of every layer, for every token;
- attention: ``Q K^T`` and ``P V`` over the keys each query may see (causal, and within the
  sliding window on sliding layers), i.e. the work needed, not what a dense kernel computes;
- LM head: the last position only (prefill needs the next-token logits of one row).

Not counted: embedding lookup, norms, RoPE, softmax, activation, residual adds (each O(T x H)
and memory-bound, under 1% of the total for gemma-3-270m).

Not for: cost accounting of requests (``engine.cache.accounting`` counts tokens, not FLOPs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one forward, by part (see the module docstring for what each includes)."""

    projections: int
    attention: int
    lm_head: int

    @property
    def total(self) -> int:
        return self.projections + self.attention + self.lm_head


@dataclass(frozen=True)
class DecoderShape:
    """What the FLOP count needs of a decoder config."""

    hidden: int
    intermediate: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab: int
    windows: tuple[int | None, ...]  # per layer: sliding window, or None for full attention

    def __post_init__(self) -> None:
        if len(self.windows) != self.n_layers:
            raise ValueError(f"{len(self.windows)} windows for {self.n_layers} layers")

    @classmethod
    def from_config(cls, config: Any) -> DecoderShape:
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        n_layers = int(config.num_hidden_layers)
        types = getattr(config, "layer_types", None) or ["full_attention"] * n_layers
        window = getattr(config, "sliding_window", None)
        windows = tuple(int(window) if (t == "sliding_attention" and window) else None for t in types)
        return cls(int(config.hidden_size), int(config.intermediate_size), n_layers,
                   int(config.num_attention_heads), int(kv_heads), int(head_dim), int(config.vocab_size), windows)

    @property
    def projection_flops_per_token(self) -> int:
        """2 x the multiply-adds of one token through every layer's projections."""
        h, d = self.hidden, self.head_dim
        qkv = h * (self.n_heads + 2 * self.n_kv_heads) * d
        o = self.n_heads * d * h
        mlp = 3 * h * self.intermediate
        return 2 * self.n_layers * (qkv + o + mlp)

    def gemm_shapes(self) -> dict[str, tuple[int, int]]:
        """The (out, in) shapes of one layer's projections as the lean forward runs them (fused)."""
        h, d = self.hidden, self.head_dim
        return {"qkv": ((self.n_heads + 2 * self.n_kv_heads) * d, h), "o": (h, self.n_heads * d),
                "gate_up": (2 * self.intermediate, h), "down": (h, self.intermediate)}


def _visible_keys(context: int, n_tokens: int, window: int | None) -> int:
    """Sum over queries at positions context .. context + n_tokens - 1 of the keys each sees."""
    first = context + 1  # the query at position p sees min(p + 1, window) keys
    last = context + n_tokens
    if window is None:
        return (first + last) * n_tokens // 2
    capped = max(first, min(last + 1, window))  # queries from here on see `window` keys each
    return (first + capped - 1) * (capped - first) // 2 + (last + 1 - capped) * window


def forward_flops(shape: DecoderShape, n_tokens: int, context: int = 0, logit_rows: int = 1) -> FlopCount:
    """FLOPs of computing ``n_tokens`` new tokens after ``context`` cached ones (one sequence).

    Prefill of T tokens: ``forward_flops(s, T)``; one decode step at context C:
    ``forward_flops(s, 1, C)``. ``logit_rows`` rows go through the LM head.
    """
    if n_tokens < 1 or context < 0 or logit_rows < 0:
        raise ValueError(f"need n_tokens >= 1, context >= 0, logit_rows >= 0; got {n_tokens}, {context}, {logit_rows}")
    per_key = 2 * 2 * shape.n_heads * shape.head_dim  # QK^T and PV, one query-key pair
    attention = sum(per_key * _visible_keys(context, n_tokens, w) for w in shape.windows)
    return FlopCount(projections=shape.projection_flops_per_token * n_tokens, attention=attention,
                     lm_head=2 * shape.hidden * shape.vocab * logit_rows)
