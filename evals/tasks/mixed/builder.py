"""Rounds of a ``mixed`` trajectory: the agent's reasoning, its tool calls (one or a parallel batch)
and their responses, and where each kind planted its evidence.

Message ids of a built trajectory::

    0 system | 1 user | then per round r: assistant (reasoning + calls) | tool | tool ... (one per call)

A kind adds rounds in order (:meth:`MixedBuilder.add`) and marks evidence with :class:`Ref` s, which
become message ids once the trajectory is laid out (:meth:`MixedBuilder.ids`).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from evals.tasks.mixed.world import MixedWorld


@dataclass(frozen=True)
class Call:
    """One tool call and the response it gets."""

    name: str
    args: dict[str, Any]
    response: str


@dataclass
class Round:
    """The assistant's reasoning and its calls (several: a parallel batch)."""

    reasoning: str
    calls: list[Call] = field(default_factory=list)


@dataclass(frozen=True)
class Ref:
    """Where evidence sits: round ``round``'s assistant message (``call`` None) or its ``call``-th response."""

    round: int
    call: int | None = None


@dataclass(frozen=True)
class ProbeSpec:
    """A probe before its candidates: the question, the line its answer completes, the evidence."""

    kind: str
    question: str
    lead: str
    answer: str
    unit: str
    evidence: tuple[Ref, ...]


class MixedBuilder:
    """Builds one trajectory (module docstring).

    Args:
        split, rng: the task's split and random generator (the only source of randomness).
        system, user: the system prompt (tool list included) and the user's task.
        rounds: the number of rounds the kind is asked to write.
    """

    def __init__(self, split: str, rng: random.Random, system: str, user: str, rounds: int) -> None:
        self.split, self.rng = split, rng
        self.world = MixedWorld(split, rng)
        self.system, self.user = system, user
        self.n_rounds = rounds
        self.rounds: list[Round] = []

    def add(self, reasoning: str, *calls: Call) -> int:
        """Append a round; returns its index."""
        self.rounds.append(Round(reasoning, list(calls)))
        return len(self.rounds) - 1

    @property
    def next_round(self) -> int:
        return len(self.rounds)

    def ids(self) -> dict[Ref, int]:
        """Message id of every assistant message and tool response."""
        out: dict[Ref, int] = {}
        i = 2
        for r, rnd in enumerate(self.rounds):
            out[Ref(r)] = i
            i += 1
            for c in range(len(rnd.calls)):
                out[Ref(r, c)] = i
                i += 1
        return out

    def messages(self) -> list[dict[str, Any]]:
        msgs: list[dict[str, Any]] = [{"role": "system", "content": self.system},
                                      {"role": "user", "content": self.user}]
        for rnd in self.rounds:
            ids = [f"call_{self.rng.getrandbits(40):010x}" for _ in rnd.calls]
            msgs.append({"role": "assistant", "content": "", "reasoning_content": rnd.reasoning,
                         "tool_calls": [{"id": cid, "type": "function",
                                         "function": {"name": c.name, "arguments": json.dumps(c.args)}}
                                        for cid, c in zip(ids, rnd.calls)]})
            for cid, c in zip(ids, rnd.calls):
                msgs.append({"role": "tool", "tool_call_id": cid, "name": c.name, "content": c.response})
        return msgs
