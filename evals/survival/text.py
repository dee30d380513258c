"""Synthetic message text of exact token counts, and the bag-of-words intent stand-in.

Traces store token counts and a seed, not text. A message of n tokens is n words drawn from a
vocabulary of words that are each exactly one token of the engine's tokenizer (with their leading
space), so the replay's prompts have the lengths the trace states. Words are drawn as indices
into an abstract vocabulary of ``VOCAB`` entries: a session's *topic* words with probability
``focus``, background words otherwise; the generator and the replay draw the same indices.

Relevance (the IntentKV stand-in, labelled as such in docs/survival.md) is the cosine similarity
of the word-count vectors of a message and the session's task statement. It is a bag-of-words
similarity, not a learned embedding.
"""

from __future__ import annotations

import functools
import math
import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

from evals.survival.trace import WorkloadError

VOCAB = 2048
TOPIC_WORDS = 24


@functools.lru_cache(maxsize=4096)
def _topic(seed: int) -> tuple[int, ...]:
    return tuple(random.Random(seed * 7919 + 1).sample(range(VOCAB), TOPIC_WORDS))


def topic(seed: int) -> list[int]:
    """The topic word indices of the session with ``seed``."""
    return list(_topic(seed))


def word_ids(seed: int, turn: int, role: str, n: int, focus: float) -> list[int]:
    """``n`` word indices for a message: topic words with probability ``focus``, else background."""
    rng = random.Random(f"{seed}/{turn}/{role}")
    top, rand, pick = _topic(seed), rng.random, rng.randrange
    return [top[pick(TOPIC_WORDS)] if rand() < focus else pick(VOCAB) for _ in range(n)]


def cosine(a: Sequence[int], b: Sequence[int]) -> float:
    """Cosine similarity of two bags of word indices (0.0 when either is empty)."""
    ca, cb = Counter(a), Counter(b)
    dot = sum(v * cb.get(k, 0) for k, v in ca.items())
    na = math.sqrt(sum(v * v for v in ca.values()))
    nb = math.sqrt(sum(v * v for v in cb.values()))
    return dot / (na * nb) if na and nb else 0.0


@functools.lru_cache(maxsize=8)
def _vocabulary(tokenizer: Any) -> tuple[str, ...]:
    vocab = tokenizer.get_vocab()
    words = []
    for piece, idx in sorted(vocab.items(), key=lambda kv: kv[1]):
        word = piece[1:]
        if piece[:1] in ("\u2581", "\u0120") and word.isascii() and word.isalpha() and word.islower() \
                and 3 <= len(word) <= 10 and tokenizer.encode(" " + word, add_special_tokens=False) == [idx]:
            words.append(word)
            if len(words) == VOCAB:
                break
    if len(words) < VOCAB:
        raise WorkloadError(f"the tokenizer has only {len(words)} single-token words; {VOCAB} are needed",
                            field="tokenizer", value=len(words))
    return tuple(words)


def vocabulary(tokenizer: Any) -> tuple[str, ...]:
    """``VOCAB`` lowercase words that are each one token (with a leading space) for ``tokenizer``."""
    return _vocabulary(tokenizer)


def render(ids: Sequence[int], vocab: Sequence[str]) -> str:
    """Text of the word indices: every word with its leading space, so n words are n tokens."""
    return "".join(" " + vocab[i] for i in ids)
