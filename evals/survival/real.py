"""The real-engine executor: turns of a trace as chat requests on an :class:`engine.Engine`.

A session's request at turn k carries the whole history (``evals.survival.chat``). The text is
synthesized (``evals.survival.text``) with exactly the trace's token counts, unless the trace has
literal text. Each turn generates exactly ``output_tokens`` tokens greedily: the replay ignores
end-of-sequence tokens, like vLLM's ``ignore_eos`` benchmark mode, so that every policy does the
same work. The next request resends the trace's assistant text, not the generated one, so a
generated branch is never reused (it is cache garbage that eviction takes first under a survival
policy) -- unless the model happens to generate the words the trace then resends: such tokens are
counted (``overlap_tokens``), since the simulator cannot know them, as are turns a template stop
string ended early (``short_turns``).

Time is the wall clock, or a :class:`evals.survival.clock.ModelClock` (lockstep with the simulator).
Recompute tokens of a turn are its prefill minus the tokens that are new to the session (the
part of its history after the longest common prefix with its previous request).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.engine import Engine
from engine.history import Item
from engine.results import Generation
from engine.survival import TreeBackend
from evals.survival.chat import common_prefix, new_tokens, turn_messages
from evals.survival.clock import ModelClock
from evals.survival.loop import Started
from evals.survival.text import vocabulary
from evals.survival.trace import SessionSpec, Trace


class Conversation:
    """Messages of one session's turns (built once per session, extended turn by turn)."""

    def __init__(self, trace: Trace, spec: SessionSpec, vocab: Sequence[str]) -> None:
        self.trace = trace
        self.spec = spec
        self.vocab = vocab
        self.messages: list[dict[str, Any]] = []
        self._built = -1

    def at(self, turn: int) -> list[dict[str, Any]]:
        """The messages of the request of ``turn`` (turns must be asked for in order)."""
        while self._built < turn:
            self._built += 1
            added = turn_messages(self.trace.header, self.spec, self._built)
            self.messages.extend(m.as_chat(self.vocab) for m in added)
        return list(self.messages)


@dataclass(eq=False)
class _Session:
    conv: Conversation
    prompt: list[Item] = field(default_factory=list)  # the latest request's history
    generated: list[int] = field(default_factory=list)  # its generated tokens the tree stored


@dataclass(eq=False)
class _Turn:
    gen: Generation
    items: list[Item]
    session: _Session


class RealExecutor:
    """Runs a trace's turns on ``engine`` (see the module docstring).

    Args:
        engine: the engine (its tree must be the one ``backend`` wraps).
        trace: the trace.
        backend: the survival backend over the engine's tree (gives pause handles).
        clock: a model clock to run on instead of the wall clock.
    """

    def __init__(self, engine: Engine, trace: Trace, backend: TreeBackend, clock: ModelClock | None = None) -> None:
        self.engine = engine
        self.backend = backend
        self.vocab = vocabulary(engine.tokenizer)
        self.trace = trace
        self.clock = clock
        self._sessions: dict[str, _Session] = {}
        self._t0 = time.perf_counter()
        self.prefill_samples: list[tuple[int, int, float]] = []  # (computed, prompt tokens, seconds)
        self.decode_samples: list[tuple[int, int, int, float]] = []  # (batch, forward, context, seconds)
        self.finish_samples: list[float] = []
        self.overlap_tokens = 0
        self.short_turns = 0

    def now(self) -> float:
        return self.clock.now() if self.clock is not None else time.perf_counter() - self._t0

    def wait_until(self, t: float) -> None:
        if self.clock is not None:
            self.clock.wait_until(t)
            return
        delay = t - self.now()
        if delay > 0:
            time.sleep(delay)

    def start(self, session: SessionSpec, turn: int) -> Started:
        st = self._sessions.get(session.session)
        if st is None:
            st = self._sessions[session.session] = _Session(Conversation(self.trace, session, self.vocab))
        messages = st.conv.at(turn)
        out = session.turns[turn].output_tokens
        t0 = time.perf_counter()
        g = self.engine.start(messages, max_tokens=out, temperature=0.0, ignore_eos=True)  # the trace's length
        self.prefill_samples.append((g.usage.prefill_tokens, g.usage.prompt_tokens, time.perf_counter() - t0))
        if self.clock is not None:
            self.clock.started(g.usage.prefill_tokens, g.usage.prompt_tokens)
        if st.generated and common_prefix(st.prompt, g.items) == len(st.prompt):
            # generated tokens that the resent text repeats share the tree's nodes: the simulator cannot know them
            self.overlap_tokens += common_prefix(st.generated, g.items[len(st.prompt):])
        recompute = max(0, g.usage.prefill_tokens - new_tokens(st.prompt, g.items))
        st.prompt, st.generated = g.items, []
        return Started(_Turn(g, g.items, st), g.usage.prompt_tokens, g.usage.prefill_tokens, recompute)

    def step(self, handles: list[Any]) -> None:
        going = [h.gen for h in handles if len(h.gen.tokens) + 1 < h.gen.request.sampling.max_tokens]
        context = sum(g.usage.prompt_tokens + len(g.tokens) for g in going)
        t0 = time.perf_counter()
        self.engine.step([h.gen for h in handles])
        self.decode_samples.append((len(handles), len(going), context, time.perf_counter() - t0))
        if self.clock is not None:
            self.clock.stepped(len(handles), len(going), context)

    def generated(self, handle: Any) -> int:
        return len(handle.gen.tokens)

    def done(self, handle: Any) -> bool:
        return bool(handle.gen.done)

    def finish(self, handle: Any, last: bool) -> Any:
        t0 = time.perf_counter()
        g = handle.gen
        self.engine.finish(g)
        self.finish_samples.append(time.perf_counter() - t0)
        if self.clock is not None:
            self.clock.finished()
        if len(g.tokens) < g.request.sampling.max_tokens:
            self.short_turns += 1
        handle.session.generated = list(g.tokens[:-1])  # stored after the prompt (a branch)
        return None if last else self.backend.handle_for(handle.items)

    def pool_used(self) -> int:
        return self.backend.tree.pool_used
