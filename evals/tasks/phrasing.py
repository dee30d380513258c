"""The agent's side of a trajectory, per split: system prompt, tool specs, reasoning, neutral text.

These tables are the surface templates that differ between train and held-out tasks (besides the
fact sentences and labels of each domain). Entity-free by construction: they never name a record,
so they cannot leak an answer. Probe wording lives in ``evals/data/probe_templates.yaml``.
"""

from __future__ import annotations

import json
import random
from typing import Any

from evals.tasks.domains import Domain

_P = {"type": "string"}
TOOLS: tuple[dict[str, Any], ...] = tuple(
    {"type": "function", "function": {"name": name, "description": desc, "parameters": {
        "type": "object", "properties": props, "required": list(props)}}}
    for name, desc, props in (
        ("web_search", "Search the internal knowledge base; returns ranked hits.", {"query": _P}),
        ("read_page", "Read a knowledge-base page by URL.", {"url": _P}),
        ("sql_query", "Run a read-only SQL query against the operational database.", {"sql": _P}),
        ("get_record", "Fetch one record by id, with related records.", {"id": _P}),
        ("tail_logs", "Show recent log lines of a source.", {"source": _P, "lines": {"type": "integer"}}),
        ("list_board", "List the open cards of a work board.", {"board": _P}),
        ("read_inbox", "Read emails in a folder.", {"folder": _P, "unread_only": {"type": "boolean"}}),
        ("update_record", "Change a record's status, with a note.", {"id": _P, "status": _P, "note": _P}),
    )
)

SURFACE_TOOLS: tuple[dict[str, Any], ...] = tuple(
    {"type": "function", "function": {"name": name, "description": desc, "parameters": {
        "type": "object", "properties": props, "required": list(props)}}}
    for name, desc, props in (
        ("ticket_thread", "Show the open threads of a support queue.", {"queue": _P, "state": _P}),
        ("chat_transcript", "Fetch a live-chat transcript by session id.", {"session": _P}),
        ("kb_article", "Open a help-center article by slug.", {"article": _P}),
        ("crm_lookup", "Look up CRM records of an object type.", {"object": _P, "fields": {"type": "array"}}),
        ("update_record", "Change a record's status, with a note.", {"id": _P, "status": _P, "note": _P}),
    )
)
"""The tools of the held-out surface domain (:mod:`evals.tasks.domains.support`)."""

BOARD_COLUMNS = {"train": ("To do", "In progress", "Blocked", "Done"),
                 "heldout": ("backlog", "doing", "waiting", "closed")}


def system_prompt(domain: Domain, split: str, rng: random.Random,
                  tools: tuple[dict[str, Any], ...] = TOOLS) -> str:
    """Persona, the tool list (a bullet list in train, JSON schemas in held-out) and house rules."""
    persona = rng.choice(domain.persona[split])
    if split == "train":
        lines = [f"- {t['function']['name']}({', '.join(t['function']['parameters']['properties'])}): "
                 f"{t['function']['description']}" for t in TOOLS]
        return (f"{persona}\n\nWork step by step. Before each action, think about what you know and what is "
                "missing; call exactly one tool per turn and never state a fact that no tool returned.\n\n# Tools\n"
                + "\n".join(lines) + "\n\n# Conventions\n- Quote ids exactly as the systems print them.\n"
                "- Record every decision with update_record and a short note.\n"
                "- When the task is done, reply with a concise summary for the user.")
    specs = json.dumps([t["function"] for t in tools], separators=(",", ":"))
    return (f"{persona}\n\nAvailable functions (JSON schema):\n{specs}\n\nOperating rules:\n1. One function call "
            "per step.\n2. Only report what a function returned.\n3. Log decisions through update_record.\n"
            "4. Finish with a short brief.")


_OPENERS = {
    "train": {
        "sql_query": "The query returned {n} rows.", "get_record": "The record came back with {n} related entries.",
        "tail_logs": "The logs show {n} relevant lines.", "web_search": "The search returned {n} results.",
        "read_page": "The page has {n} relevant paragraphs.", "list_board": "The board lists {n} open cards.",
        "read_inbox": "There are {n} unread emails.", "update_record": "The update was saved.",
    },
    "heldout": {
        "sql_query": "Got {n} rows back.", "get_record": "Fetched it; {n} linked items.",
        "tail_logs": "{n} matching log entries.", "web_search": "{n} hits.", "read_page": "Read it ({n} sections).",
        "list_board": "{n} cards on the board.", "read_inbox": "{n} new messages.", "update_record": "Change stored.",
        "ticket_thread": "{n} posts in the thread.", "chat_transcript": "{n} chat lines.",
        "kb_article": "Article read ({n} points).", "crm_lookup": "{n} CRM records.",
    },
}
_RESTATE = {"train": ("{s}", "Noted: {s}", "From this: {s}"), "heldout": ("Observed - {s}", "{s}", "Seen: {s}")}
_KEEP = {"train": ("Key fact for the report: {s}", "Important, I need this later: {s}"),
         "heldout": ("Keeping track of this: {s}", "For the final brief: {s}")}
