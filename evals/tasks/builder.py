"""Trajectory builder: rounds of (assistant reasoning + tool call, tool response) sized to a budget.

Message ids of a built trajectory (one tool call per round)::

    0 system | 1 user | 2 assistant(call 0) | 3 tool(out 0) | ... | 2+2i assistant(call i) | 3+2i tool(out i)

The assistant message of round i reflects on output i-1 (restating a few distractor facts, and the
facts a family asked to keep) and plans call i. Families add rounds in order: :meth:`filler`,
:meth:`evidence` (plants given facts among distractors), :meth:`inbox` and :meth:`update`.

Evidence styles (:data:`EVIDENCE_STYLES`): ``varied`` writes a planted fact in the output's usual
format (a table cell, a log pair, a sentence that may name the value first). ``copyable`` states it
as a *copy line*: a sentence that names the key before the value, on a line of its own, in the
field's copy template (tables and JSON keep the row and add a notes block), and the
``update_record`` confirmations of a reversal start with such a line. A small base model completes
a copy line by copying when it can attend to it. The copy template of a probed kind of fact is
used by its evidence only (other sentences use the field's other templates), so the lead-in
matches one place; so that copy lines do not single out the evidence messages, distractor items
of other kinds get copy lines too, at random (:data:`COPY_SHARE` of prose items,
:data:`NOTE_SHARE` of table rows).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from evals.tasks import phrasing
from evals.tasks.domains import Domain
from evals.tasks.render import FORMATS, TABLE_FORMATS, Inbox, Item, Output, Table, sentence
from evals.tasks.world import Record, World

CHARS_PER_TOKEN = 2.75  # content characters per gemma token, measured on generated tasks (docs/tasks.md)
ASSISTANT_CHARS = 260  # typical assistant message (reasoning + call)
ROUND_CHARS = 1000  # typical round (assistant message + tool output): sets the number of rounds
EVIDENCE_STYLES = ("varied", "copyable")
COPY_SHARE = 0.4  # copyable style: share of distractor items of prose outputs written as key-first lines
NOTE_SHARE = 0.15  # copyable style: share of distractor table rows / JSON objects restated in the notes block


@dataclass
class Round:
    """One tool call and its response, as planned (emitted by :meth:`Builder.messages`)."""

    tool: str
    args: dict[str, Any]
    text: str
    shown: list[Item]
    keep: list[Item] = field(default_factory=list)
    lead: str = ""
    topic: str = "records"
    count: int = 1


class Builder:
    """Builds one trajectory for a world (see the module docstring).

    Args:
        domain, split, rng: as for :class:`World`.
        target_tokens: the length to aim for (approximate: budgets are in characters).
        min_rounds: the fewest rounds the family needs.
        evidence_style: ``varied`` or ``copyable`` (see the module docstring).
    """

    def __init__(self, domain: Domain, split: str, rng: random.Random, target_tokens: int, min_rounds: int,
                 evidence_style: str = "varied") -> None:
        if evidence_style not in EVIDENCE_STYLES:
            raise ValueError(f"evidence_style must be one of {', '.join(EVIDENCE_STYLES)}, got {evidence_style!r}")
        self.copyable = evidence_style == "copyable"
        self.domain, self.split, self.rng = domain, split, rng
        self.world = World(domain, split, rng)
        self.system = phrasing.system_prompt(domain, split, rng)
        self.user = rng.choice(domain.tasks[split])
        self.focus: list[tuple[str, str]] = []
        self.rounds: list[Round] = []
        remaining = max(0.0, target_tokens * CHARS_PER_TOKEN - len(self.system) - len(self.user))
        self.n_rounds = max(min_rounds, round(remaining / ROUND_CHARS))
        self.mean_budget = max(220.0, remaining / self.n_rounds - ASSISTANT_CHARS)

    # ------------------------------------------------------------------ ids

    @staticmethod
    def tool_id(i: int) -> int:
        return 3 + 2 * i

    @property
    def last_id(self) -> int:
        return self.tool_id(len(self.rounds) - 1)

    # ------------------------------------------------------------------ items

    def _fields_for(self, type_name: str) -> tuple[str, ...]:
        focus = [f for t, f in self.focus if t == type_name]
        names = [f.name for f in self.domain.types[type_name].fields]
        extra = self.rng.sample(names, self.rng.randint(1, min(3, len(names))))
        return tuple(dict.fromkeys([*focus, *extra]))

    def _pick(self, out: Output) -> Item:
        if isinstance(out, Table):
            return Item(self.world.pick(out.type_name), out.columns)
        if self.focus and self.rng.random() < 0.6:
            type_name, fname = self.rng.choice(self.focus)
        else:
            type_name = self.rng.choice(list(self.domain.types))
            fname = self.rng.choice(self.domain.types[type_name].fields).name
        fields: tuple[str, ...] = (fname,)
        if self.rng.random() < 0.3:
            other = self.rng.choice(self.domain.types[type_name].fields).name
            fields = tuple(dict.fromkeys((fname, other)))
        return Item(self.world.pick(type_name), fields)

    def _output(self, tool: str | None, type_name: str | None, must: tuple[str, ...] = ()) -> Output:
        tool = tool or self.rng.choice([*FORMATS, *TABLE_FORMATS, "sql_query"])
        out: Output
        if tool in TABLE_FORMATS:
            type_name = type_name or self.rng.choice([t for t, _ in self.focus] or list(self.domain.types))
            columns = tuple(dict.fromkeys([*must, *self._fields_for(type_name)]))
            out = TABLE_FORMATS[tool](self.world, self.rng, type_name, columns)
        else:
            out = FORMATS[tool](self.world, self.rng)
        out.copyable = self.copyable
        return out

    def _distractor(self, out: Output, item: Item, force: bool = False) -> tuple[Item, str, bool]:
        """A distractor item, its chunk, and whether it got a copy line (copyable style, at random or ``force``).

        Those copy lines state facts of other kinds than the ones probes ask about (the focus), so
        the wording of a probe's copy line occurs once in the trajectory, in its evidence.
        """
        if not self.copyable:
            return item, out.chunk(item), False
        focus = {f for t, f in self.focus if t == item.record.type}
        unasked = [f.name for f in self.domain.types[item.record.type].fields
                   if f.name not in focus and not self.world.is_secret(item.record.key, f.name)]
        if isinstance(out, Table):  # a note on a shown column, else on another field of the record
            other = [f for f in item.fields if f in unasked] or unasked
            if other and (force or self.rng.random() < NOTE_SHARE):
                return item, out.copy_chunk(item, (self.rng.choice(other),)), True
            return item, out.chunk(item), False
        if force or self.rng.random() < COPY_SHARE:
            other = unasked
            if other:
                stated = Item(item.record, (self.rng.choice(other),))
                return stated, out.copy_chunk(stated, stated.fields), True
        return item, out.chunk(item), False

    def _fill(self, out: Output, planted: list[Item], budget: float,
              stated: tuple[str, ...] = ()) -> tuple[list[str], list[Item]]:
        """Chunks of distractor items until ``budget`` characters, with ``planted`` items among them.

        In the copyable style the planted items' ``stated`` fields are written as copy lines, and an
        output without planted items gets at least one copy line (or note) too when it can: having
        one is then no sign of evidence.
        """
        allowed = {(it.record.key, f) for it in planted for f in it.fields}
        seen = {(it.record.key, it.fields) for it in planted}
        items: list[Item] = []
        chunks: list[str] = []
        size, misses, copied = 0, 0, False
        while misses < 40 and (len(items) < self.min_items() or size < budget):
            item = self._pick(out)
            if (item.record.key, item.fields) in seen or any(
                    self.world.is_secret(item.record.key, f) and (item.record.key, f) not in allowed
                    for f in item.fields):
                misses += 1
                continue
            seen.add((item.record.key, item.fields))
            item, chunk, copy = self._distractor(out, item)
            seen.add((item.record.key, item.fields))
            items.append(item)
            chunks.append(chunk)
            copied |= copy
            size += len(chunks[-1]) + 4  # chunk plus separator; headers and JSON layout add a little more
        if self.copyable and not planted and not copied and items:
            for j in self.rng.sample(range(len(items)), len(items)):
                item, chunk, copy = self._distractor(out, items[j], force=True)
                if copy:
                    items[j], chunks[j] = item, chunk
                    break
        for it in planted:
            pos = 0 if out.tool == "get_record" else self.rng.randint(0, len(items))
            items.insert(pos, it)
            chunks.insert(pos, out.copy_chunk(it, stated or it.fields) if self.copyable else out.chunk(it))
        return chunks, items

    def budget(self) -> float:
        return self.mean_budget * self.rng.uniform(0.6, 1.4)

    def min_items(self) -> int:
        """The fewest distractor items of an output (before planted ones)."""
        return 2

    # ------------------------------------------------------------------ rounds

    def _add(self, out: Output, chunks: list[str], shown: list[Item], keep: list[Item] | None = None) -> int:
        text = out.text(chunks)  # before args(): some calls name what the output holds
        topic = self.domain.tables.get(out.type_name or "", "records")
        self.rounds.append(Round(out.tool, out.args(), text, shown, keep or [], topic=topic, count=len(chunks)))
        return self.tool_id(len(self.rounds) - 1)

    def filler(self, tool: str | None = None, type_name: str | None = None, budget: float | None = None) -> int:
        """A round of distractor facts (``budget`` characters, default random); returns its tool message id."""
        out = self._output(tool, type_name)
        return self._add(out, *self._fill(out, [], budget if budget is not None else self.budget()))

    def evidence(self, record: Record, fields: tuple[str, ...], keep: bool = False, tool: str | None = None) -> int:
        """A round that shows ``fields`` of ``record`` (secret facts included) among distractors.

        With ``keep`` the next assistant message restates those facts (evidence-restated).
        """
        out = self._output(tool, record.type, must=fields)
        item = Item(record, out.columns if isinstance(out, Table) else fields)
        chunks, shown = self._fill(out, [item], self.budget(), stated=fields)
        return self._add(out, chunks, shown, keep=[Item(record, fields)] if keep else None)

    def inbox(self, email: str) -> int:
        """A ``read_inbox`` round whose messages include ``email``."""
        out = Inbox(self.world, self.rng)
        chunks, shown = self._fill(out, [], self.budget() * 0.6)
        chunks.insert(self.rng.randint(0, len(chunks)), email)
        return self._add(out, chunks, shown)

    def update(self, record: Record, status: str, note: str, lead: str, line: str = "") -> int:
        """An ``update_record`` round: the assistant's ``lead`` reasoning, the call, the confirmation.

        ``line`` (a one-line summary of the change) starts the confirmation in the copyable style.
        """
        args = {"id": record.key, "status": status, "note": note}
        reply: dict[str, Any] = {"ok": True, "id": record.key, "status": status, "note": note, "updated_by": "agent"}
        if self.split == "heldout":
            reply = {"result": "updated", "record": {"id": record.key, "state": status, "remark": note}}
        text = json.dumps(reply, ensure_ascii=False)
        if self.copyable and line:
            text = f"{line}\n{text}"
        self.rounds.append(Round("update_record", args, text, [], lead=lead))
        return self.tool_id(len(self.rounds) - 1)

    def fact(self, item: Item, copy: bool = False) -> str:
        """``item``'s facts as sentences: copy lines with ``copy`` (copyable style), else as outputs say them."""
        style = copy if self.copyable else None
        return " ".join(sentence(self.domain, self.split, item.record, f, self.rng, style) for f in item.fields)

    # ------------------------------------------------------------------ messages

    def _reasoning(self, i: int) -> str:
        rnd, parts = self.rounds[i], []
        if i == 0:
            parts.append(phrasing.start(self.split, self.rng))
        else:
            prev = self.rounds[i - 1]
            open_facts = [Item(it.record, (f,)) for it in prev.shown for f in it.fields
                          if not self.world.is_secret(it.record.key, f)]
            k = min(len(open_facts), self.rng.choices((0, 1, 2), (3, 5, 2))[0])
            restate = [self.fact(it) for it in self.rng.sample(open_facts, k)]
            keep = [self.fact(it, copy=True) for it in prev.keep]
            parts.append(phrasing.reflect(self.split, prev.tool, prev.count, restate, keep, self.rng))
        parts.append(rnd.lead or phrasing.plan(self.split, rnd.tool, rnd.topic, self.rng))
        return " ".join(parts)

    def messages(self) -> list[dict[str, Any]]:
        """The trajectory as OpenAI-style messages (ids as in the module docstring)."""
        msgs: list[dict[str, Any]] = [{"role": "system", "content": self.system},
                                      {"role": "user", "content": self.user}]
        for i, rnd in enumerate(self.rounds):
            call_id = f"call_{self.rng.getrandbits(40):010x}"
            msgs.append({"role": "assistant", "content": phrasing.content(self.split, self.rng),
                         "reasoning_content": self._reasoning(i),
                         "tool_calls": [{"id": call_id, "type": "function", "function": {
                             "name": rnd.tool, "arguments": json.dumps(rnd.args, ensure_ascii=False)}}]})
            msgs.append({"role": "tool", "tool_call_id": call_id, "name": rnd.tool, "content": rnd.text})
        return msgs
