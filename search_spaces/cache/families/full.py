"""``full``: no cache operations at all; the reference point every other policy is compared with.

Its decision is always ``{"drop_message": {}, "reposition": []}``: the whole history stays in the
KV and positions are never compacted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from search_spaces.cache.policy import Policy
from search_spaces.cache.request import Request
from search_spaces.params import resolve

NAME = "full"


@dataclass(frozen=True)
class FullParams:
    """``full`` takes no parameters (``resolve`` refuses any name)."""


class Full(Policy):
    """Keeps everything (it takes no parameters)."""

    name = NAME

    def __init__(self, **params: Any) -> None:
        super().__init__()
        resolve(FullParams, params, NAME)

    @property
    def params(self) -> dict[str, Any]:
        return {}

    def propose(self, request: Request) -> dict[str, Any]:
        return {"drop_message": {}, "reposition": []}


def space(trial: Any) -> dict[str, Any]:
    """``full`` has nothing to tune."""
    return {}
