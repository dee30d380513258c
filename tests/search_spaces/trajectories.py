"""Agent trajectories for policy tests: a seeded generator, a hypothesis strategy and recorded ones.

Shapes cover what policies must handle: a system prompt with tool specs, the user task, assistant
turns with and without reasoning, single and parallel tool calls, tool responses full of numbers,
ids and names, user follow-ups and a final answer.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

DATA = Path(__file__).resolve().parent / "data" / "trajectories.json"
SYSTEM = "You are a logistics agent. Tools: search(q) finds orders, read(id) opens a record."
TASK = "Which warehouse ships order 4821, and why was it on hold?"
STEPS = ("call", "call2", "user", "answer")


def _tool_body(rng: random.Random, k: int, words: int) -> str:
    city = rng.choice(["Lyon", "Osaka", "Denver", "Porto", "Kumasi"])
    rows = " ".join(f"row{k}-{j} qty {rng.randint(10, 999)}" for j in range(words))
    return f"Order {4800 + k} ships from Warehouse {chr(65 + k % 26)} in {city}. Status code H{k}7. {rows}"


def build(steps: list[str], thinking: list[bool], words: int = 8, seed: int = 0) -> list[dict[str, Any]]:
    """A trajectory from a list of steps: ``call`` (one tool call + response), ``call2`` (two
    parallel calls + responses), ``user`` (a follow-up), ``answer`` (an assistant reply)."""
    rng = random.Random(seed)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    k = 0
    for i, step in enumerate(steps):
        think = thinking[i % len(thinking)] if thinking else False
        reasoning = f"Order {4800 + k} may matter; check Warehouse {chr(65 + k % 26)}." if think else None
        if step == "user":
            msgs.append({"role": "user", "content": f"Also check order {4900 + i} for customer Acme{i}."})
            continue
        if step == "answer":
            msgs.append({"role": "assistant", "content": f"Order 4821 ships from Warehouse C (step {i}).",
                         "reasoning_content": reasoning})
            continue
        calls = []
        for _ in range(2 if step == "call2" else 1):
            calls.append({"id": f"c{k}", "type": "function",
                          "function": {"name": "search", "arguments": json.dumps({"q": f"order {4800 + k}"})}})
            k += 1
        msgs.append({"role": "assistant", "content": f"Step {i}: searching.", "reasoning_content": reasoning,
                     "tool_calls": calls})
        for call in calls:
            kk = int(call["id"][1:])
            msgs.append({"role": "tool", "tool_call_id": call["id"], "name": "search",
                         "content": _tool_body(rng, kk, words)})
    return msgs


def make_trajectory(rounds: int = 8, seed: int = 0, words: int = 8) -> list[dict[str, Any]]:
    """A seeded trajectory of ``rounds`` steps (mostly tool calls)."""
    rng = random.Random(seed)
    steps = [rng.choice(["call", "call", "call", "call2", "user"]) for _ in range(rounds)] + ["answer"]
    thinking = [rng.random() < 0.6 for _ in range(rounds + 1)]
    return build(steps, thinking, words, seed)


def recorded() -> list[list[dict[str, Any]]]:
    """Trajectories recorded once (tests/search_spaces/data/trajectories.json)."""
    return json.loads(DATA.read_text())


@st.composite
def trajectories(draw: Any, max_steps: int = 12) -> tuple[list[dict[str, Any]], list[int]]:
    """A (messages, token counts) pair of random shape and random token counts."""
    steps = draw(st.lists(st.sampled_from(STEPS), min_size=1, max_size=max_steps))
    thinking = draw(st.lists(st.booleans(), min_size=1, max_size=4))
    msgs = build(steps, thinking, words=draw(st.integers(1, 6)), seed=draw(st.integers(0, 3)))
    counts = draw(st.lists(st.integers(1, 400), min_size=len(msgs), max_size=len(msgs)))
    return msgs, counts


if __name__ == "__main__":  # regenerate the recorded file (not needed to run the tests)
    DATA.write_text(json.dumps([make_trajectory(14, 1, 20), make_trajectory(20, 2, 12),
                                make_trajectory(6, 3, 40)], indent=1))
