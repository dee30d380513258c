"""The five task families: where a probe's evidence sits in the trajectory.

Each family drives a :class:`~evals.tasks.builder.Builder` round by round and returns
:class:`ProbeSpec` s (what is asked, the gold answer, which messages hold the evidence). Wording
and candidates are added later by the generator. In every family a probe's answer is a value no
distractor carries, shown only in the rounds the family designates, so the evidence ids are
exactly the messages that hold it (status probes excepted: statuses repeat across records).

=============================== =================================================================
evidence-in-old-tool-response   the fact is in one early tool response and nowhere else
evidence-restated               as above, and the next assistant reasoning restates it
decision-then-reversal          a hold asked for by someone, later lifted or changed; probes ask
                                the status before, the status now, and the original reason
multi-hop                       a -> b in an early response, b -> c in a late one; asks a -> c
recent-only                     the fact is in one of the last few tool responses
=============================== =================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from evals.tasks.builder import Builder
from evals.tasks.domains import REASON_POOL, STATUS_POOL
from evals.tasks.world import Record


@dataclass(frozen=True)
class ProbeSpec:
    """A probe before wording: ``template`` names its wording (``<type>.<field>`` or a kind key)."""

    kind: str
    key: str
    template: str
    answer: str
    pool: str
    evidence: tuple[int, ...]
    after: int


def _fact_spec(b: Builder, rec: Record, field: str, evidence: tuple[int, ...]) -> ProbeSpec:
    pool = b.domain.types[rec.type].field(field).pool
    return ProbeSpec("fact", rec.key, f"{rec.type}.{field}", rec.get(field), pool, evidence, b.last_id)


def _two_facts(b: Builder) -> list[tuple[str, str]]:
    facts = b.rng.sample(list(b.domain.facts), 2)
    b.focus = list(facts)
    return facts


def _placed(b: Builder, positions: list[int], plant: Callable[[int], int]) -> dict[int, int]:
    """Run ``n_rounds`` rounds: ``plant(j)`` at ``positions[j]``, filler elsewhere; returns j -> tool id."""
    ids: dict[int, int] = {}
    for i in range(b.n_rounds):
        if i in positions:
            j = positions.index(i)
            ids[j] = plant(j)
        else:
            b.filler()
    return ids


def old_evidence(b: Builder) -> list[ProbeSpec]:
    facts = _two_facts(b)
    targets = [b.world.target(t, f) for t, f in facts]
    positions = b.rng.sample(range(max(2, b.n_rounds // 4)), 2)
    ids = _placed(b, positions, lambda j: b.evidence(targets[j], (facts[j][1],)))
    return [_fact_spec(b, targets[j], facts[j][1], (ids[j],)) for j in range(2)]


def restated(b: Builder) -> list[ProbeSpec]:
    facts = _two_facts(b)
    targets = [b.world.target(t, f) for t, f in facts]
    positions = b.rng.sample(range(max(2, b.n_rounds // 3)), 2)
    ids = _placed(b, positions, lambda j: b.evidence(targets[j], (facts[j][1],), keep=True))
    return [_fact_spec(b, targets[j], facts[j][1], (ids[j], ids[j] + 1)) for j in range(2)]


def recent_only(b: Builder) -> list[ProbeSpec]:
    facts = _two_facts(b)
    targets = [b.world.target(t, f) for t, f in facts]
    n = b.n_rounds
    positions = b.rng.sample(range(n - 4, n - 1), 2)  # among the 2nd..4th newest tool responses
    ids = _placed(b, positions, lambda j: b.evidence(targets[j], (facts[j][1],)))
    return [_fact_spec(b, targets[j], facts[j][1], (ids[j],)) for j in range(2)]


def rng_table(b: Builder) -> str:
    return b.rng.choice(("sql_query", "get_record"))


def multi_hop(b: Builder) -> list[ProbeSpec]:
    type_a, link, field_b = b.domain.hop
    type_b = b.domain.hop_target_type.name
    b.focus = [(type_a, link), (type_b, field_b)]
    mid = b.world.target(type_b, field_b)
    start = b.world.target(type_a, link, value=mid.key)
    n = b.n_rounds
    first = b.rng.randrange(max(1, n // 3))
    second = b.rng.randrange(max(first + 2, n // 2), n - 1)
    plants = [(start, link, None), (mid, field_b, rng_table(b))]  # the second lists other b records beside mid
    ids = _placed(b, [first, second], lambda j: b.evidence(plants[j][0], (plants[j][1],), tool=plants[j][2]))
    pool = b.domain.types[type_b].field(field_b).pool
    return [ProbeSpec("multi_hop", start.key, f"{type_a}.{link}.{field_b}", mid.get(field_b), pool,
                      (ids[0], ids[1]), b.last_id)]


def reversal(b: Builder) -> list[ProbeSpec]:
    flow, split, rng, world = b.domain.flow, b.split, b.rng, b.world
    b.focus = [(flow.type, "status"), (flow.type, "note")]
    statuses = b.domain.statuses[split]
    hold, new = statuses[0], rng.choice(statuses[1:4])
    reason = world.reserve(REASON_POOL)
    requester = world.person()
    rec = world.new(flow.type, status=hold, note=reason, **{flow.requester: requester})
    world.secret |= {(rec.key, "status"), (rec.key, "note")}
    note = rng.choice(flow.release_notes[split])
    words = {"key": rec.key, "reason": reason, "hold": hold, "status": new, "note": note,
             "Note": note[:1].upper() + note[1:]}
    releaser = rng.choice([requester, world.person()])
    n = b.n_rounds
    h = rng.randint(1, max(1, min(n // 4, n - 7)))
    r = rng.randint(max(h + 4, n // 2), n - 3)  # the release update is followed by at least one round
    ids: dict[str, int] = {}
    for i in range(n):
        if i == 0:  # a survey of the records whose statuses and notes the probes ask about
            b.filler("sql_query", flow.type, budget=max(900.0, b.budget()))
        elif i == h:
            ids["hold"] = b.inbox(rng.choice(flow.hold_email[split]).format(requester=requester, **words))
        elif i == h + 1:
            ids["hold_update"] = b.update(rec, hold, reason, rng.choice(flow.hold_thought[split]).format(
                requester=requester, **words), rng.choice(flow.hold_line[split]).format(**words) if b.copyable else "")
        elif i == r:
            ids["release"] = b.inbox(rng.choice(flow.release_email[split]).format(requester=releaser, **words))
        elif i == r + 1:
            ids["release_update"] = b.update(rec, new, note, rng.choice(flow.release_thought[split]).format(
                requester=releaser, **words), rng.choice(flow.release_line[split]).format(**words) if b.copyable
                else "")
        else:
            tid = b.filler()
            if i == h + 2:
                ids["before"] = tid
    held = (ids["hold"], ids["hold"] + 1, ids["hold_update"])
    lifted = (ids["release"], ids["release"] + 1, ids["release_update"])
    return [
        ProbeSpec("status_before", rec.key, "status", hold, STATUS_POOL, held, ids["before"]),
        ProbeSpec("status_now", rec.key, "status", new, STATUS_POOL, lifted, b.last_id),
        ProbeSpec("original_reason", rec.key, "original_reason", reason, REASON_POOL, held, b.last_id),
    ]


@dataclass(frozen=True)
class Family:
    """A family: its generator and the fewest rounds it needs."""

    name: str
    run: Callable[[Builder], list[ProbeSpec]]
    min_rounds: int


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("evidence-in-old-tool-response", old_evidence, 5),
    Family("evidence-restated", restated, 5),
    Family("decision-then-reversal", reversal, 8),
    Family("multi-hop", multi_hop, 5),
    Family("recent-only", recent_only, 5),
)}
