"""The entities of one task: records, which values are reserved for answers, which facts are secret.

A :class:`World` hands out entity values from the pools of one split. Distractor records draw
their field values round-robin from a small task-level list per pool (so the same kind of fact
shows up many times with other entities); a probe's answer is *reserved*: drawn from outside that
list, so no other record carries it. A *secret* fact ``(key, field)`` may only be rendered in the
rounds a family designates, which is how a family controls exactly which messages hold evidence.

Not thread-safe; one world per task, driven by the task's ``random.Random``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from evals.tasks import pools
from evals.tasks.domains import REASON_POOL, STATUS_POOL, Domain

WIDTH = 7  # distinct distractor values per word pool in one task


@dataclass(frozen=True)
class Record:
    """One record: its type, key and field values (all strings, as written in text)."""

    type: str
    key: str
    values: tuple[tuple[str, str], ...]

    def get(self, field: str) -> str:
        return dict(self.values)[field]

    def with_value(self, field: str, value: str) -> Record:
        return replace(self, values=tuple((f, value if f == field else v) for f, v in self.values))


class World:
    """Entity bookkeeping for one task (see the module docstring).

    Args:
        domain: the task's domain.
        split: ``"train"`` or ``"heldout"``; every value comes from that split's pools.
        rng: the task's random generator (the only source of randomness).
        length_ratio: when set, the values of a word pool one task uses (distractors and reserved
            answers) are of similar length: each within ``sqrt(length_ratio)`` of a length drawn
            per pool, so any two differ by at most ``length_ratio`` (candidates of similar length
            for log-likelihood scoring; the ``horizon`` suites). ``None`` (the default) draws as
            before.
    """

    def __init__(self, domain: Domain, split: str, rng: random.Random, length_ratio: float | None = None) -> None:
        self.domain, self.split, self.rng = domain, split, rng
        self.length_ratio = length_ratio
        self._pivot: dict[str, int] = {}
        self.used: dict[str, str] = {}  # value -> pool, in hand-out order (recorded as the task's entities)
        self.choices: dict[str, list[str]] = {}
        self._order: dict[str, list[str]] = {}
        self.records: dict[str, dict[str, Record]] = {t: {} for t in domain.types}
        self.secret: set[tuple[str, str]] = set()
        self._key_pools = {t.key_pool for t in domain.types.values()}
        for t in domain.types.values():  # word-keyed types: one record per task-level value
            if t.key_pool in pools.WORD_POOLS:
                for key in self._choices(t.key_pool):
                    self.records[t.name][key] = self._fill(t.name, key)

    # ------------------------------------------------------------------ values

    def _vocab(self, pool: str) -> tuple[str, ...]:
        if pool == STATUS_POOL:
            return self.domain.statuses[self.split]
        if pool == REASON_POOL:
            return self.domain.reasons[self.split]
        return pools.word_pool(pool, self.split)

    def _choices(self, pool: str) -> list[str]:
        if pool not in self.choices:
            vocab = self._vocab(pool)
            if pool in (STATUS_POOL, REASON_POOL):
                picked = list(vocab)
                self.rng.shuffle(picked)
            else:
                picked = self.rng.sample(self._similar(pool, vocab), WIDTH)
            self.choices[pool] = picked
        return self.choices[pool]

    def _similar(self, pool: str, vocab: tuple[str, ...]) -> tuple[str, ...]:
        """``vocab``, or with ``length_ratio`` its values near a length drawn once per pool."""
        if self.length_ratio is None:
            return vocab
        if pool not in self._pivot:
            self._pivot[pool] = len(self.rng.choice(vocab))
        half, pivot = self.length_ratio ** 0.5, self._pivot[pool]
        near = tuple(v for v in vocab if pivot / half <= len(v) <= pivot * half)
        return near if len(near) >= 2 * WIDTH else vocab

    def _take(self, value: str, pool: str) -> str:
        self.used.setdefault(value, pool)
        return value

    def _number(self, pool: str) -> str:
        num = pools.number_pool(pool, self.split)
        keys = pool in self._key_pools
        tries = 0
        while True:
            value = num.value(self.rng.randrange(num.low, num.high + 1, num.step))
            tries += 1
            if value not in self.used and not (keys and tries <= 100 and self._near(value, pool)):
                return self._take(value, pool)

    def _near(self, value: str, pool: str) -> bool:
        """Whether ``value`` differs in one character from an id of ``pool`` handed out already.

        Record ids one digit apart (INC-83170, INC-85170) are what a small model confuses.
        """
        return any(p == pool and len(v) == len(value) and sum(a != b for a, b in zip(v, value)) <= 1
                   for v, p in self.used.items())

    def value(self, pool: str) -> str:
        """A distractor value of ``pool``, or a fresh number.

        Word values cycle through the task-level list in an order reshuffled every cycle: every value
        shows up early, and two fields of a record are not correlated.
        """
        if pool in pools.NUMBER_POOLS:
            return self._number(pool)
        picked = self._choices(pool)
        order = self._order.get(pool, [])
        if not order:
            order = list(picked)
            self.rng.shuffle(order)
        value = order.pop()
        self._order[pool] = order
        return self._take(value, pool)

    def reserve(self, pool: str) -> str:
        """A value of ``pool`` that no distractor will ever carry (a probe's answer)."""
        if pool in pools.NUMBER_POOLS:
            return self._number(pool)
        picked = self._choices(pool)
        if pool == REASON_POOL:  # a closed vocabulary: take one out of circulation
            value = picked.pop(self.rng.randrange(len(picked)))
            self._order[pool] = [v for v in self._order.get(pool, []) if v != value]
            return self._take(value, pool)
        free = [v for v in self._similar(pool, self._vocab(pool)) if v not in self.used and v not in picked]
        return self._take(self.rng.choice(free), pool)

    def person(self) -> str:
        """A distractor person (for board cards, email senders)."""
        return self.value("person")

    # ------------------------------------------------------------------ records

    def _fill(self, type_name: str, key: str, **fixed: str) -> Record:
        rtype = self.domain.types[type_name]
        self._take(key, rtype.key_pool)
        values = tuple((f.name, self._take(fixed[f.name], f.pool) if f.name in fixed else self.value(f.pool))
                       for f in rtype.fields)
        return Record(type_name, key, values)

    def new(self, type_name: str, **fixed: str) -> Record:
        """A record of ``type_name``: a fresh one for id-keyed types, an existing one for word-keyed types."""
        rtype = self.domain.types[type_name]
        if rtype.key_pool in pools.WORD_POOLS:
            return self.rng.choice(list(self.records[type_name].values()))
        rec = self._fill(type_name, self._number(rtype.key_pool), **fixed)
        self.records[type_name][rec.key] = rec
        return rec

    def pick(self, type_name: str, reuse: float = 0.3) -> Record:
        """A distractor record: an existing one with probability ``reuse`` (when any), else :meth:`new`."""
        existing = list(self.records[type_name].values())
        if existing and self.rng.random() < reuse:
            return self.rng.choice(existing)
        return self.new(type_name)

    def update(self, record: Record) -> Record:
        self.records[record.type][record.key] = record
        return record

    def target(self, type_name: str, field: str, value: str | None = None) -> Record:
        """A record whose ``field`` holds a reserved value (or ``value``), made secret."""
        pool = self.domain.types[type_name].field(field).pool
        value = value if value is not None else self.reserve(pool)
        rtype = self.domain.types[type_name]
        if rtype.key_pool in pools.WORD_POOLS:
            taken = {k for k, _ in self.secret}
            rec = self.rng.choice([r for r in self.records[type_name].values() if r.key not in taken])
            rec = self.update(rec.with_value(field, value))
        else:
            rec = self.new(type_name, **{field: value})
        self.secret.add((rec.key, field))
        return rec

    def is_secret(self, key: str, field: str) -> bool:
        return (key, field) in self.secret

    def values_of(self, pool: str) -> list[str]:
        """Every value of ``pool`` handed out so far, in hand-out order."""
        return [v for v, p in self.used.items() if p == pool]
