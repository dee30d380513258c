"""A lean forward pass over a transformers causal LM's weights, with attention left to the caller.

The engine needs to control exactly which keys each query sees and at which positions (drops,
repositions, segment-batched restore), so it runs the decoder layers itself, from the model's
own weights and activation: the Q/K/V and gate/up projections are fused into one matmul each
(weights concatenated once at load), each RMSNorm is one ``rms_norm`` call with transformers'
semantics (float32 compute; Gemma's ``1 + weight`` folded into the weight once), the query and
key heads share one QK-norm and one RoPE call, RoPE uses float64 angles (``engine.rope``), and
attention is a callback. On CPU in float32 the four projections of each layer run through
oneDNN with their weights packed once at load (:class:`Projection`): the same float32 products,
1.1-1.2x faster than ``F.linear`` on prefill-sized inputs and about 1.8x on the one-row inputs of a
decode step, where ``F.linear`` reads the weights at about 13 GB/s (``AKV_PACKED_WEIGHTS=0``
turns it off). ``test_lean_forward_matches_transformers`` holds it to transformers' own forward.
Supported families: Llama-style (Llama, Qwen2, Qwen3, Mistral) and Gemma-3 text.

Not for: training, batching several requests' padding, or quantized weights.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from engine.errors import ModelLoadError
from engine.models.head import GreedyHead
from engine.rope import Rope, apply_rope_rolled, rope_for, signed_sin
from engine.settings import settings

AttendFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor, "np.ndarray | None"], torch.Tensor]
"""(layer, q [Hq, R, D], k [Hkv, T, D], v [Hkv, T, D], rows) -> attention output [Hq, R, D].

``rows`` says which of the call's T tokens the R queries belong to (ascending), or is ``None``
when they are all T in order. Only the last layer is ever asked for fewer rows: past its K/V,
it is computed only for the rows whose hidden states were requested."""


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


@dataclass(frozen=True)
class _Norm:
    """An RMSNorm as one call: ``x * rsqrt(mean(x**2) + eps) * weight`` computed in float32 and
    cast back (transformers' order), with ``weight`` the effective float32 scale (Gemma: 1 + w)."""

    weight: torch.Tensor
    eps: float

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        d = self.weight.shape[-1]
        out = F.rms_norm(x.float(), (d,), None if self.weight.dim() > 1 else self.weight, self.eps)
        if self.weight.dim() > 1:  # per-head scales [H, D] (joint QK-norm over [T, H, D])
            out = out.mul_(self.weight)
        return out.to(x.dtype)


@dataclass(frozen=True)
class Projection:
    """``x @ W.T + b`` for inputs [T, in]: oneDNN over a weight packed once (``packed``), else
    ``F.linear`` over the dense weight."""

    weight: torch.Tensor  # [out, in] dense, or oneDNN's packed layout of it
    bias: torch.Tensor | None
    packed: bool

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed:
            # oneDNN's packed linear is reachable only through torch's private ops
            return torch.ops.mkldnn._linear_pointwise(  # noqa: SLF001
                x.contiguous(), self.weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)

    @classmethod
    def of(cls, weight: torch.Tensor, bias: torch.Tensor | None, pack: bool) -> Projection:
        """The projection by ``weight`` [out, in]: packed when ``pack`` and oneDNN gives the same
        result as ``F.linear`` on a random input (within the rounding of the weight's dtype: 1e-4
        of the largest output in float32, 2e-2 in half precision), else dense."""
        weight = weight.detach()
        bias = bias.detach() if bias is not None else None
        if pack:
            try:
                packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)  # noqa: SLF001 (as in __call__)
                x = torch.randn(3, weight.shape[1], generator=torch.Generator().manual_seed(0)).to(weight.dtype)
                got = torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "").float()  # noqa: SLF001
                want = F.linear(x, weight, bias).float()
                rel = 1e-4 if weight.dtype == torch.float32 else 2e-2
                if bool(((got - want).abs().max() <= rel * want.abs().max().clamp_min(1e-30)).item()):
                    return cls(packed, bias, True)
            except (RuntimeError, AttributeError):  # no oneDNN in this build, or it refused the shape
                pass
        return cls(weight, bias, False)


