"""A lower bound on how many tokens a text encodes to, read from its length, without tokenizing it.

Tokenizing a 3 MB prompt takes seconds of CPU; counting its bytes takes milliseconds. When every
token of a tokenizer covers a bounded piece of its input, the text's size gives an exact lower
bound on its token count, and a prompt whose bound is beyond the context window can be refused
before tokenizing (``Engine.prepare``).

The bound is only built for tokenizers whose pipeline provably partitions the input into tokens
taken from the vocabulary or the added tokens, without removing any input: a BPE model with byte
fallback (all 256 byte tokens present, so no ``<unk>`` ever fuses a run of unknown characters);
a normalizer that at most replaces ``" "`` with ``"▁"`` or prepends ``"▁"``; a pre-tokenizer that
only splits (keeping the delimiter) or is ``Metaspace``; added tokens that strip no whitespace
around them. Anything else (lower-casing, NFKC, stripping, ``lstrip`` tokens, a byte-level
alphabet, a tokenizer without ``backend_tokenizer``) gets no bound, and prompts are tokenized.

A text is measured in two units: ``spaces`` (each ``" "`` or ``"▁"``) and ``other`` (UTF-8 bytes
of every other character). A token ``t`` covers input whose measure is at most ``(a(t), b(t))``
(the ``"▁"``s of its vocabulary string and the bytes of the rest; a byte-fallback token covers one
byte). For weights ``(x, y) >= 0`` with ``x*a(t) + y*b(t) <= 1`` for every token, each token adds
at most 1 to ``x*spaces + y*other``, so a text needs at least ``ceil(x*spaces + y*other)`` tokens.
The best weights for a text lie at a vertex of that feasible polygon; :class:`TokenBound` keeps
the vertices (exact fractions) and takes the largest bound over them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

META = "\u2581"
"""SentencePiece's word-boundary mark, which the normalizer writes for a space."""


@dataclass(frozen=True)
class TokenBound:
    """``at_least(text)``: a lower bound on the tokens ``text`` encodes to (see the module docstring).

    Attributes:
        vertices: weights ``(x, y)`` of a space unit and of another byte, each feasible for every token.
    """

    vertices: tuple[tuple[Fraction, Fraction], ...]
    _ints: tuple[tuple[int, int, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:  # (p, q, d) with x = p/d, y = q/d: integer arithmetic per text
        object.__setattr__(self, "_ints", tuple((int(x * d), int(y * d), d) for x, y in self.vertices
                                                for d in [x.denominator * y.denominator]))

    def at_least(self, text: str) -> int:
        """Fewest tokens ``text`` can encode to (``add_special_tokens=False``); 0 for ``""``."""
        if not text:
            return 0
        spaces, metas = text.count(" "), text.count(META)
        size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        other = size - spaces - 3 * metas
        units = spaces + metas
        return max(-(-(p * units + q * other) // d) for p, q, d in self._ints)


def measure(piece: str) -> tuple[int, int]:
    """``(space units, other bytes)`` of ``piece``."""
    spaces, metas = piece.count(" "), piece.count(META)
    return spaces + metas, len(piece.encode("utf-8", "surrogatepass")) - spaces - 3 * metas


_BOUNDS: dict[int, tuple[Any, TokenBound | None]] = {}
_BOUNDS_LOCK = threading.Lock()


def token_bound(tokenizer: Any) -> TokenBound | None:
    """The bound of a Hugging Face fast tokenizer, or ``None`` where none is proven (module docstring).

    Built once per backend tokenizer and process (about a second for a 262k vocabulary): a server
    builds it at start-up (``create_app``), not on its first request.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "to_str"):
        return None
    with _BOUNDS_LOCK:
        hit = _BOUNDS.get(id(backend))
        if hit is not None and hit[0] is backend:
            return hit[1]
        try:
            bound = bound_from_spec(json.loads(backend.to_str()))
        except (TypeError, ValueError, KeyError, AttributeError):
            bound = None
        _BOUNDS[id(backend)] = (backend, bound)  # holding the backend keeps its id from being reused
        return bound


def bound_from_spec(spec: dict[str, Any]) -> TokenBound | None:
    """The bound of a tokenizer given as its ``tokenizer.json`` object, or ``None``."""
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or not model.get("byte_fallback"):
        return None
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or any(f"<0x{i:02X}>" not in vocab for i in range(256)):
        return None
    if not _keeps_input(spec.get("normalizer"), _normalizer_ok) or not _keeps_input(spec.get("pre_tokenizer"),
                                                                                     _pre_tokenizer_ok):
        return None
    added = spec.get("added_tokens") or []
    if any(t.get("lstrip") or t.get("rstrip") for t in added):
        return None
    pieces: Iterable[str] = [*vocab, *(t["content"] for t in added)]
    points = {measure(p) for p in pieces if p} | {(0, 1)}  # a byte-fallback token covers one byte
    return TokenBound(_vertices(points))


def _normalizer_ok(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    if kind == "Replace":
        return node.get("pattern") == {"String": " "} and node.get("content") == META
    return kind == "Prepend" and node.get("prepend") == META


def _pre_tokenizer_ok(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    if kind == "Split":  # "Removed" drops the delimiter: tokens would not cover the input
        return "String" in (node.get("pattern") or {}) and node.get("behavior") in (
            "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous") and not node.get("invert")
    return kind == "Metaspace" and node.get("replacement") == META



def _keeps_input(node: Any, ok: Callable[[dict[str, Any]], bool]) -> bool:
    if node is None:
        return True
    if not isinstance(node, dict):
        return False
    if node.get("type") == "Sequence":
        children = node.get("normalizers", node.get("pretokenizers"))
        return isinstance(children, list) and all(_keeps_input(c, ok) for c in children)
    return bool(ok(node))


def _vertices(points: set[tuple[int, int]]) -> tuple[tuple[Fraction, Fraction], ...]:
    """Vertices of ``{(x, y) >= 0 : a*x + b*y <= 1 for every (a, b) in points}`` (points not all 0)."""
    # Only Pareto-maximal points constrain: a dominated point's constraint follows from its dominator's.
    best = sorted(points, key=lambda p: (-p[0], -p[1]))
    front: list[tuple[int, int]] = []
    for a, b in best:
        if not front or b > front[-1][1]:
            front.append((a, b))
    lines = [(Fraction(a), Fraction(b)) for a, b in front]
    candidates: set[tuple[Fraction, Fraction]] = set()
    for i, (a1, b1) in enumerate(lines):
        if a1:
            candidates.add((1 / a1, Fraction(0)))
        if b1:
            candidates.add((Fraction(0), 1 / b1))
        for a2, b2 in lines[i + 1:]:
            det = a1 * b2 - a2 * b1
            if det:
                x, y = (b2 - b1) / det, (a1 - a2) / det
                if x >= 0 and y >= 0:
                    candidates.add((x, y))
    feasible = [(x, y) for x, y in candidates if all(a * x + b * y <= 1 for a, b in lines)]
    # keep only the undominated vertices (a dominated one never gives the larger bound)
    return tuple(sorted(v for v in feasible if not any(w != v and w[0] >= v[0] and w[1] >= v[1] for w in feasible)))
