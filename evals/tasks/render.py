"""Tool outputs: records rendered as tables, JSON, logs, search results, pages, boards and emails.

Each :class:`Output` is one tool call's response under construction. The builder adds *chunks*
(one per item: a table row, a log line, a search hit, an email) until the round's character budget
is met, then joins them. Outputs differ by split (markdown vs CSV tables, ISO vs bracketed log
timestamps, ...), so held-out tasks never share a surface template with train tasks.

Two ways to write an item: :meth:`Output.chunk` (the format's usual rendering, where a fact may be
a table cell, a ``key=value`` pair or a sentence that names the value first) and
:meth:`Output.copy_chunk` (the *copyable* evidence style: each fact a sentence that names the key
before the value, on a line of its own; tables and JSON records keep the row and add the sentence
to a notes block after the body). A small base model can complete such a line by copying it.

This module writes text only; which records appear where is the builder's and the family's call.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from evals.tasks import phrasing
from evals.tasks.domains import Domain
from evals.tasks.world import Record, World


@dataclass(frozen=True)
class Item:
    """A record and the fields of it that a chunk shows."""

    record: Record
    fields: tuple[str, ...]


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def _quoted(value: str) -> str:
    return json.dumps(value) if " " in value else value


def sentence(domain: Domain, split: str, record: Record, field: str, rng: random.Random,
             copy: bool | None = None) -> str:
    """One fact of ``record`` written as a sentence of the split's phrasing.

    ``copy``: ``None`` draws any of the field's templates (the varied style); ``True`` takes its
    copy template (:meth:`~evals.tasks.domains.FieldDef.copy_template`, which names the key before
    the value); ``False`` draws any template but that one (the copyable style everywhere outside
    copy lines, so that a copy line's wording is not repeated by other sentences).
    """
    fdef = domain.types[record.type].field(field)
    if copy:
        template = fdef.copy_template(split)
    else:
        options = fdef.sentences[split]
        if copy is False:
            options = tuple(t for t in options if t != fdef.copy_template(split))
        template = rng.choice(options)
    return template.format(key=record.key, value=record.get(field))


class Output:
    """One tool response under construction. Subclasses set ``tool`` and override the parts.

    Call :meth:`text` before :meth:`args`: some calls name what the output turned out to hold.
    """

    tool: ClassVar[str] = ""
    type_name: str | None = None  # set when every chunk must be a record of one type (tables)
    copyable = False  # the copyable evidence style (set by the builder): see :func:`sentence`

    def __init__(self, world: World, rng: random.Random) -> None:
        self.world, self.rng = world, rng
        self.domain, self.split = world.domain, world.split
        self.train = self.split == "train"
        self.clock = rng.randrange(6 * 3600, 20 * 3600)
        self.day = rng.randrange(2, 28)

    def args(self) -> dict[str, Any]:
        return {}

    def head(self) -> str:
        return ""

    def say(self, item: Item) -> list[str]:
        """The facts of ``item`` as sentences of the split's phrasing (never a copy line's wording)."""
        return [sentence(self.domain, self.split, item.record, f, self.rng, False if self.copyable else None)
                for f in item.fields]

    def chunk(self, item: Item) -> str:
        return "; ".join(self.say(item))

    def lines(self, item: Item, fields: tuple[str, ...]) -> list[str]:
        """``fields`` of ``item`` as copy lines: each its field's copy template (key before value)."""
        return [sentence(self.domain, self.split, item.record, f, self.rng, copy=True) for f in fields]

    def copy_chunk(self, item: Item, fields: tuple[str, ...]) -> str:
        """``item`` in the copyable style: ``fields`` stated as key-first sentences, each on its own line."""
        return "\n".join(self.lines(item, fields))

    def tail(self, n: int) -> str:
        return ""

    def sep(self) -> str:
        return "\n"

    def text(self, chunks: list[str]) -> str:
        return self.head() + self.sep().join(chunks) + self.tail(len(chunks))

    def stamp(self) -> str:
        self.clock += self.rng.randrange(1, 90)
        h, m, s = self.clock // 3600 % 24, self.clock // 60 % 60, self.clock % 60
        return f"2026-03-{self.day:02d}T{h:02d}:{m:02d}:{s:02d}Z" if self.train else \
            f"[{self.day:02d}/Mar {h:02d}:{m:02d}:{s:02d}]"


