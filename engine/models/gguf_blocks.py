"""The bits of GGUF's Q4_K and Q6_K super-blocks, unpacked into codes and per-group scales.

``gguf.quants.dequantize`` turns a block into float32 weights; the int4 and int8 kernels want the
parts instead (the 4-bit codes with each group's own scale and minimum), so this module reads the
same bytes and returns them apart. ``dequantize`` here multiplies the parts back together and
equals the ``gguf`` package's own bit for bit (``tests/engine/test_gguf_weights.py``).

Layouts (QK_K = 256 weights per super-block, one super-block per 256 consecutive inputs of a row)::

    Q4_K, 144 bytes:  d fp16 | dmin fp16 | 12 bytes: 8 six-bit scales sc, 8 six-bit mins m | 128 bytes codes
        eight sub-blocks of 32 weights: w = d*sc[j] * q - dmin*m[j], q in 0..15; byte b of the codes
        holds sub-block 2*(b // 32) in its low nibble and sub-block 2*(b // 32) + 1 in its high one.
    Q6_K, 210 bytes:  ql 128 bytes (low 4 bits) | qh 64 bytes (high 2 bits) | 16 int8 scales | d fp16
        sixteen sub-blocks of 16 weights: w = d*scale[j] * (q - 32), q in 0..63.

Not for: quantizing (the ``gguf`` package cannot write these types; tests pack blocks by hand) or
any other GGUF type.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

QK_K = 256
Q4_K_BYTES = 144
Q6_K_BYTES = 210


class Q4KParts(NamedTuple):
    """Q4_K super-blocks as parts: ``w = scale * codes - minimum`` per group of 32.

    Attributes:
        codes: [n, 256] uint8 in 0..15, in weight order.
        scale: [n, 8] float32, ``d * sc`` (exact: an fp16 times a 6-bit integer).
        minimum: [n, 8] float32, ``dmin * m`` (exact likewise).
    """

    codes: np.ndarray
    scale: np.ndarray
    minimum: np.ndarray


class Q6KParts(NamedTuple):
    """Q6_K super-blocks as parts: ``w = scale * codes`` per group of 16.

    Attributes:
        codes: [n, 256] int8 in -32..31, in weight order.
        scale: [n, 16] float32, ``d * scale`` (exact: an fp16 times an 8-bit integer).
    """

    codes: np.ndarray
    scale: np.ndarray


def _blocks(data: np.ndarray, size: int, kind: str) -> np.ndarray:
    raw = np.ascontiguousarray(data).view(np.uint8)
    if raw.size % size:
        raise ValueError(f"{kind}: {raw.size} bytes is not a whole number of {size}-byte super-blocks")
    return raw.reshape(-1, size)


def q4_k_scales(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit scales and mins of [n, 12] packed bytes, each [n, 8] uint8::

        bytes 0-3:  scale j (low 6 bits), bits 4-5 of scale j+4 in the top two
        bytes 4-7:  min j (low 6 bits),   bits 4-5 of min j+4 in the top two
        bytes 8-11: low 4 bits of scale j+4 | low 4 bits of min j+4 << 4
    """
    a, b, c = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    sc = np.concatenate([a & 0x3F, (c & 0x0F) | ((a >> 2) & 0x30)], axis=1)
    mn = np.concatenate([b & 0x3F, (c >> 4) | ((b >> 2) & 0x30)], axis=1)
    return sc, mn


def unpack_q4_k(data: np.ndarray) -> Q4KParts:
    """The parts of Q4_K super-blocks (``data``: their bytes, any shape, a multiple of 144)."""
    blocks = _blocks(data, Q4_K_BYTES, "Q4_K")
    n = blocks.shape[0]
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    sc, mn = q4_k_scales(blocks[:, 4:16])
    qs = blocks[:, 16:].reshape(n, 4, 1, 32)
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=2).reshape(n, QK_K)
    return Q4KParts(codes, d * sc.astype(np.float32), dmin * mn.astype(np.float32))


def unpack_q6_k(data: np.ndarray) -> Q6KParts:
    """The parts of Q6_K super-blocks (``data``: their bytes, any shape, a multiple of 210)."""
    blocks = _blocks(data, Q6_K_BYTES, "Q6_K")
    n = blocks.shape[0]
    ql = blocks[:, :128].reshape(n, 2, 1, 64)  # two halves of 128 weights
    qh = blocks[:, 128:192].reshape(n, 2, 1, 32)
    scales = blocks[:, 192:208].copy().view(np.int8).astype(np.float32)
    d = blocks[:, 208:210].copy().view(np.float16).astype(np.float32)
    low = np.concatenate([ql & 0x0F, ql >> 4], axis=2).reshape(n, 2, 4, 32)
    high = ((qh >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)) & 0x03)
    codes = (low | (high << 4)).astype(np.int8) - np.int8(32)
    return Q6KParts(codes.reshape(n, QK_K), d * scales)


def dequantize_q4_k(parts: Q4KParts) -> np.ndarray:
    """[n, 256] float32 weights of unpacked Q4_K blocks (``gguf.quants.dequantize``'s order of operations)."""
    n = parts.codes.shape[0]
    q = parts.codes.reshape(n, 8, 32).astype(np.float32)
    return (parts.scale[:, :, None] * q - parts.minimum[:, :, None]).reshape(n, QK_K)


def dequantize_q6_k(parts: Q6KParts) -> np.ndarray:
    """[n, 256] float32 weights of unpacked Q6_K blocks."""
    n = parts.codes.shape[0]
    q = parts.codes.reshape(n, 16, 16).astype(np.float32)
    return (parts.scale[:, :, None] * q).reshape(n, QK_K)
