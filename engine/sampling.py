"""How a chat reply picks its tokens: :class:`SamplingParams`, the option type every engine shares.

A small module of its own so that the interface, the remote engine and the server name the type
without importing the decoder (nano-vllm: ``sampling_params.py``). Not for the sampling itself
(``engine.decode.Sampler``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import AKVError


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens. ``temperature == 0`` is greedy; ``seed`` makes sampling repeatable.

    ``stop`` holds every stop string of the request: the caller's, then the chat template's where
    the engine added them (:meth:`of`). The other fields are :class:`engine.interface.ChatOptions`'s.

    Raises:
        AKVError: a value out of range, naming its field (checked here, once, when the request is made).
    """

    max_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    min_tokens: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens <= 0:
            raise AKVError(f"max_tokens must be a positive integer, got {self.max_tokens!r}",
                           field="max_tokens", value=self.max_tokens)
        if not (0.0 <= float(self.temperature) <= 100.0):
            raise AKVError(f"temperature must be in [0, 100], got {self.temperature!r}",
                           field="temperature", value=self.temperature)
        if not (0.0 < float(self.top_p) <= 1.0):
            raise AKVError(f"top_p must be in (0, 1], got {self.top_p!r}", field="top_p", value=self.top_p)
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not -(2**63) <= self.seed < 2**63):
            raise AKVError(f"seed must be an integer that fits 64 signed bits, got {self.seed!r}",
                           field="seed", value=self.seed)
        if isinstance(self.min_tokens, bool) or not isinstance(self.min_tokens, int) \
                or not 0 <= self.min_tokens <= self.max_tokens:
            raise AKVError(f"min_tokens must be an integer from 0 to max_tokens ({self.max_tokens}), "
                           f"got {self.min_tokens!r}", field="min_tokens", value=self.min_tokens)
        if not isinstance(self.ignore_eos, bool):
            raise AKVError(f"ignore_eos must be true or false, got {self.ignore_eos!r}",
                           field="ignore_eos", value=self.ignore_eos)

    @classmethod
    def of(cls, options: Mapping[str, Any], stop: Sequence[str] = ()) -> SamplingParams:
        """The sampling part of chat options (``engine.interface.ChatOptions``): missing keys take
        the defaults above; ``stop`` (a template's own stop strings) is appended to the caller's.

        Raises:
            TypeError: a key that is not a chat option.
            AKVError: a value out of range.
        """
        from engine.interface import check_chat_options

        check_chat_options(options)
        names = ("max_tokens", "temperature", "top_p", "seed", "ignore_eos", "min_tokens")
        picked = {k: options[k] for k in names if k in options}
        return cls(**picked, stop=tuple(options.get("stop") or ()) + tuple(stop))
