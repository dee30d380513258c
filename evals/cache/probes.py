"""How a probe is put to the model: the prompt format, calibrated on the default model.

A probe is asked after message ``after_message``: the context is the task's messages up to it,
optionally plus a user turn with the question; the assistant's reply starts with a *lead-in* and
the model either continues it (greedy generation, normalised exact match) or ranks the candidate
answers by log-likelihood (lm-evaluation-harness conventions).

Lead-in styles:
- ``verbatim`` (the calibrated default for gemma-3-270m): the words that precede the answer in
  its evidence message, copied exactly, so that a small base model can complete it by copying
  when (and only when) the evidence is still in its KV cache. The occurrence chosen
  (:func:`lead_candidates`) is a line that names the probe's key before the answer, best a prose
  sentence of its own: the copy line the ``copyable`` evidence style writes for every probe
  (:mod:`evals.tasks.builder`). Lead-ins never contain the answer.
- ``cloze``: the generator's paraphrased lead-in (``probe.cloze_prefix``), for larger models.
- ``none``: no lead-in; the answer must come first.

A task written by hand (no ``generator``) that gives a ``cloze_prefix`` is asked with that lead-in
under ``verbatim`` too: its author chose the words the answer follows, and its evidence need not
hold a copy line. Generated tasks keep the verbatim lead-in (the calibrated default).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evals.tasks.schema import Probe, Task, mentions, message_text

LEAD_STYLES = ("verbatim", "cloze", "none")
_KEY = re.compile(r"[A-Za-z]*\d[\w-]*|[A-Z][a-z]+(?:\s[A-Z][a-z]+)*|\w+-\w+")


@dataclass(frozen=True)
class ProbeFormat:
    """Prompt format of probes. The defaults are calibrated on gemma-3-270m with the ``plain``
    template over the ``default`` suite (copyable evidence); see docs/tasks.md, "Calibration".

    Attributes:
        lead_in: ``verbatim``, ``cloze`` or ``none`` (see the module docstring).
        ask_question: add the probe's question as a user turn before the reply (off by default:
            with it the small model answers from its question-answering prior more often and
            copies less; greedy exact match drops by about 10 points).
        max_tokens: tokens generated for the greedy answer.
        max_lead_chars: longest verbatim lead-in.
        min_lead_chars: reach back over earlier lines of the evidence until the lead-in is this
            long (0 by default: the copy line alone; earlier lines bring other records' values
            into the lead-in, which the model then copies).
    """

    lead_in: str = "verbatim"
    ask_question: bool = False
    max_tokens: int = 8
    max_lead_chars: int = 160
    min_lead_chars: int = 0

    def __post_init__(self) -> None:
        if self.lead_in not in LEAD_STYLES:
            raise ValueError(f"lead_in must be one of {', '.join(LEAD_STYLES)}, got {self.lead_in!r}")

    def as_dict(self) -> dict[str, Any]:
        return {"lead_in": self.lead_in, "ask_question": self.ask_question, "max_tokens": self.max_tokens,
                "max_lead_chars": self.max_lead_chars, "min_lead_chars": self.min_lead_chars}


# The probe format each named model is judged with where none is given (``akv eval``, the oracle,
# the calibration, a search's ``eval.lead_in`` left unset): chosen by its calibration
# (docs/notebook.md, "Judged by a model that can do the task"); others get ``ProbeFormat()``.
MODEL_PROBE_FORMATS: dict[str, ProbeFormat] = {
    # the verbatim lead-in after a question turn: on one held-out task per family of horizon and mixed
    # (24 probes, bfloat16) the full cache passed 24 by log-likelihood and 23 by greedy answer with the
    # question, 23 and 20 without it; the evidence dropped passed none either way
    # (bench/results/calibration-{horizon,mixed}-heldout-qwen2.5-coder-1.5b[-question].json)
    "qwen2.5-coder-1.5b": ProbeFormat(lead_in="verbatim", ask_question=True),
}


def probe_format_for(model: str) -> ProbeFormat:
    """The calibrated probe format of ``model`` (a name or alias; ``ProbeFormat()`` for others)."""
    from engine.models.catalog import find_spec

    spec = find_spec(model)
    return MODEL_PROBE_FORMATS.get(spec.name if spec is not None else model, ProbeFormat())


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


def _wanted(probe: Probe) -> set[str]:
    """The probe's identifiers: keys of its question that its cloze prefix also names (all keys, if none).

    Requiring both drops capitalised function words ("What", "Which") that only the question starts with.
    """
    q, cloze = _keys(probe.question), probe.cloze_prefix.lower()
    return {k for k in q if k in cloze} or q | _keys(probe.cloze_prefix)


_BREAK = re.compile(r"[.?!]\s")  # a sentence ends inside the text
_LAST_SENTENCE_END = re.compile(r"[^.?!]*\.\s*$")  # the rest of the line is the end of one sentence


@dataclass(frozen=True)
class LeadCandidate:
    """One occurrence of the answer in an evidence message, scored as a place to copy from.

    Attributes:
        message: the evidence message's id.
        lead: the lead-in (text before the answer, see :func:`verbatim_lead_in`).
        overlap: identifiers of the probe (ids, names) on the answer's line before the answer.
        sentence: the answer's line is one sentence that names them first and ends after the answer.
        structured: table / JSON characters on the answer's line before the answer.
        line_chars: length of the answer's line before the answer.
    """

    message: int
    lead: str
    overlap: int
    sentence: bool
    structured: int
    line_chars: int

    @property
    def score(self) -> float:
        """Key before the answer first, then a prose sentence of its own, then short and plain."""
        return (10.0 * self.overlap + 5.0 * self.sentence - 1.0 * self.structured - 0.02 * self.line_chars
                + 0.001 * self.message)


def lead_candidates(task: Task, probe: Probe, max_chars: int = 160, min_chars: int = 0) -> list[LeadCandidate]:
    """Every occurrence of the answer in the probe's evidence messages, as a :class:`LeadCandidate`."""
    wanted = _wanted(probe)
    answer = re.compile(rf"(?<!\w){re.escape(probe.answer)}(?!\w)")
    values = {probe.answer, *probe.candidates}
    out = []
    for e in probe.evidence_ids:
        text = message_text(task.messages[e])
        for m in answer.finditer(text):
            i = m.start()
            line_start = text.rfind("\n", 0, i) + 1
            line_end = text.find("\n", m.end())
            before, after = text[line_start:i], text[m.end(): len(text) if line_end < 0 else line_end]
            if not before.strip():
                continue
            start = line_start
            while i - start < min_chars and start > 0:  # reach back over whole earlier lines
                prev = text.rfind("\n", 0, start - 1) + 1
                if i - prev > max_chars or any(mentions(text[prev:start], c) for c in values):
                    break  # never beyond max_chars, never over the answer or another candidate
                start = prev
            if i - start > max_chars:
                start = i - max_chars
                while start < i and not text[start - 1].isspace():
                    start += 1  # begin on a word boundary
            lead = text[start:i]
            if not lead.strip():
                continue
            sentence = not _BREAK.search(before) and _LAST_SENTENCE_END.match(after) is not None
            overlap = sum(re.search(rf"(?<!\w){re.escape(k)}(?!\w)", before, re.IGNORECASE) is not None
                          for k in wanted)
            out.append(LeadCandidate(e, lead, overlap, sentence, _structured(before), len(before.strip())))
    return out


