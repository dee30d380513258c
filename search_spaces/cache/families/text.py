"""Text baselines, for comparison only: ``standard``, ``text_engineering`` and ``trim``.

They rewrite the message list instead of emitting a cache schedule. Thresholds are scaled from
the reference study (96K and 48K tokens at a 128K window) to the nominal context ``window``:

- ``standard``: summarize when the context passes ``0.75 * window`` (3072 tokens at the default
  window of 4096), keeping the newest ``keep_rounds`` rounds verbatim.
- ``text_engineering``: the same at ``0.375 * window`` (1536 tokens by default).
- ``trim``: when the context passes ``0.75 * window``, delete the oldest rounds until it is at most
  ``target_ratio * window`` (2048 tokens by default), keeping the newest ``keep_rounds``.

State is a pure function of the message list (so the text of turn n extends the text of turn n-1
unless a new summary is made at turn n): the messages are scanned in order; the head (leading
system messages and the first user message) is never edited; at each non-assistant message (a
point where a request can follow) the context size (head + current summary + kept messages) is
compared with the threshold and, when over, the messages up to the start of the newest
``keep_rounds`` rounds (a round starts at an assistant or user message; the round in progress
counts, so it is never cut and tool responses always keep their calls) are folded into the
summary (the previous summary's lines plus those messages are summarized again). The summary sits right
after the head as a user message. Summary text is counted with ``counter`` (the crude estimator by
default); original messages keep the request's token counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from search_spaces.cache.policy import Policy, TextProposal, TokenCounter
from search_spaces.cache.program_api import Message, estimate_tokens
from search_spaces.cache.request import PolicyKind, Request
from search_spaces.cache.summarize import ExtractiveSummarizer, Summarizer, summary_prompt
from search_spaces.params import as_dict, check_range, resolve

STANDARD_RATIO = 0.75
TEXT_ENGINEERING_RATIO = 0.375


@dataclass(frozen=True)
class SummaryParams:
    """Parameters of ``standard`` / ``text_engineering``: threshold = ``threshold_ratio * window``;
    the summary may use ``summary_ratio * window`` tokens (4 characters each)."""

    window: int = 4096
    threshold_ratio: float = STANDARD_RATIO
    keep_rounds: int = 2
    summary_ratio: float = 0.125

    def __post_init__(self) -> None:
        check_range("text", "window", self.window, 16, 100_000_000)
        check_range("text", "threshold_ratio", self.threshold_ratio, 0.01, 1.0)
        check_range("text", "keep_rounds", self.keep_rounds, 1, 10_000)
        check_range("text", "summary_ratio", self.summary_ratio, 0.001, 1.0)


@dataclass(frozen=True)
class TrimParams:
    """Parameters of ``trim``: trim when over ``threshold_ratio * window`` down to ``target_ratio * window``."""

    window: int = 4096
    threshold_ratio: float = STANDARD_RATIO
    target_ratio: float = 0.5
    keep_rounds: int = 2

    def __post_init__(self) -> None:
        check_range("trim", "window", self.window, 16, 100_000_000)
        check_range("trim", "threshold_ratio", self.threshold_ratio, 0.01, 1.0)
        check_range("trim", "target_ratio", self.target_ratio, 0.0, self.threshold_ratio)
        check_range("trim", "keep_rounds", self.keep_rounds, 1, 10_000)


def _head_end(messages: Sequence[Mapping[str, Any]]) -> int:
    i = 0
    while i < len(messages) and messages[i].get("role") in ("system", "developer"):
        i += 1
    return i + 1 if i < len(messages) and messages[i].get("role") == "user" else i


def _round_starts(messages: Sequence[Mapping[str, Any]], lo: int, hi: int) -> list[int]:
    return [i for i in range(lo, hi + 1) if messages[i].get("role") in ("assistant", "user")]


def _label(i: int, m: Mapping[str, Any]) -> str:
    v = Message(i, m, 0)
    return f"[{i} {v.role}{' ' + v.name if v.name else ''}] {v.text}"


class _TextPolicy(Policy):
    kind = PolicyKind.TEXT

    def __init__(self, counter: TokenCounter | None) -> None:
        super().__init__()
        self.counter: TokenCounter = counter or estimate_tokens
        self.counter_name = "estimate" if counter is None else getattr(counter, "__name__", "custom")

    def count(self, message: Mapping[str, Any]) -> int:
        return int(self.counter([message])[0])


class Summarize(_TextPolicy):
    """``standard`` (threshold 0.75 * window) or ``text_engineering`` (0.375 * window).

    Args:
        name: ``"standard"`` or ``"text_engineering"`` (sets the default ``threshold_ratio``).
        summarizer: default :class:`ExtractiveSummarizer`; any :class:`Summarizer` works.
        counter: token counter for summary text (default: the crude estimator).
        **params: :class:`SummaryParams` fields.
    """

    def __init__(self, name: str = "standard", summarizer: Summarizer | None = None,
                 counter: TokenCounter | None = None, **params: Any) -> None:
        super().__init__(counter)
        self.name = name
        default = TEXT_ENGINEERING_RATIO if name == "text_engineering" else STANDARD_RATIO
        self.p = resolve(SummaryParams, {"threshold_ratio": default, **params}, name)
        self.summarizer: Summarizer = summarizer or ExtractiveSummarizer()

    @property
    def params(self) -> dict[str, Any]:
        return as_dict(self.p)

    def propose(self, request: Request) -> TextProposal:
        msgs, tok, p = request.messages, request.token_counts, self.p
        head = _head_end(msgs)
        threshold = int(p.threshold_ratio * p.window)
        budget_chars = 4 * int(p.summary_ratio * p.window)
        head_tokens = sum(tok[:head])
        cut, kept, summary, summary_tokens = head, 0, "", 0
        summary_msg: dict[str, Any] = {}
        events: list[dict[str, Any]] = []
        for t in range(head, len(msgs)):
            kept += tok[t]
            if msgs[t].get("role") == "assistant" or head_tokens + summary_tokens + kept <= threshold:
                continue
            starts = _round_starts(msgs, cut, t)
            new_cut = starts[-p.keep_rounds] if len(starts) >= p.keep_rounds else cut
            if new_cut <= cut:
                continue
            texts = summary.splitlines() + [_label(i, msgs[i]) for i in range(cut, new_cut)]
            summary = self.summarizer.summarize(texts, budget_chars)
            summary_msg = {"role": "user", "content": f"Summary of messages {head}-{new_cut - 1}:\n{summary}"}
            summary_tokens = self.count(summary_msg)
            events.append({"trigger": t, "summarized_ids": list(range(cut, new_cut)), "first_edited": head,
                           "input_tokens": self.count({"role": "user", "content": summary_prompt(texts, budget_chars)}),
                           "output_tokens": summary_tokens})
            kept -= sum(tok[cut:new_cut])
            cut = new_cut
        plain = request.plain_messages()
        messages = plain[:head] + ([summary_msg] if events else []) + plain[cut:]
        last = events[-1] if events else {}
        meta = {"policy": self.name, "window": p.window, "threshold": threshold, "keep_rounds": p.keep_rounds,
                "summarizer": self.summarizer.name, "token_counter": self.counter_name,
                "summarized_ids": list(range(head, cut)), "summary": summary if events else None,
                "first_edited": head if events else None, "summary_input_tokens": last.get("input_tokens"),
                "summary_output_tokens": last.get("output_tokens"), "events": events}
        return TextProposal(messages, meta)


class Trim(_TextPolicy):
    """``trim``: delete the oldest rounds from the text (see the module docstring)."""

    name = "trim"

    def __init__(self, counter: TokenCounter | None = None, **params: Any) -> None:
        super().__init__(counter)
        self.p = resolve(TrimParams, params, "trim")

    @property
    def params(self) -> dict[str, Any]:
        return as_dict(self.p)

    def propose(self, request: Request) -> TextProposal:
        msgs, tok, p = request.messages, request.token_counts, self.p
        head = _head_end(msgs)
        threshold, target = int(p.threshold_ratio * p.window), int(p.target_ratio * p.window)
        head_tokens = sum(tok[:head])
        cut, kept = head, 0
        events: list[dict[str, Any]] = []
        for t in range(head, len(msgs)):
            kept += tok[t]
            if msgs[t].get("role") == "assistant" or head_tokens + kept <= threshold:
                continue
            starts = [s for s in _round_starts(msgs, cut, t) if s > cut]
            options = [s for k, s in enumerate(starts) if len(starts) - k >= p.keep_rounds]
            if not options:
                continue
            chosen = next((s for s in options if head_tokens + sum(tok[s:t + 1]) <= target), options[-1])
            events.append({"trigger": t, "removed_ids": list(range(cut, chosen)), "first_edited": head})
            kept = sum(tok[chosen:t + 1])
            cut = chosen
        plain = request.plain_messages()
        meta = {"policy": self.name, "window": p.window, "threshold": threshold, "target": target,
                "keep_rounds": p.keep_rounds, "summarizer": None, "token_counter": self.counter_name,
                "removed_ids": list(range(head, cut)), "first_edited": head if events else None, "events": events}
        return TextProposal(plain[:head] + plain[cut:], meta)


def summary_space(trial: Any) -> dict[str, Any]:
    """Optuna space of the summarizing baselines (the threshold stays the family's defining value)."""
    return {"keep_rounds": trial.suggest_int("keep_rounds", 1, 6),
            "summary_ratio": trial.suggest_float("summary_ratio", 0.03, 0.25, log=True)}


def trim_space(trial: Any) -> dict[str, Any]:
    """Optuna space of ``trim``."""
    return {"keep_rounds": trial.suggest_int("keep_rounds", 1, 6),
            "target_ratio": trial.suggest_float("target_ratio", 0.2, 0.7)}