_PLAN = {"train": ("Next I'll {a}.", "Now I need to {a}.", "I should {a} next."),
         "heldout": ("Moving on: I will {a}.", "Plan: {a}.", "Then {a}.")}
_ACTIONS = {
    "train": {
        "sql_query": "query the {table} table", "get_record": "pull the full record", "tail_logs": "check the logs",
        "web_search": "search the knowledge base", "read_page": "read the relevant wiki page",
        "list_board": "look at the work board", "read_inbox": "check the inbox", "update_record": "update the record",
    },
    "heldout": {
        "sql_query": "pull rows from {table}", "get_record": "open the item itself", "tail_logs": "scan recent logs",
        "web_search": "run a KB search", "read_page": "open the KB article", "list_board": "review the board",
        "read_inbox": "go through new mail", "update_record": "write the change",
        "ticket_thread": "read the queue's threads", "chat_transcript": "pull the chat transcript",
        "kb_article": "check the help-center article", "crm_lookup": "look up {table} in the CRM",
    },
}
_START = {"train": ("The task needs facts spread over several systems, so I'll gather them one source at a time.",
                    "I need to collect the facts before summarising anything."),
          "heldout": ("Several sources are involved; collecting evidence first.", "Start with discovery.")}
_CONTENT = {"train": ("", "", "", "Checking the next source.", "Let me look at that."),
            "heldout": ("", "", "", "One more lookup.", "Continuing.")}
_NOISE = {
    "train": ("DEBUG {src}: heartbeat ok", "INFO {src}: batch committed", "WARN {src}: retrying upstream call "
              "(attempt 2)", "DEBUG {src}: cache refreshed", "INFO {src}: worker pool resized"),
    "heldout": ("{src} | keepalive", "{src} | flush complete", "{src} | upstream slow, backing off",
                "{src} | config reloaded", "{src} | queue drained"),
}
_QUERIES = {"train": ("{plural} with {label} details", "latest {plural} {label}", "{label} for open {plural}"),
            "heldout": ("{label} lookup {plural}", "{plural} by {label}", "which {label} per {plural}")}
_TITLES = {"train": ("{Plural} overview", "Weekly {plural} notes", "{Plural}: current assignments"),
           "heldout": ("Reference - {plural}", "{Plural} digest", "Working notes on {plural}")}


def reflect(split: str, tool: str, n: int, restate: list[str], keep: list[str], rng: random.Random) -> str:
    """Reasoning about the last tool output: an opener, some restated facts, the facts to keep."""
    parts = [_OPENERS[split][tool].format(n=n)]
    parts += [rng.choice(_RESTATE[split]).format(s=s) for s in restate]
    parts += [rng.choice(_KEEP[split]).format(s=s) for s in keep]
    return " ".join(parts)


def plan(split: str, tool: str, table: str, rng: random.Random) -> str:
    """The sentence announcing the next call."""
    return rng.choice(_PLAN[split]).format(a=_ACTIONS[split][tool].format(table=table))


def start(split: str, rng: random.Random) -> str:
    return rng.choice(_START[split])


def content(split: str, rng: random.Random) -> str:
    return rng.choice(_CONTENT[split])


def noise_line(split: str, stamp: str, source: str, rng: random.Random) -> str:
    line = rng.choice(_NOISE[split]).format(src=source)
    return f"{stamp} {line}"


def _type_words(domain: Domain, split: str, rng: random.Random) -> dict[str, str]:
    rtype = rng.choice(list(domain.types.values()))
    plural = rtype.plural[split]
    return {"plural": plural, "Plural": plural[:1].upper() + plural[1:],
            "label": rng.choice(rtype.fields).label[split]}


def search_query(domain: Domain, split: str, rng: random.Random) -> str:
    return rng.choice(_QUERIES[split]).format(**_type_words(domain, split, rng))


def page_title(domain: Domain, split: str, rng: random.Random) -> str:
    return rng.choice(_TITLES[split]).format(**_type_words(domain, split, rng))


def email(split: str, sender: str, key: str, body: str, filler: str, rng: random.Random,
          own_line: bool = False) -> str:
    """An email about record ``key``; with ``own_line`` the filler sentence starts a new line after ``body``."""
    text = f"{body}\n{filler}" if own_line else f"{body} {filler}"
    if split == "train":
        subject = rng.choice(("Question about {k}", "FYI: {k}", "{k} update")).format(k=key)
        return f"From: {sender}\nSubject: {subject}\n\nHi,\n{text}\n\nBest,\n{sender}"
    subject = rng.choice(("{k}?", "note on {k}", "{k} - heads up")).format(k=key)
    return f"sender: {sender}\nre: {subject}\n\n{text}\n- {sender}"