def verbatim_lead_in(task: Task, probe: Probe, max_chars: int = 160, min_chars: int = 0) -> str:
    """The text before the answer in its best evidence occurrence (see the module docstring).

    The occurrence is the best-scoring :class:`LeadCandidate`: a line that names the probe's key
    before the answer, best a prose sentence on a line of its own (the copyable evidence style of
    :mod:`evals.tasks.builder` writes one for every probe). The lead-in starts at the answer's line
    and reaches back over whole earlier lines while it is shorter than ``min_chars``, never over a
    line that names the answer or another candidate (the model would copy it) and never beyond
    ``max_chars``. Falls back to the probe's cloze
    prefix when no evidence message holds the answer.
    """
    found = lead_candidates(task, probe, max_chars, min_chars)
    if not found:
        return probe.cloze_prefix + " "
    return max(found, key=lambda c: c.score).lead


def probe_prompt(task: Task, probe: Probe, fmt: ProbeFormat) -> ProbePrompt:
    """The question turn, lead-in and candidate continuations of ``probe`` under ``fmt``.

    Under ``verbatim``, a hand-written task (empty ``task.generator``) whose probe has a
    ``cloze_prefix`` uses that prefix (see the module docstring).
    """
    question = ({"role": "user", "content": probe.question},) if fmt.ask_question else ()
    if fmt.lead_in == "verbatim" and (task.generator or not probe.cloze_prefix):
        lead = verbatim_lead_in(task, probe, fmt.max_lead_chars, fmt.min_lead_chars)
    elif fmt.lead_in in ("verbatim", "cloze"):  # verbatim: a hand-written task's own lead-in
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
    from evals.cache.scoring import contains_match, exact_match

    words = generated.strip().split()
    head = " ".join(words[: max(1, len(answer.split()))]).strip(" .,;:)(\"'")
    return exact_match(head, answer), contains_match(generated, answer)