class Table(Output):
    """``sql_query``: rows of one record type (markdown in train, CSV in held-out)."""

    tool = "sql_query"

    def __init__(self, world: World, rng: random.Random, type_name: str, columns: tuple[str, ...]) -> None:
        super().__init__(world, rng)
        self.type_name: str = type_name
        self.columns = columns
        self.rtype = self.domain.types[type_name]
        self.notes: dict[str, list[str]] = {}  # chunk -> its copyable sentences, shown after the body

    def copy_chunk(self, item: Item, fields: tuple[str, ...]) -> str:
        """The row (or JSON object), with ``fields`` also stated as sentences in the notes block."""
        chunk = self.chunk(item)
        self.notes[chunk] = self.lines(item, fields)
        return chunk

    def with_notes(self, body: str, chunks: list[str]) -> str:
        """``body`` followed by the notes of ``chunks`` in their order (nothing when there are none)."""
        notes = [s for c in chunks for s in self.notes.get(c, ())]
        if not notes:
            return body
        if self.train:
            return body + "\n\nNotes:\n" + "\n".join(f"- {s}" for s in notes)
        return body + "\n\nremarks:\n" + "\n".join(f"* {s}" for s in notes)

    def text(self, chunks: list[str]) -> str:
        return self.with_notes(super().text(chunks), chunks)

    def labels(self) -> list[str]:
        labels = [self.rtype.key_label[self.split]] + [self.rtype.field(c).label[self.split] for c in self.columns]
        return labels if self.train else [slug(x) for x in labels]

    def args(self) -> dict[str, Any]:
        table = self.domain.tables[self.type_name]
        cols = ", ".join(["id", *self.columns])
        sql = f"SELECT {cols} FROM {table} WHERE updated_at >= '2026-03-{self.day:02d}' ORDER BY id LIMIT 40"
        return {"sql": sql if self.train else sql.lower()}

    def head(self) -> str:
        labels = self.labels()
        if self.train:
            return "| " + " | ".join(labels) + " |\n|" + "---|" * len(labels) + "\n"
        return ",".join(labels) + "\n"

    def chunk(self, item: Item) -> str:
        cells = [item.record.key] + [item.record.get(c) for c in self.columns]
        return "| " + " | ".join(cells) + " |" if self.train else ",".join(cells)

    def tail(self, n: int) -> str:
        return f"\n({n} rows)" if self.train else f"\n-- {n} rows returned"


class RecordJSON(Table):
    """``get_record``: one record (the first chunk) and related ones, as JSON."""

    tool = "get_record"
    main = ""

    def args(self) -> dict[str, Any]:
        return {"id": self.main}

    def head(self) -> str:
        return ""

    def labels(self) -> list[str]:
        return [slug(x) for x in super().labels()]

    def chunk(self, item: Item) -> str:
        obj = dict(zip(self.labels(), [item.record.key] + [item.record.get(c) for c in self.columns]))
        return json.dumps(obj, ensure_ascii=False)

    def text(self, chunks: list[str]) -> str:
        objs = [json.loads(c) for c in chunks]
        self.main = next(iter(objs[0].values()))
        if self.train:
            body = json.dumps({"result": objs[0], "related": objs[1:], "count": len(objs)}, indent=1,
                              ensure_ascii=False)
        else:
            body = json.dumps({"data": {"item": objs[0], "see_also": objs[1:]}, "ok": True}, ensure_ascii=False)
        return self.with_notes(body, chunks)


