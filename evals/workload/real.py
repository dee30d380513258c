"""The real-engine executor: turns of a trace as chat requests on an :class:`engine.Engine`, wall clock.

A session's request at turn k carries the whole history (stateless interface): the shared system
prompt, the task, and for each earlier turn the assistant's message and the tool's output. The
text is synthesized (``evals.workload.text``) with exactly the trace's token counts, unless the
trace has literal text. Each turn generates exactly ``output_tokens`` tokens greedily: the
executor ignores end-of-sequence tokens, like vLLM's ``ignore_eos`` benchmark mode, so that every
policy does the same work. The next request resends the trace's assistant text, not the
generated one, so a generated branch is never reused (it is cache garbage that eviction takes
first under a survival policy).

Recompute tokens of a turn are its prefill minus the tokens that are new to the session (the
part of its history after the longest common prefix with its previous request).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.engine import Engine, Generation
from engine.history import Item
from engine.survival import TreeBackend
from evals.workload.loop import Started
from evals.workload.text import render, vocabulary, word_ids
from evals.workload.trace import SessionSpec, Trace


def common_prefix(a: Sequence[Item], b: Sequence[Item]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Conversation:
    """Messages of one session's turns (built once per session, extended turn by turn)."""

    def __init__(self, trace: Trace, spec: SessionSpec, vocab: Sequence[str]) -> None:
        self.spec = spec
        self.vocab = vocab
        system = word_ids(trace.header.seed, 0, "system", trace.header.system_tokens, 0.0)
        self.messages: list[dict[str, Any]] = []
        if trace.header.system_tokens:
            self.messages.append({"role": "system", "content": render(system, vocab)})
        self._built = -1

    def _text(self, k: int, role: str, n: int, literal: str | None) -> str:
        if literal is not None:
            return literal
        return render(word_ids(self.spec.seed, k, role, n, 1.0 if k == 0 else 0.5), self.vocab)

    def at(self, turn: int) -> list[dict[str, Any]]:
        """The messages of the request of ``turn`` (turns must be asked for in order)."""
        while self._built < turn:
            k = self._built + 1
            t = self.spec.turns[k]
            if k == 0:
                self.messages.append({"role": "user", "content": self._text(0, "user", t.input_tokens, t.text)})
            else:
                prev = self.spec.turns[k - 1]
                self.messages.append({"role": "assistant",
                                      "content": self._text(k - 1, "assistant", prev.output_tokens, None)})
                self.messages.append({"role": "tool", "name": prev.tool,
                                      "content": self._text(k, "tool", t.input_tokens, t.text)})
            self._built = k
        return list(self.messages)


@dataclass(eq=False)
class _Turn:
    gen: Generation
    items: list[Item]


class RealExecutor:
    """Runs a trace's turns on ``engine`` (see the module docstring).

    Args:
        engine: the engine (its tree must be the one ``backend`` wraps).
        trace: the trace.
        backend: the survival backend over the engine's tree (gives pause handles).
    """

    def __init__(self, engine: Engine, trace: Trace, backend: TreeBackend) -> None:
        self.engine = engine
        self.backend = backend
        self.vocab = vocabulary(engine.tokenizer)
        self.trace = trace
        self._conv: dict[str, Conversation] = {}
        self._prev: dict[str, list[Item]] = {}
        self._t0 = time.perf_counter()
        self.prefill_samples: list[tuple[int, int, float]] = []  # (computed, prompt tokens, seconds)
        self.decode_samples: list[tuple[int, float]] = []  # (batch, seconds)
        self.finish_samples: list[float] = []

    def now(self) -> float:
        return time.perf_counter() - self._t0

    def wait_until(self, t: float) -> None:
        delay = t - self.now()
        if delay > 0:
            time.sleep(delay)

    def start(self, session: SessionSpec, turn: int) -> Started:
        conv = self._conv.setdefault(session.session, Conversation(self.trace, session, self.vocab))
        messages = conv.at(turn)
        out = session.turns[turn].output_tokens
        t0 = time.perf_counter()
        g = self.engine.start(messages, max_tokens=out, temperature=0.0)
        self.prefill_samples.append((g.usage.prefill_tokens, g.usage.prompt_tokens, time.perf_counter() - t0))
        prev = self._prev.get(session.session, [])
        shared = common_prefix(prev, g.items)
        shared_tokens = sum(1 for it in g.items[:shared] if isinstance(it, int))
        new = g.usage.prompt_tokens - shared_tokens
        self._prev[session.session] = g.items
        recompute = max(0, g.usage.prefill_tokens - new)
        return Started(_Turn(g, g.items), g.usage.prompt_tokens, g.usage.prefill_tokens, recompute)

    def step(self, handles: list[Any]) -> None:
        t0 = time.perf_counter()
        self.engine.step([h.gen for h in handles])
        self.decode_samples.append((len(handles), time.perf_counter() - t0))

    def generated(self, handle: Any) -> int:
        return len(handle.gen.tokens)

    def done(self, handle: Any) -> bool:
        return bool(handle.gen.done)

    def finish(self, handle: Any, last: bool) -> Any:
        t0 = time.perf_counter()
        self.engine.finish(handle.gen)
        self.finish_samples.append(time.perf_counter() - t0)
        return None if last else self.backend.handle_for(handle.items)

    def pool_used(self) -> int:
        return self.engine.tree.pool_used