def _release(*modules: Any) -> None:
    """Replace each module's weight (and bias) by an empty tensor: its memory goes back once the
    engine's own copy exists (``LeanModel(keep_source=False)``)."""
    for module in modules:
        for key in ("weight", "bias"):
            param = getattr(module, key, None)
            if isinstance(param, torch.Tensor):
                setattr(module, key, torch.nn.Parameter(param.new_empty(0), requires_grad=False))


def packs_projections(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether projections are packed for oneDNN: CPU, float32 or bfloat16, oneDNN present, not
    turned off."""
    return (device.type == "cpu" and dtype in (torch.float32, torch.bfloat16)
            and torch.backends.mkldnn.is_available() and settings().packed_weights)


@dataclass(frozen=True)
class _Layer:
    """One decoder layer's weights in the form the forward uses."""

    input_norm: _Norm
    qkv: Projection
    qk_norm: _Norm | None  # joint over the Hq + Hkv heads
    o: Projection
    post_attn_norm: _Norm | None  # Gemma: on the attention output
    mlp_norm: _Norm
    gate_up: Projection
    down: Projection
    post_mlp_norm: _Norm | None  # Gemma: on the MLP output
    act: Callable[[torch.Tensor], torch.Tensor]


class LeanModel:
    """Runs a transformers decoder with caller-supplied attention.

    Args:
        hf_model: a loaded ``*ForCausalLM`` (eval mode; weights are shared, not copied, except
            the fused projections).
        name: display name.
        keep_source: keep ``hf_model`` runnable. When false, each projection weight that was
            packed (or fused) into a copy of its own is released from ``hf_model`` as soon as the
            copy exists, and so is an untied LM head once :meth:`logits` has packed it: the process
            holds one copy of the weights, not two (Qwen2.5-Coder-1.5B in bfloat16: about 3.3 GB
            instead of 5.4 GB). ``hf`` is then ``None``; embeddings and norms stay shared.
    """

    def __init__(self, hf_model: Any, name: str, keep_source: bool = True):
        hf_model.eval()
        self.hf: Any = hf_model
        self.keep_source = keep_source
        self.name = name
        cfg = hf_model.config
        self.config = cfg
        inner = hf_model.model
        self.layers = list(inner.layers)
        self.embed_tokens = inner.embed_tokens
        self.embed: Callable[[torch.Tensor], torch.Tensor] = inner.embed_tokens  # ids [T] -> [T, H]
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
        self._logit_head: Any = None  # a Projection made at the first logits() call (or another form)
        self._fuse()
        if not keep_source:
            self.hf = None  # its projections are gone: only this model runs now

    @torch.no_grad()
    def _fuse(self) -> None:
        offset = 1.0 if self.is_gemma else 0.0  # Gemma3RMSNorm scales by (1 + weight)

        def norm(module: Any, heads: Sequence[int] = ()) -> _Norm:
            eps = getattr(module, "variance_epsilon", None)
            eps = float(eps if eps is not None else module.eps)
            w = module.weight.detach().float() + offset
            if heads:
                w = torch.cat([w.expand(n, -1) for n in heads]).contiguous()
            return _Norm(w, eps)

        pack = self._packs = packs_projections(self.device, self.dtype)
        self._layers: list[_Layer] = []
        for layer in self.layers:
            a, m = layer.self_attn, layer.mlp
            qkv = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).contiguous()
            qkv_bias = torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]) if a.q_proj.bias is not None else None
            qk_norm = None
            if self.qk_norm:
                qn, kn = norm(a.q_norm, [self.n_heads]), norm(a.k_norm, [self.n_kv_heads])
                if qn.eps != kn.eps:
                    raise ModelLoadError("q_norm and k_norm with different eps are not supported",
                                         field="model", value=self.name)
                qk_norm = _Norm(torch.cat([qn.weight, kn.weight]), qn.eps)
            gemma = self.is_gemma
            self._layers.append(_Layer(
                input_norm=norm(layer.input_layernorm), qkv=Projection.of(qkv, qkv_bias, pack),
                qk_norm=qk_norm, o=Projection.of(a.o_proj.weight, a.o_proj.bias, pack),
                post_attn_norm=norm(layer.post_attention_layernorm) if gemma else None,
                mlp_norm=norm(layer.pre_feedforward_layernorm if gemma else layer.post_attention_layernorm),
                gate_up=Projection.of(torch.cat([m.gate_proj.weight, m.up_proj.weight]).contiguous(), None, pack),
                down=Projection.of(m.down_proj.weight, m.down_proj.bias, pack),
                post_mlp_norm=norm(layer.post_feedforward_layernorm) if gemma else None, act=m.act_fn))
            if not self.keep_source:
                _release(a.q_proj, a.k_proj, a.v_proj, m.gate_proj, m.up_proj)  # fused: always copies
                w = self._layers[-1]
                _release(*((a.o_proj,) if w.o.packed else ()), *((m.down_proj,) if w.down.packed else ()))

    def with_projections(self, project: Callable[[Any], Mapping[str, Any]]) -> LeanModel:
        """A shallow copy of this model whose decoder layers run other projections: ``project(layer)``
        gives, for each transformers decoder layer (:attr:`layers`, whose weights it may read), the
        projections to use instead by name (``qkv``, ``o``, ``gate_up``, ``down``), each called as a
        :class:`Projection` is (a quantised form, say). Everything else is shared with this model."""
        out = copy.copy(self)
        out._layers = [  # noqa: SLF001 -- the copy's own layers, set by its class
            dataclasses.replace(lw, **project(hl)) for lw, hl in zip(self._layers, self.layers)]
        return out

    def projections(self, layer: int) -> dict[str, Any]:
        """The projections decoder layer ``layer`` runs now, by name (``qkv``, ``o``, ``gate_up``, ``down``)."""
        lw = self._layers[layer]
        return {"qkv": lw.qkv, "o": lw.o, "gate_up": lw.gate_up, "down": lw.down}

    def logit_head(self) -> Any:
        """The LM head's projection as :meth:`logits` runs it (made, and packed, at the first call)."""
        if self._logit_head is None:
            w = self.lm_head.weight
            pack = w.dtype == torch.bfloat16 and self._packs  # as the projections were at load
            self._logit_head = Projection.of(w, getattr(self.lm_head, "bias", None), pack)
            tied = w.data_ptr() == self.embed_tokens.weight.data_ptr()
            if self._logit_head.packed and not self.keep_source and not tied:
                _release(self.lm_head)
        return self._logit_head

    def with_weights(self, layers: Sequence[Mapping[str, Any]], head: Any = None,
                     embed: Callable[[torch.Tensor], torch.Tensor] | None = None) -> LeanModel:
        """A shallow copy of this model whose layer ``i`` runs ``layers[i]``'s projections by name
        instead (any of ``qkv``, ``o``, ``gate_up``, ``down``; each called as a :class:`Projection`
        is), whose LM head is ``head`` and whose embedding lookup (ids [T] -> [T, H] in this
        model's dtype) is ``embed`` when given. Everything else is shared with this model."""
        if len(layers) != len(self._layers):
            raise ValueError(f"with_weights: {len(layers)} layers given for a model of {len(self._layers)}")
        out = copy.copy(self)
        if embed is not None:
            out.embed = embed
        out._layers = [dataclasses.replace(lw, **p) for lw, p in zip(self._layers, layers)]  # noqa: SLF001 -- the copy's own
        out._logit_head = head if head is not None else self.logit_head()  # noqa: SLF001 -- likewise
        return out

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
            logit_rows: indices into [0, T) whose hidden states (and logits) to return; the last
                layer runs attention and MLP for these rows only (every row's K/V is returned).
            logits: compute the logits of those rows (False: hidden states only, e.g. for
                :meth:`greedy`, which avoids most of the LM head).

        Returns:
            :class:`ForwardOut` with the new tokens' KV and the requested logits.
        """
        ids = torch.as_tensor(np.asarray(input_ids, dtype=np.int64), device=self.device)
        t = ids.shape[0]
        hq, hkv, d = self.n_heads, self.n_kv_heads, self.head_dim
        n_qk = (hq + hkv) * d
        tables = {}
        for kind, r in self.ropes.items():
            cos, sin = (x.to(self.device)[:, None] for x in r.cos_sin(positions, self.dtype))  # [T, 1, D]
            tables[kind] = cos, signed_sin(sin)
        keys = torch.empty(len(self.layers), hkv, t, d, dtype=self.dtype, device=self.device)
        values = torch.empty_like(keys)
        h = self.embed(ids)
        # The last layer's K/V is needed for every token, its output only for the requested rows.
        want = np.unique(np.asarray(logit_rows if logit_rows is not None else [], dtype=np.int64))
        last_rows = None if want.size == t else want
        for li, w in enumerate(self._layers):
            qkv = w.qkv(w.input_norm(h))
            # Queries and keys as one [T, Hq + Hkv, D] block: one QK-norm and one RoPE call for both.
            qk = qkv[:, :n_qk].view(t, hq + hkv, d)
            if w.qk_norm is not None:
                qk = w.qk_norm(qk)
            qk = apply_rope_rolled(qk, *tables[self.layer_types[li]])
            q, k = qk[:, :hq].transpose(0, 1), qk[:, hq:].transpose(0, 1)
            v = qkv[:, n_qk:].view(t, hkv, d).transpose(0, 1)
            keys[li] = k
            values[li] = v
            rows = None
            if li == len(self._layers) - 1 and last_rows is not None:
                if last_rows.size == 0:
                    break  # no hidden state asked for: the K/V above is all this pass must return
                rows = last_rows
                sel = torch.as_tensor(rows, device=self.device)
                q, h = q.index_select(1, sel), h.index_select(0, sel)
            n_rows = q.shape[1]
            o = w.o(attend(li, q, k, v, rows).transpose(0, 1).reshape(n_rows, hq * d))
            h = h + (w.post_attn_norm(o) if w.post_attn_norm is not None else o)
            gate, up = w.gate_up(w.mlp_norm(h)).chunk(2, dim=-1)
            m = w.down(w.act(gate).mul_(up))
            h.add_(w.post_mlp_norm(m) if w.post_mlp_norm is not None else m)
        out_logits = hidden = None
        if want.size:
            assert logit_rows is not None
            at = np.searchsorted(want, np.asarray(logit_rows, dtype=np.int64)) if last_rows is not None else logit_rows
            hidden = h.index_select(0, torch.as_tensor(np.asarray(at, dtype=np.int64), device=self.device))
            out_logits = self.logits(hidden) if logits else None
        return ForwardOut(keys, values, out_logits, hidden)

    @torch.no_grad()
    def greedy_batch(self, hidden: torch.Tensor) -> list[int]:
        """The argmax tokens after hidden states [B, H] (the same tokens as ``argmax(logits(hidden))``).

        float32 weights: the float32 argmax, proved via one half-precision pass (``GreedyHead``,
        which saves memory bandwidth on CPU). Half-precision weights (bfloat16, on CUDA or CPU): the LM head
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
        """Final norm + LM head (+ softcap) for hidden rows [R, H]; float32 [R, V].

        bfloat16 on CPU (where the projections are packed): the head runs through oneDNN over a
        copy of its weight packed at the first call, 2.4x faster than ``F.linear`` on the one row
        of a decode step here, for vocabulary x hidden bfloat16s of memory (335 MB for
        gemma-3-270m); greedy decoding calls this too, so both pick the same tokens. Elsewhere
        ``F.linear`` as loaded.
        """
        out = self.logit_head()(self.norm(hidden)).float()
        if self.final_softcap:
            out = torch.tanh(out / self.final_softcap) * self.final_softcap
        return out