class Logs(Output):
    """``tail_logs``: one line per fact, with neutral lines in between."""

    tool = "tail_logs"

    def __init__(self, world: World, rng: random.Random) -> None:
        super().__init__(world, rng)
        self.source = rng.choice(self.domain.log_sources)

    def args(self) -> dict[str, Any]:
        return {"source": self.source, "lines": self.rng.choice([50, 80, 100])}

    def chunk(self, item: Item) -> str:
        rtype = self.domain.types[item.record.type]
        lines = []
        if self.rng.random() < 0.5:
            lines.append(phrasing.noise_line(self.split, self.stamp(), self.source, self.rng))
        if self.train:
            pairs = " ".join(f"{slug(rtype.field(f).label['train'])}={_quoted(item.record.get(f))}"
                             for f in item.fields)
            lines.append(f"{self.stamp()} INFO {self.source}: {slug(rtype.key_label['train'])}={item.record.key} "
                         f"{pairs}")
        else:
            pairs = ", ".join(f"{rtype.field(f).label['heldout']}: {item.record.get(f)}" for f in item.fields)
            lines.append(f"{self.stamp()} {self.source} | {rtype.key_label['heldout']} {item.record.key} -> {pairs}")
        return "\n".join(lines)

    def copy_chunk(self, item: Item, fields: tuple[str, ...]) -> str:
        lines = []
        if self.rng.random() < 0.5:
            lines.append(phrasing.noise_line(self.split, self.stamp(), self.source, self.rng))
        for s in self.lines(item, fields):
            lines.append(f"{self.stamp()} INFO {self.source}: {s}" if self.train else
                         f"{self.stamp()} {self.source} | {s}")
        return "\n".join(lines)


class Search(Output):
    """``web_search``: numbered hits with a title, an address and a snippet."""

    tool = "web_search"

    def args(self) -> dict[str, Any]:
        return {"query": phrasing.search_query(self.domain, self.split, self.rng)}

    def text(self, chunks: list[str]) -> str:
        return "\n".join(f"{i}. {c}" if self.train else f"[{i}] {c}" for i, c in enumerate(chunks, 1))

    def chunk(self, item: Item) -> str:
        rtype = self.domain.types[item.record.type]
        facts = " ".join(self.say(item))
        filler = self.rng.choice(self.domain.filler[self.split])
        table = self.domain.tables[item.record.type]
        if self.train:
            return (f"{rtype.key_label['train'].title()} {item.record.key} - details\n"
                    f"   https://wiki.internal/{table}/{slug(item.record.key)}\n   {facts} {filler}\n")
        return f"{facts} ... {filler} (source: kb.corp/{table}?id={slug(item.record.key)})"

    def copy_chunk(self, item: Item, fields: tuple[str, ...]) -> str:
        rtype = self.domain.types[item.record.type]
        lines = self.lines(item, fields)
        filler = self.rng.choice(self.domain.filler[self.split])
        table = self.domain.tables[item.record.type]
        if self.train:
            facts = "".join(f"   {s}\n" for s in lines)
            return (f"{rtype.key_label['train'].title()} {item.record.key} - details\n"
                    f"   https://wiki.internal/{table}/{slug(item.record.key)}\n{facts}   {filler}\n")
        return "\n".join(lines) + f"\n    ... {filler} (source: kb.corp/{table}?id={slug(item.record.key)})"


class Page(Output):
    """``read_page``: a wiki page; facts woven into paragraphs of neutral text."""

    tool = "read_page"

    def __init__(self, world: World, rng: random.Random) -> None:
        super().__init__(world, rng)
        self.title = phrasing.page_title(self.domain, self.split, rng)

    def args(self) -> dict[str, Any]:
        host = "https://wiki.internal" if self.train else "https://kb.corp/page"
        return {"url": f"{host}/{self.domain.name}/{slug(self.title)}"}

    def head(self) -> str:
        return f"# {self.title}\n\n" if self.train else f"== {self.title} ==\n"

    def sep(self) -> str:
        return "\n\n" if self.train else "\n"

    def chunk(self, item: Item) -> str:
        facts = self.say(item)
        filler = self.rng.sample(self.domain.filler[self.split], 2)
        parts = [*facts, *filler]
        first = parts.pop(self.rng.randrange(len(parts)))  # facts are not always a paragraph's first sentence
        return " ".join([first, *parts])

    def copy_chunk(self, item: Item, fields: tuple[str, ...]) -> str:
        lines = self.lines(item, fields)
        return "\n".join([*lines, " ".join(self.rng.sample(self.domain.filler[self.split], 2))])


