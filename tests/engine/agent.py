"""A small synthetic agent trajectory used across engine tests."""

from __future__ import annotations


def trajectory(n_tools: int = 6, words: int = 12, thinking: bool = True) -> list[dict]:
    msgs: list[dict] = [
        {"role": "system", "content": "You are a logistics agent. Tools: search(q), read(id)."},
        {"role": "user", "content": "Which warehouse ships order 4821, and why was it on hold?"},
    ]
    for i in range(n_tools):
        msgs.append({
            "role": "assistant",
            "content": f"Step {i}: I will search.",
            "reasoning_content": (f"I should look at result {i} carefully." if thinking and i % 2 == 0 else None),
            "tool_calls": [{"id": f"c{i}", "type": "function",
                            "function": {"name": "search", "arguments": f'{{"q": "order {4800 + i}"}}'}}],
        })
        body = " ".join(f"row{i}-{j} value {(i * 37 + j) % 101}" for j in range(words))
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "name": "search",
                     "content": f"Order {4800 + i} ships from Warehouse {chr(65 + i)}. {body}"})
    return msgs
