"""KV payloads held by radix-tree nodes: real tensors, or sizes only (dry run).

A payload holds the KV of a node's token items, in order. The tree never looks inside; it asks
for sizes, splits and tier moves. Both implementations satisfy the same contract, so the tree's
decisions (and therefore the token accounting) are identical with and without tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


class Payload(Protocol):
    """KV of ``n_tokens`` consecutive tokens of one node.

    ``split(at)`` returns payloads of tokens [0, at) and [at, n); the original must not be used
    afterwards. ``to_host``/``to_device`` move between tiers and return the moved payload.
    """

    @property
    def n_tokens(self) -> int: ...

    @property
    def nbytes(self) -> int: ...

    def split(self, at: int) -> tuple[Payload, Payload]: ...

    def to_host(self) -> Payload: ...

    def to_device(self) -> Payload: ...


@dataclass(frozen=True)
class SizedKV:
    """Dry-run payload: only the size."""

    n: int
    bytes_per_token: int

    @property
    def n_tokens(self) -> int:
        return self.n

    @property
    def nbytes(self) -> int:
        return self.n * self.bytes_per_token

    def split(self, at: int) -> tuple[SizedKV, SizedKV]:
        assert 0 < at < self.n
        return SizedKV(at, self.bytes_per_token), SizedKV(self.n - at, self.bytes_per_token)

    def to_host(self) -> SizedKV:
        return self

    def to_device(self) -> SizedKV:
        return self


@dataclass(frozen=True)
class TensorKV:
    """Keys and values [L, Hkv, n, D]; keys carry RoPE at the position each token was computed at."""

    keys: torch.Tensor
    values: torch.Tensor
    home: str = "cpu"  # the device the pool lives on; ``to_device`` moves back there

    def __post_init__(self) -> None:
        assert self.keys.shape == self.values.shape and self.keys.dim() == 4

    @property
    def n_tokens(self) -> int:
        return int(self.keys.shape[2])

    @property
    def nbytes(self) -> int:
        return 2 * self.keys.numel() * self.keys.element_size()

    def split(self, at: int) -> tuple[TensorKV, TensorKV]:
        assert 0 < at < self.n_tokens
        # Clone so that freeing one half really frees its memory.
        return (TensorKV(self.keys[:, :, :at].clone(), self.values[:, :, :at].clone(), self.home),
                TensorKV(self.keys[:, :, at:].clone(), self.values[:, :, at:].clone(), self.home))

    def to_host(self) -> TensorKV:
        if self.keys.device.type == "cpu":
            return self  # on a CPU machine the host tier is the same memory under another budget
        return TensorKV(self.keys.to("cpu"), self.values.to("cpu"), self.home)

    def to_device(self) -> TensorKV:
        if self.keys.device == torch.device(self.home):
            return self
        return TensorKV(self.keys.to(self.home), self.values.to(self.home), self.home)