class Board(Output):
    """``list_board``: cards with an id, a summary, an owner and a column."""

    tool = "list_board"

    def __init__(self, world: World, rng: random.Random) -> None:
        super().__init__(world, rng)
        self.board = rng.choice(self.domain.boards)
        self.prefix = slug(self.board)[:3].upper()
        self.numbers = rng.sample(range(10, 100), 90)

    def args(self) -> dict[str, Any]:
        return {"board": self.board}

    def head(self) -> str:
        return f"Board: {self.board}\n" if self.train else f"{self.board} (open cards)\n"

    def chunk(self, item: Item) -> str:
        facts = " ".join(self.say(item))
        number = self.numbers.pop() if self.numbers else 99
        column = self.rng.choice(phrasing.BOARD_COLUMNS[self.split])
        owner = self.world.person()
        if self.train:
            return f"[{self.prefix}-{number}] {facts} · {owner} · {column}"
        return f"- {column:<12} #{number} {facts} (owner: {owner})"

    def copy_chunk(self, item: Item, fields: tuple[str, ...]) -> str:
        lines = self.lines(item, fields)
        number = self.numbers.pop() if self.numbers else 99
        column = self.rng.choice(phrasing.BOARD_COLUMNS[self.split])
        owner = self.world.person()
        if self.train:
            return f"[{self.prefix}-{number}] {owner} · {column}\n" + "\n".join(f"    {s}" for s in lines)
        return f"- {column:<12} #{number} (owner: {owner})\n" + "\n".join(f"  {s}" for s in lines)


class Inbox(Output):
    """``read_inbox``: emails; a chunk is one message."""

    tool = "read_inbox"

    def args(self) -> dict[str, Any]:
        return {"folder": "inbox", "unread_only": True}

    def sep(self) -> str:
        return "\n---\n" if self.train else "\n=====\n"

    def chunk(self, item: Item) -> str:
        facts = " ".join(self.say(item))
        return phrasing.email(self.split, self.world.person(), item.record.key, facts,
                              self.rng.choice(self.domain.filler[self.split]), self.rng)

    def copy_chunk(self, item: Item, fields: tuple[str, ...]) -> str:
        body = "\n".join(self.lines(item, fields))
        return phrasing.email(self.split, self.world.person(), item.record.key, body,
                              self.rng.choice(self.domain.filler[self.split]), self.rng, own_line=True)


FORMATS: dict[str, type[Output]] = {f.tool: f for f in (Logs, Search, Page, Board, Inbox)}
TABLE_FORMATS: dict[str, type[Table]] = {f.tool: f for f in (Table, RecordJSON)}


# ---------------------------------------------------------------- held-out surface formats
# Tool outputs of the surface domain (:mod:`evals.tasks.domains.support`): only held-out tasks of
# the ``horizon`` suites use them, so no train task shares their layout.


class TicketThread(Output):
    """``ticket_thread``: messages of a support thread, each with its author's role and age."""

    tool = "ticket_thread"
    ROLES = ("customer", "agent", "team lead")

    def __init__(self, world: World, rng: random.Random) -> None:
        super().__init__(world, rng)
        self.queue = rng.choice(self.domain.boards)

    def args(self) -> dict[str, Any]:
        return {"queue": self.queue, "state": "open"}

    def head(self) -> str:
        return f"Thread view - queue {self.queue}\n"

    def _by(self) -> str:
        return f"--- {self.rng.choice(self.ROLES)} wrote {self.rng.randrange(2, 59)} min ago"

    def chunk(self, item: Item) -> str:
        return f"{self._by()}\n{' '.join(self.say(item))} {self.rng.choice(self.domain.filler[self.split])}"

    def copy_chunk(self, item: Item, fields: tuple[str, ...]) -> str:
        return "\n".join([self._by(), *self.lines(item, fields), self.rng.choice(self.domain.filler[self.split])])


