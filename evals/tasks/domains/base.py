"""The shape of a task domain: record types, their fields, and every phrase that depends on the split.

A domain (logistics, IT operations, procurement) is a small world of records. Each record type has
a key (an order id, a warehouse name) and fields whose values come from entity pools
(:mod:`evals.tasks.pools`) or from the domain's closed vocabularies (statuses, hold reasons).
Everything that is written differently in the train and held-out splits is a mapping
``split -> phrases``; the generator picks a phrase with the task's random generator.

This module defines the data classes only; the domains themselves live beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

Phrases = Mapping[str, tuple[str, ...]]  # split -> alternatives
STATUS_POOL = "status"  # field pools with these names use the domain's vocabularies
REASON_POOL = "reason"


@dataclass(frozen=True)
class FieldDef:
    """One field of a record type.

    Attributes:
        name: field name (also the ``<type>.<field>`` path used by probe templates).
        pool: entity pool name (:mod:`evals.tasks.pools`), ``"status"`` or ``"reason"``.
        label: split -> column label (tables, logs, JSON keys are derived from it).
        sentences: split -> sentence templates with ``{key}`` and ``{value}``.
    """

    name: str
    pool: str
    label: Mapping[str, str]
    sentences: Phrases

    def key_first(self, split: str) -> tuple[str, ...]:
        """The sentence templates of ``split`` that name the key before the value."""
        return tuple(t for t in self.sentences[split] if t.index("{key}") < t.index("{value}"))

    def copy_template(self, split: str) -> str:
        """The template of copy lines (the copyable evidence style): the first key-first one."""
        return self.key_first(split)[0]


@dataclass(frozen=True)
class RecordType:
    """A kind of record: its key pool, how its key is labelled, and its fields."""

    name: str
    key_pool: str
    key_label: Mapping[str, str]
    plural: Mapping[str, str]
    fields: tuple[FieldDef, ...]

    def field(self, name: str) -> FieldDef:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no field {name!r}; fields: {', '.join(f.name for f in self.fields)}")


@dataclass(frozen=True)
class StatusFlow:
    """The decision-then-reversal story of a domain.

    Attributes:
        type: record type whose status is put on hold and later changed.
        requester: field of that type naming who asked for the hold.
        hold_email, release_email: split -> email templates with ``{key} {requester} {reason}
            {hold} {status} {note}`` placeholders.
        hold_thought, release_thought: split -> the assistant's reasoning on each email.
        release_notes: split -> why the hold was lifted (free text, never a candidate answer).
        hold_line, release_line: split -> one-line sentences with the same placeholders that the
            ``update_record`` confirmation starts with in the copyable evidence style: the record's
            key first, then the hold status and reason, or the old and new status.
    """

    type: str
    requester: str
    hold_email: Phrases
    release_email: Phrases
    hold_thought: Phrases
    release_thought: Phrases
    release_notes: Phrases
    hold_line: Phrases
    release_line: Phrases


@dataclass(frozen=True)
class Domain:
    """A task domain.

    Attributes:
        name: registry name.
        persona, tasks: split -> system persona lines / user task texts.
        types: record types by name.
        facts: ``(type, field)`` pairs that single-fact probes ask about.
        hop: ``(type_a, link_field, field_b)``: a's ``link_field`` names a record of the type whose
            key pool is that field's pool, and ``field_b`` is asked about (multi-hop).
        statuses: split -> vocabulary; index 0 is the hold status, 1-3 the statuses a hold may
            turn into, the rest only appear on other records.
        reasons: split -> hold reasons.
        flow: the decision-then-reversal story.
        filler: split -> neutral sentences (no entities) for pages, emails and search snippets.
        log_sources, boards, tables: names used in tool calls (no entities).
    """

    name: str
    persona: Phrases
    tasks: Phrases
    types: Mapping[str, RecordType]
    facts: tuple[tuple[str, str], ...]
    hop: tuple[str, str, str]
    statuses: Phrases
    reasons: Phrases
    flow: StatusFlow
    filler: Phrases
    log_sources: tuple[str, ...]
    boards: tuple[str, ...]
    tables: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for t, f in (*self.facts, self.hop[:2]):
            self.types[t].field(f)
        hop_b = self.hop_target_type
        hop_b.field(self.hop[2])
        assert all(len(v) >= 4 for v in self.statuses.values()), "need a hold status and three outcomes"
        for rtype in self.types.values():
            for fdef in rtype.fields:
                assert all(fdef.key_first(s) and len(fdef.sentences[s]) >= 2 for s in fdef.sentences), \
                    f"{rtype.name}.{fdef.name}: needs a key-first sentence and another one"

    @property
    def hop_target_type(self) -> RecordType:
        """The record type the hop's link field points at."""
        link = self.types[self.hop[0]].field(self.hop[1])
        for t in self.types.values():
            if t.key_pool == link.pool:
                return t
        raise KeyError(f"no record type is keyed by pool {link.pool!r}")
