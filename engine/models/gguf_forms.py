"""Weight forms with :class:`engine.models.lean.Projection`'s contract (``form(x)`` for inputs
[T, in] in the activation dtype gives [T, out]) built from GGUF blocks: torch's int4 and int8 CPU
kernels, an embedding kept as its blocks, several forms side by side, and the choice between a
decode form and a prefill form by the number of rows.

Not for: reading GGUF files or choosing forms (``engine.models.gguf_weights``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from engine.models.gguf_blocks import dequantize_q4_k, dequantize_q6_k, unpack_q4_k, unpack_q6_k


@dataclass(frozen=True)
class Int4Groups:
    """``x @ W.T`` with W as 4-bit codes in groups of 32 inputs, each with a scale and a zero.

    Attributes:
        packed: [N, K/2] uint8, the codes in the kernel's layout (``_convert_weight_to_int4pack_for_cpu``).
        scales_zeros: [K/32, N, 2] in the activation dtype: ``w = (q - 8) * scale + zero``.
    """

    packed: torch.Tensor
    scales_zeros: torch.Tensor

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(  # noqa: SLF001 -- torch has no public int4 matmul
            x.contiguous(), self.packed, 32, self.scales_zeros)

    @classmethod
    def from_q4_k(cls, data: np.ndarray, rows: int, cols: int, dtype: torch.dtype) -> Int4Groups:
        """The Q4_K tensor of ``rows`` x ``cols`` weights whose super-blocks are ``data``'s bytes."""
        parts = unpack_q4_k(data)
        codes = torch.from_numpy(parts.codes.reshape(rows, cols).astype(np.int32))
        scale = torch.from_numpy(parts.scale.reshape(rows, cols // 32))
        zero = 8 * scale - torch.from_numpy(parts.minimum.reshape(rows, cols // 32))  # exact in float32
        scales_zeros = torch.stack([scale, zero], dim=-1).transpose(0, 1).contiguous().to(dtype)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)  # noqa: SLF001 -- as in __call__
        return cls(packed, scales_zeros)


@dataclass(frozen=True)
class Int8Rows:
    """``x @ W.T`` with W as int8 codes times one scale per output row (``_weight_int8pack_mm``)."""

    weight: torch.Tensor  # [N, K] int8
    scales: torch.Tensor  # [N], the activation dtype

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(x.contiguous(), self.weight, self.scales)  # noqa: SLF001 -- no public one

    @classmethod
    def from_dense(cls, weight: torch.Tensor, dtype: torch.dtype) -> Int8Rows:
        """Round float32 ``weight`` [N, K] to int8 per row (scale: the row's largest |w| / 127), 4,096
        rows at a time (a vocabulary-sized head would otherwise take three float32 copies at once)."""
        scale = (weight.abs().amax(dim=1) / 127).clamp_min(1e-30)
        codes = torch.empty(weight.shape, dtype=torch.int8)
        for a in range(0, weight.shape[0], 4096):
            codes[a:a + 4096] = torch.round(weight[a:a + 4096] / scale[a:a + 4096, None]).clamp_(-127, 127)
        return cls(codes, scale.to(dtype))


@dataclass(frozen=True)
class BlockRows:
    """An embedding table kept as its Q4_K or Q6_K super-blocks, one row of blocks per token: a
    lookup dequantizes only the rows it asks for, then rounds them to ``dtype`` (the same bits as
    the dense table converted from the same GGUF)."""

    blocks: torch.Tensor  # [V, bytes per row] uint8
    kind: str  # "q4_k" or "q6_k"
    dtype: torch.dtype

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        raw = self.blocks.index_select(0, ids.cpu()).numpy()
        if self.kind == "q4_k":
            w = dequantize_q4_k(unpack_q4_k(raw))
        else:
            w = dequantize_q6_k(unpack_q6_k(raw))
        return torch.from_numpy(w.reshape(ids.shape[0], -1)).to(self.dtype)


@dataclass(frozen=True)
class Stacked:
    """Several projections of one input, their outputs side by side, plus a bias (a fused QKV
    whose parts are stored in different types)."""

    parts: tuple[Any, ...]
    bias: torch.Tensor | None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = self.parts[0](x) if len(self.parts) == 1 else torch.cat([p(x) for p in self.parts], dim=-1)
        return out if self.bias is None else out.add_(self.bias)


@dataclass(frozen=True)
class ByRows:
    """``decode`` for inputs of at most ``max_rows`` rows, ``prefill`` beyond."""

    decode: Any
    prefill: Any
    max_rows: int

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(x) if x.shape[0] <= self.max_rows else self.prefill(x)