class ChatTranscript(Output):
    """``chat_transcript``: timestamped chat lines of a customer, an agent and a bot."""

    tool = "chat_transcript"
    ROLES = ("customer", "agent", "bot")

    def __init__(self, world: World, rng: random.Random) -> None:
        super().__init__(world, rng)
        self.session = f"chat-{rng.getrandbits(32):08x}"

    def args(self) -> dict[str, Any]:
        return {"session": self.session}

    def head(self) -> str:
        return f"Transcript {self.session}\n"

    def _at(self) -> str:
        self.clock += self.rng.randrange(5, 200)
        return f"[{self.clock // 3600 % 24:02d}:{self.clock // 60 % 60:02d}] {self.rng.choice(self.ROLES)}:"

    def chunk(self, item: Item) -> str:
        return f"{self._at()} {' '.join(self.say(item))}"

    def copy_chunk(self, item: Item, fields: tuple[str, ...]) -> str:
        return "\n".join(f"{self._at()} {s}" for s in self.lines(item, fields))

    def message(self, text: str) -> str:
        """A free chat line (an instruction from a person) in this transcript's layout."""
        self.clock += self.rng.randrange(5, 200)
        return f"[{self.clock // 3600 % 24:02d}:{self.clock // 60 % 60:02d}] {text}"


class KBArticle(Output):
    """``kb_article``: a knowledge-base article of bulleted paragraphs under a title."""

    tool = "kb_article"

    def __init__(self, world: World, rng: random.Random) -> None:
        super().__init__(world, rng)
        rtype = rng.choice(list(self.domain.types.values()))
        self.title = rng.choice(("Handling {p}", "Runbook: {p}", "FAQ - {p}")).format(p=rtype.plural[self.split])

    def args(self) -> dict[str, Any]:
        return {"article": slug(self.title)}

    def head(self) -> str:
        return f"KB > {self.title}\nreviewed {self.rng.randrange(2, 9)} weeks ago\n\n"

    def chunk(self, item: Item) -> str:
        parts = [*self.say(item), self.rng.choice(self.domain.filler[self.split])]
        self.rng.shuffle(parts)
        return "> " + " ".join(parts)

    def copy_chunk(self, item: Item, fields: tuple[str, ...]) -> str:
        return "\n".join(f"> {s}" for s in [*self.lines(item, fields), self.rng.choice(self.domain.filler[self.split])])


class CRMRecord(Table):
    """``crm_lookup``: records of one type as indented ``label .... value`` blocks."""

    tool = "crm_lookup"

    def args(self) -> dict[str, Any]:
        return {"object": self.domain.tables[self.type_name], "fields": list(self.columns)}

    def head(self) -> str:
        return f"CRM / {self.domain.tables[self.type_name]}\n\n"

    def sep(self) -> str:
        return "\n\n"

    def chunk(self, item: Item) -> str:
        rows = [f"{self.rtype.key_label[self.split].upper()} {item.record.key}"]
        rows += [f"  {self.rtype.field(c).label[self.split]:.<20} {item.record.get(c)}" for c in self.columns]
        return "\n".join(rows)

    def tail(self, n: int) -> str:
        return f"\n\n{n} matching records"

    def with_notes(self, body: str, chunks: list[str]) -> str:
        notes = [s for c in chunks for s in self.notes.get(c, ())]
        return body + ("\n\nActivity notes:\n" + "\n".join(f"  - {s}" for s in notes) if notes else "")


SURFACE_FORMATS: dict[str, type[Output]] = {f.tool: f for f in (TicketThread, ChatTranscript, KBArticle)}
SURFACE_TABLE_FORMATS: dict[str, type[Table]] = {CRMRecord.tool: CRMRecord}
