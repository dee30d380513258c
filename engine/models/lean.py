"""A lean forward pass over a transformers causal LM's weights, with attention left to the caller.

The engine needs to control exactly which keys each query sees and at which positions (drops,
repositions, segment-batched restore), so it runs the decoder layers itself: norms and MLPs are
the model's own modules (their semantics stay transformers'), the Q/K/V and gate/up projections
are fused into one matmul each, RoPE uses float64 angles (``engine.rope``), and attention is a
callback. Supported families: Llama-style (Llama, Qwen2, Qwen3, Mistral) and Gemma-3 text.

Not for: training, batching several requests' padding, or quantized weights.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from engine.errors import ModelLoadError
from engine.models.head import GreedyHead
from engine.rope import Rope, apply_rope, rope_for

AttendFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""(layer, q [Hq, T, D], k [Hkv, T, D], v [Hkv, T, D]) -> attention output [Hq, T, D]."""


@dataclass(frozen=True)
class KVGeometry:
    """Shape of one token's KV: enough to size pools without a model."""

    n_layers: int
    n_kv_heads: int
    head_dim: int
    dtype_bytes: int

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.dtype_bytes

    @classmethod
    def from_config(cls, config: Any, dtype: torch.dtype = torch.float32) -> KVGeometry:
        """The geometry of a transformers decoder config with KV stored in ``dtype``."""
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        return cls(int(config.num_hidden_layers), int(kv_heads), int(head_dim), torch.finfo(dtype).bits // 8)


@dataclass(frozen=True)
class ForwardOut:
    """Result of :meth:`LeanModel.forward`.

    Attributes:
        keys, values: [L, Hkv, T, D] for the input tokens (keys with RoPE at the input positions).
        logits: [R, V] float32 logits of the requested rows, or ``None``.
        hidden: [R, H] last-layer hidden states (before the final norm) of those rows.
    """

    keys: torch.Tensor
    values: torch.Tensor
    logits: torch.Tensor | None
    hidden: torch.Tensor | None = None


class LeanModel:
    """Runs a transformers decoder with caller-supplied attention.

    Args:
        hf_model: a loaded ``*ForCausalLM`` (eval mode; weights are shared, not copied, except
            the fused projections).
        name: display name.
    """

    def __init__(self, hf_model: Any, name: str):
        hf_model.eval()
        self.hf = hf_model
        self.name = name
        cfg = hf_model.config
        self.config = cfg
        inner = hf_model.model
        self.layers = list(inner.layers)
        self.embed_tokens = inner.embed_tokens
        self.norm = inner.norm
        self.lm_head = hf_model.lm_head
        first = self.layers[0]
        self.is_gemma = hasattr(first, "pre_feedforward_layernorm")
        attn = first.self_attn
        self.qk_norm = hasattr(attn, "q_norm")
        if getattr(cfg, "attn_logit_softcapping", None):
            raise ModelLoadError("attention logit softcapping (Gemma-2) is not supported",
                                 field="model", value=name)
        self.n_heads = cfg.num_attention_heads
        self.n_kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.scaling = float(attn.scaling)
        self.final_softcap = getattr(cfg, "final_logit_softcapping", None)
        self.vocab_size = cfg.vocab_size
        self.max_positions = int(getattr(cfg, "max_position_embeddings", 8192))
        layer_types = getattr(cfg, "layer_types", None) or ["full_attention"] * len(self.layers)
        self.layer_types: list[str] = list(layer_types)
        window = getattr(cfg, "sliding_window", None)
        self.windows: list[int | None] = [
            int(window) if (t == "sliding_attention" and window) else None for t in self.layer_types
        ]
        per_type = isinstance(getattr(cfg, "rope_parameters", None), dict) and any(
            isinstance(v, dict) for v in cfg.rope_parameters.values())
        self.ropes: dict[str, Rope] = {
            t: rope_for(cfg, t if per_type else None) for t in sorted(set(self.layer_types))
        }
        self._head: GreedyHead | None = None
        self._fuse()

    @torch.no_grad()
    def _fuse(self) -> None:
        self.w_qkv, self.b_qkv, self.w_gu = [], [], []
        for layer in self.layers:
            a = layer.self_attn
            self.w_qkv.append(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).contiguous())
            has_bias = a.q_proj.bias is not None
            self.b_qkv.append(torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]) if has_bias else None)
            m = layer.mlp
            self.w_gu.append(torch.cat([m.gate_proj.weight, m.up_proj.weight]).contiguous())

    @property
    def geometry(self) -> KVGeometry:
        dtype = self.embed_tokens.weight.dtype
        return KVGeometry(len(self.layers), self.n_kv_heads, self.head_dim, torch.finfo(dtype).bits // 8)

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    def rope(self, layer: int) -> Rope:
        return self.ropes[self.layer_types[layer]]

    @torch.no_grad()
    def forward(
        self,
        input_ids: Sequence[int] | np.ndarray,
        positions: Sequence[int] | np.ndarray,
        attend: AttendFn,
        logit_rows: Sequence[int] | np.ndarray | None = None,
        logits: bool = True,
    ) -> ForwardOut:
        """Run every layer over ``input_ids`` at ``positions``.

        Args:
            input_ids: [T] token ids.
            positions: [T] position ids (RoPE for queries and for the returned keys).
            attend: computes attention per layer from this call's q/k/v (it decides which other
                keys each query sees).
            logit_rows: indices into [0, T) whose hidden states (and logits) to return.
            logits: compute the logits of those rows (False: hidden states only, e.g. for
                :meth:`greedy`, which avoids most of the LM head).

        Returns:
            :class:`ForwardOut` with the new tokens' KV and the requested logits.
        """
        ids = torch.as_tensor(np.asarray(input_ids, dtype=np.int64), device=self.device)
        t = ids.shape[0]
        n_q, n_kv, d = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim, self.head_dim
        cos_sin = {k: tuple(x.to(self.device) for x in r.cos_sin(positions, self.dtype))
                   for k, r in self.ropes.items()}
        keys = torch.empty(len(self.layers), self.n_kv_heads, t, d, dtype=self.dtype, device=self.device)
        values = torch.empty_like(keys)
        h = self.embed_tokens(ids)
        for li, layer in enumerate(self.layers):
            a = layer.self_attn
            x = layer.input_layernorm(h)
            qkv = F.linear(x, self.w_qkv[li], self.b_qkv[li])
            q = qkv[:, :n_q].view(t, self.n_heads, d).transpose(0, 1)
            k = qkv[:, n_q:n_q + n_kv].view(t, self.n_kv_heads, d).transpose(0, 1)
            v = qkv[:, n_q + n_kv:].view(t, self.n_kv_heads, d).transpose(0, 1)
            if self.qk_norm:
                q, k = a.q_norm(q), a.k_norm(k)
            cos, sin = cos_sin[self.layer_types[li]]
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            keys[li] = k
            values[li] = v
            o = attend(li, q, k, v).transpose(0, 1).reshape(t, n_q)
            o = a.o_proj(o)
            if self.is_gemma:
                o = layer.post_attention_layernorm(o)
            h = h + o
            m = layer.pre_feedforward_layernorm(h) if self.is_gemma else layer.post_attention_layernorm(h)
            gate, up = F.linear(m, self.w_gu[li]).chunk(2, dim=-1)
            m = layer.mlp.down_proj(layer.mlp.act_fn(gate) * up)
            if self.is_gemma:
                m = layer.post_feedforward_layernorm(m)
            h = h + m
        out_logits = hidden = None
        if logit_rows is not None and len(logit_rows):
            rows = torch.as_tensor(np.asarray(logit_rows, dtype=np.int64), device=self.device)
            hidden = h.index_select(0, rows)
            out_logits = self.logits(hidden) if logits else None
        return ForwardOut(keys, values, out_logits, hidden)

    @torch.no_grad()
    def greedy_batch(self, hidden: torch.Tensor) -> list[int]:
        """The argmax tokens after hidden states [B, H] (the same tokens as ``argmax(logits(hidden))``).

        float32 weights: the float32 argmax, proved via one half-precision pass (``GreedyHead``,
        which saves memory bandwidth on CPU). Half-precision weights (bf16 on CUDA): the LM head
        runs in the model's dtype, exactly as :meth:`logits` does, so greedy decoding and
        sampling at temperature 0 pick the same tokens.
        """
        if self.dtype != torch.float32:
            return [int(i) for i in torch.argmax(self.logits(hidden), dim=-1).tolist()]
        if self._head is None:
            self._head = GreedyHead(self.lm_head.weight)
        return self._head.argmax_batch(self.norm(hidden))

    @torch.no_grad()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm + LM head (+ softcap) for hidden rows [R, H]; float32 [R, V]."""
        out = self.lm_head(self.norm(hidden)).float()
        if self.final_softcap:
            out = torch.tanh(out / self.final_softcap) * self.final_softcap
        return out
