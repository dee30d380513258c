"""What the search process remembers between calls of a program, so that a screen's thousands of
calls do not repeat work whose result is already known: the content keys of trajectories and
episodes, and the checked decisions of an episode by the exact text the sandbox sent for them.

Every key is a digest of content (blake2b, 128 bits), never an object identity: two equal
episodes share a key, and a changed one never does. Identities only speed up finding a key (an
episode's messages are made once per task and shown to every trial), and the objects they name
are kept alive for as long as they are remembered, so an identity is never reused by another
object while it is here.

Not for: remembering a program's decisions for its parameters (the program runs for every call:
the screen remembers its results one level up, :mod:`evals.cache.fidelity`). Nothing here runs
or trusts a program: a remembered decision is one that passed :func:`~search_spaces.cache.program._validated`
for the same episode and the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

from search_spaces.cache.request import Episode

V = TypeVar("V")


class LRU(Generic[V]):
    """At most ``size`` values by key, the least recently used dropped first (``size`` 0: none
    kept). Safe to share between threads."""

    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError(f"an LRU size must be at least 0, got {size}")
        self.size = size
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: Hashable, value: V) -> None:
        with self._lock:
            if self.size == 0:
                return
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


# (id(messages), id(token_counts)) -> (messages, token_counts, key): the objects kept alive with their key
_TRAJECTORIES: LRU[tuple[Any, Any, str]] = LRU(1024)


def trajectory_key(episode: Episode) -> str:
    """A digest of ``episode``'s messages and token counts: what a sandbox process builds its
    :class:`~search_spaces.cache.program_api.Trajectory` from (cuts and relevance aside)."""
    ident = (id(episode.messages), id(episode.token_counts))
    hit = _TRAJECTORIES.get(ident)
    if hit is not None and hit[0] is episode.messages and hit[1] is episode.token_counts:
        return hit[2]
    text = json.dumps([[dict(m) for m in episode.messages], list(episode.token_counts)])
    key = _digest(text.encode())
    _TRAJECTORIES.put(ident, (episode.messages, episode.token_counts, key))
    return key


def episode_key(episode: Episode) -> str:
    """A digest of everything ``episode`` holds: its trajectory, cuts and relevance."""
    return _digest(f"{trajectory_key(episode)} {episode.cuts!r} {episode.relevance!r}".encode())


def text_key(episode: str, text: bytes) -> tuple[str, str]:
    """The key of the decisions the sandbox sent as ``text`` for the episode of key ``episode``."""
    return episode, _digest(text)
