"""Summarizers for the text baselines: a deterministic extractive one and an LLM-backed one.

Both take the texts being summarized (the lines of a previous summary first, then one text per
message, each starting with a label such as ``[7 tool search]``) and a character budget, and
return the summary text. The extractive summarizer keeps the sentences that hold entities
(numbers, ids, capitalised names), the most entity-dense first when over budget, so it is a
generous upper bound for what a summarizing baseline can remember. The
callable summarizer sends :func:`summary_prompt` to any ``prompt -> text`` function (for
example :func:`engine_summarizer`) and caches answers per prompt, so recomputing a text
baseline's earlier checkpoints on a later turn gives the same summary without a second call.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from search_spaces.cache.program_api import entities


class Summarizer(Protocol):
    """Turns labelled texts into one summary of at most about ``budget_chars`` characters.
    ``summarize`` must be deterministic for the same arguments (text baselines rely on it)."""

    name: str

    def summarize(self, texts: Sequence[str], budget_chars: int) -> str: ...


def summary_prompt(texts: Sequence[str], budget_chars: int) -> str:
    """The instruction an LLM summarizer gets (its token count is the summary call's input)."""
    body = "\n\n".join(texts)
    return ("Summarize the earlier part of this agent session for the agent itself. Keep every number, "
            "name, id, constraint and decision, and say which decisions were later reversed. Answer in "
            f"at most {budget_chars} characters.\n\n{body}")


_LABEL = re.compile(r"^\[([^\]]*)\]\s*")
_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")


class ExtractiveSummarizer:
    """Keeps the sentences holding entities, the most entity-dense (entities per character, then
    the newest) first when over budget, printed in their original order under their labels."""

    name = "extractive"

    def summarize(self, texts: Sequence[str], budget_chars: int) -> str:
        picked: list[tuple[int, str, str, int]] = []  # (order, label, sentence, entity count)
        seen: set[str] = set()
        for text in texts:
            match = _LABEL.match(text)
            label = match.group(1) if match else ""
            body = text[match.end():] if match else text
            for sentence in _SPLIT.split(body):
                sentence = sentence.strip()
                count = len(entities(sentence))
                if sentence and count and sentence not in seen:
                    seen.add(sentence)
                    picked.append((len(picked), label, sentence, count))
        ranked = sorted(picked, key=lambda p: (-p[3] / len(p[2]), -p[0]))
        kept: list[tuple[int, str, str, int]] = []
        used = 0
        for item in ranked:
            if used + len(item[2]) + 1 > budget_chars:
                continue
            kept.append(item)
            used += len(item[2]) + 1
        lines: list[str] = []
        for _, label, sentence, _ in sorted(kept):
            if lines and lines[-1].startswith(f"[{label}] "):
                lines[-1] += " " + sentence
            else:
                lines.append(f"[{label}] {sentence}" if label else sentence)
        return "\n".join(lines)


class CallableSummarizer:
    """Summarizes through ``fn(prompt) -> text`` (an LLM), caching answers per prompt.

    Args:
        fn: called with :func:`summary_prompt`; should be deterministic (greedy decoding).
        name: recorded in the text baseline's metadata.
        cache_size: prompts remembered.
    """

    def __init__(self, fn: Callable[[str], str], name: str = "engine", cache_size: int = 4096) -> None:
        self.fn = fn
        self.name = name
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._cache_size = cache_size
        self.calls = 0

    def summarize(self, texts: Sequence[str], budget_chars: int) -> str:
        prompt = summary_prompt(texts, budget_chars)
        key = hashlib.sha256(prompt.encode("utf-8", errors="surrogatepass")).hexdigest()
        if key not in self._cache:
            self.calls += 1
            self._cache[key] = str(self.fn(prompt)).strip()
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        self._cache.move_to_end(key)
        return self._cache[key]


def engine_summarizer(engine: Any, max_tokens: int = 256) -> CallableSummarizer:
    """A summarizer that asks ``engine`` (an :class:`engine.Engine`) with greedy decoding."""

    def ask(prompt: str) -> str:
        return str(engine.chat([{"role": "user", "content": prompt}], max_tokens=max_tokens).text)

    return CallableSummarizer(ask, name="engine")
