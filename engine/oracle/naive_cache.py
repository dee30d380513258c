"""The naive prefix cache: a list of full event histories. The radix tree's reference in tests.

It keeps every request's history whole, with one flag per token saying whether its KV is
stored, and answers a request by scanning all of them for the longest shared prefix. No
splitting, no nodes, no eviction (its budget is unlimited), no cleverness: with an unlimited
pool it must report exactly the usage that the radix tree reports for any request stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.cache.plan import TokenUsage, needed_closure
from engine.history import Item, replay


@dataclass
class _Stored:
    items: list[Item]
    has_kv: list[bool]  # per token
    end_hidden: set[int] = field(default_factory=set)  # item counts after which the hidden state is known


def _common(a: Sequence[Item], b: Sequence[Item]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class NaiveCache:
    """Token accounting by brute force over stored histories (unlimited memory)."""

    def __init__(self) -> None:
        self.stored: list[_Stored] = []

    def request_items(self, items: Sequence[Item], output_ids: Sequence[int] = ()) -> TokenUsage:
        items = list(items)
        history = replay(items)
        n = history.n_tokens
        best = max((_common(s.items, items) for s in self.stored), default=0)
        avail = np.zeros(n, dtype=bool)
        for s in self.stored:
            k = _common(s.items, items)
            toks = int(history.item_token[k])
            avail[:toks] |= np.asarray(s.has_kv[:toks], dtype=bool)
        whole = best == len(items) and any(len(items) in s.end_hidden and _common(s.items, items) == len(items)
                                           for s in self.stored)
        compute = needed_closure(history, avail, force_last=not (whole and avail[n - 1]))
        alive = np.zeros(n, dtype=bool)
        alive[history.alive] = True
        prefill = int(compute.sum())
        cached = int((alive & ~compute).sum())
        repos = sum(c for i, c in history.repos_rotated.items() if i >= best)
        usage = TokenUsage(n, prefill, cached, n - prefill - cached, repos, len(output_ids))
        # Remember: this history (tokens computed now or available are stored), shared prefixes gain
        # the restored tokens, and generated tokens whose KV was computed.
        has = (avail | compute).tolist()
        for s in self.stored:
            toks = int(history.item_token[_common(s.items, items)])
            for t in range(toks):
                s.has_kv[t] = s.has_kv[t] or bool(compute[t])
        entry = _Stored(items, has)
        if compute[n - 1]:
            entry.end_hidden.add(len(items))
        for s in self.stored:
            if _common(s.items, items) == len(items) and len(items) <= len(s.items):
                if compute[n - 1]:
                    s.end_hidden.add(len(items))
                if whole:
                    entry.end_hidden.add(len(items))
        fed = list(output_ids[:-1])
        if fed:
            entry.items = [*items, *fed]
            entry.has_kv = has + [True] * len(fed)
        self.stored.append(entry)
        return usage
