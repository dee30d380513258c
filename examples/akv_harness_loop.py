"""An agent harness reduced to its request/decision loop, around a policy exported for an AKV
harness (``akv export RUN_DIR --pick best --format akv-harness --out policy.py``), against any
server that speaks the AKV wire format (``akv serve``, or AKV's SGLang server).

Each round: build the chat-completions body from the full history, turn it into the policy's
request, let the policy decide, send the body with the decision's cumulative ``drop_message`` and
``reposition``, append the reply, run the tool, append its result. The history itself is never
edited. Standard library only; docs/export.md walks through it.

The model behind ``akv serve --model tiny-random`` does not call tools, so this loop scripts one
``lookup`` call per round (a real harness executes the calls the model makes).

    python examples/akv_harness_loop.py --policy policy.py --base-url http://127.0.0.1:30000 --rounds 8

Prints one JSON line per round (the schedule sent and the usage the server reported) and a last
line with the whole history.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

SYSTEM = ("You are a logistics agent. Tools: lookup(order) returns the order's record. Answer with the "
          "warehouse that ships the order.")
TASK = "Which warehouse ships order 4821, and why was it on hold?"


def load_policy_module(path: str) -> Any:
    """The exported module (it re-checks its program on import and refuses an edited one)."""
    spec = importlib.util.spec_from_file_location("exported_policy", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def post(base_url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    """POST ``body`` to ``{base_url}/v1/chat/completions``; the decoded JSON reply."""
    request = urllib.request.Request(base_url.rstrip("/") + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def lookup(round_index: int) -> str:
    """The scripted tool: a record with numbers and names, as agent tools return them."""
    order = 4800 + round_index
    rows = "; ".join(f"line {j}: pallet P{order}-{j} qty {10 + 7 * j}" for j in range(6))
    return f"Order {order} ships from Warehouse {chr(65 + round_index % 26)}. Status H{round_index}7. {rows}"


def run(module: Any, base_url: str, model: str, rounds: int, max_tokens: int, timeout: float) -> list[dict[str, Any]]:
    """The loop; returns the final history. Prints one JSON line per round."""
    policy = module.HarnessPolicy()  # HarnessPolicy(token_counter=...) for exact token counts
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    for r in range(rounds):
        payload = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0}
        request = module.request_from_payload(payload)  # call ends: the complete tool batches so far
        decision = policy.decide(request)
        body = module.apply_decision(payload, decision)  # a copy: `messages` is not touched
        reply = post(base_url, body, timeout)
        usage = reply.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        print(json.dumps({"round": r, "messages": len(messages), "drop_message": body.get("drop_message", {}),
                          "reposition": body.get("reposition", []), "prompt_tokens": usage.get("prompt_tokens"),
                          "cached_tokens": details.get("cached_tokens"),
                          "drop_skipped_tokens": details.get("drop_skipped_tokens"),
                          "repos_tokens": details.get("repos_tokens")}), flush=True)
        text = reply["choices"][0]["message"].get("content") or ""
        call = {"id": f"call_{r}", "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"order": 4800 + r})}}
        messages = [*messages, {"role": "assistant", "content": text, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": call["id"], "name": "lookup", "content": lookup(r)}]
    return messages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", required=True, help="a module written by akv export --format akv-harness")
    parser.add_argument("--base-url", required=True, help="the server, e.g. http://127.0.0.1:30000")
    parser.add_argument("--model", default="default")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    if not Path(args.policy).is_file():
        print(f"error: {args.policy} does not exist (write it with akv export --format akv-harness)", file=sys.stderr)
        return 2
    module = load_policy_module(args.policy)
    history = run(module, args.base_url, args.model, args.rounds, args.max_tokens, args.timeout)
    print(json.dumps({"history": history}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
