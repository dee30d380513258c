"""How a probe is put to the model: the prompt format, calibrated on the default model.

A probe is asked after message ``after_message``: the context is the task's messages up to it,
plus a user turn with the question; the assistant's reply starts with a *lead-in* and the model
either continues it (greedy generation, normalised exact match) or ranks the candidate answers
by log-likelihood (lm-evaluation-harness conventions).

Lead-in styles:
- ``verbatim`` (the calibrated default for gemma-3-270m): the words that precede the answer in
  its evidence message, copied exactly, so that a small base model can complete it by copying
  when (and only when) the evidence is still in its KV cache. The occurrence chosen is the one
  whose lead-in shares most identifiers with the question (ids, numbers, names), preferring prose
  over table and JSON lines.
- ``cloze``: the generator's paraphrased lead-in (``probe.cloze_prefix``), for larger models.
- ``none``: no lead-in; the answer must come first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evals.tasks.schema import Probe, Task, message_text

LEAD_STYLES = ("verbatim", "cloze", "none")
_KEY = re.compile(r"[A-Za-z]*\d[\w-]*|[A-Z][a-z]+(?:\s[A-Z][a-z]+)*|\w+-\w+")


@dataclass(frozen=True)
class ProbeFormat:
    """Prompt format of probes.

    Attributes:
        lead_in: ``verbatim``, ``cloze`` or ``none`` (see the module docstring).
        ask_question: add the probe's question as a user turn before the reply.
        max_tokens: tokens generated for the greedy answer.
        max_lead_chars: longest verbatim lead-in.
    """

    lead_in: str = "verbatim"
    ask_question: bool = True
    max_tokens: int = 8
    max_lead_chars: int = 160
    min_lead_chars: int = 60

    def __post_init__(self) -> None:
        if self.lead_in not in LEAD_STYLES:
            raise ValueError(f"lead_in must be one of {', '.join(LEAD_STYLES)}, got {self.lead_in!r}")

    def as_dict(self) -> dict[str, Any]:
        return {"lead_in": self.lead_in, "ask_question": self.ask_question, "max_tokens": self.max_tokens,
                "max_lead_chars": self.max_lead_chars, "min_lead_chars": self.min_lead_chars}


@dataclass(frozen=True)
class ProbePrompt:
    """A probe ready for the engine: the context suffix, the reply's lead-in, the continuations."""

    question_turn: tuple[Mapping[str, Any], ...]
    prefix: str
    continuations: tuple[str, ...]


def _keys(text: str) -> set[str]:
    return {m.group(0).lower() for m in _KEY.finditer(text)}


def _structured(line: str) -> int:
    """How table- or JSON-like a line is (lower is more prose-like)."""
    return sum(line.count(c) for c in '{}|"=,[]')


def verbatim_lead_in(task: Task, probe: Probe, max_chars: int = 160, min_chars: int = 60) -> str:
    """The text before the answer in its best evidence occurrence (see the module docstring).

    The lead-in starts at the answer's line, reaching back over earlier lines until it is at
    least ``min_chars`` long (a short lead-in such as a table row's first cell is not distinctive
    enough for a small model to copy from the right place), and never beyond ``max_chars``.
    """
    wanted = _keys(probe.question) | _keys(probe.cloze_prefix)
    best: tuple[float, str] | None = None
    for e in probe.evidence_ids:
        text = message_text(task.messages[e])
        for m in re.finditer(re.escape(probe.answer), text):
            i = m.start()
            line_start = text.rfind("\n", 0, i) + 1
            while i - line_start < min_chars and line_start > 0:
                line_start = text.rfind("\n", 0, line_start - 1) + 1
            start = max(line_start, i - max_chars)
            while start > line_start and start < i and not text[start - 1].isspace():
                start += 1  # begin on a word boundary
            lead = text[start:i]
            if not lead.strip():
                continue
            overlap = len(_keys(text[text.rfind("\n", 0, i) + 1:i]) & wanted)  # on the answer's own line
            score = 10.0 * overlap - 0.5 * _structured(lead) + 0.01 * len(lead) + 0.001 * e
            if best is None or score > best[0]:
                best = (score, lead)
    return best[1] if best is not None else probe.cloze_prefix + " "


def probe_prompt(task: Task, probe: Probe, fmt: ProbeFormat) -> ProbePrompt:
    """The question turn, lead-in and candidate continuations of ``probe`` under ``fmt``."""
    question = ({"role": "user", "content": probe.question},) if fmt.ask_question else ()
    if fmt.lead_in == "verbatim":
        lead = verbatim_lead_in(task, probe, fmt.max_lead_chars, fmt.min_lead_chars)
    elif fmt.lead_in == "cloze":
        lead = probe.cloze_prefix + " "
    else:
        lead = ""
    # lm-eval convention: the separating space belongs to the continuation.
    space = lead.endswith(" ") or not lead
    prefix = lead.rstrip(" ")
    conts = tuple((" " if space and prefix else "") + c for c in probe.candidates)
    return ProbePrompt(question, prefix, conts)


def answer_matches(generated: str, answer: str) -> tuple[bool, bool]:
    """(exact, contains): normalised exact match of the answer's span, and plain containment.

    The generation continues a lead-in, so the answer is its first words: exact match compares
    the first ``len(answer.split())`` words, normalised.
    """
    from evals.metrics import contains_match, exact_match

    words = generated.strip().split()
    head = " ".join(words[: max(1, len(answer.split()))]).strip(" .,;:)(\"'")
    return exact_match(head, answer), contains_match(generated, answer)
