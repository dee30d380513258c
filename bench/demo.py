"""A short engine demo: one agent session, turn by turn, with and without a rolling drop.

Run ``python -m bench.demo [--model gemma-3-270m]``. It prints per-turn usage for the full
cache and for a rolling drop that keeps the last 2 tool responses, and writes the table to
``runs/demo/report.json``. Not a benchmark (see ``python -m bench.engine_speed``).
"""

from __future__ import annotations

import argparse
import time

from bench import write_result
from engine.engine import Engine

MEASURES = ["engine"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""


def _session(n_tools: int) -> list[dict]:
    msgs: list[dict] = [
        {"role": "system", "content": "You are a support agent with a search tool."},
        {"role": "user", "content": "Find where order 4821 ships from."},
    ]
    for i in range(n_tools):
        msgs.append({"role": "assistant", "content": f"Searching page {i}.",
                     "tool_calls": [{"function": {"name": "search", "arguments": {"page": i}}}]})
        rows = " ".join(f"order {4800 + j} ships from Warehouse {chr(65 + (i + j) % 26)}." for j in range(8))
        msgs.append({"role": "tool", "name": "search", "content": rows})
    return msgs


def _rolling(n_msgs: int, keep: int) -> dict:
    tools = list(range(3, n_msgs, 2))
    drops = {str(t): [tools[j - keep]] for j, t in enumerate(tools) if j >= keep}
    return {"drop_message": drops}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--tools", type=int, default=6)
    parser.add_argument("--out", default="runs/demo/report.json")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    eng = Engine.from_pretrained(args.model)
    print(f"loaded {args.model} in {time.perf_counter() - t0:.1f}s")
    msgs = _session(args.tools)
    rows = []
    for policy, keep in (("full", None), ("rolling_drop_k2", 2)):
        for turn in range(4, len(msgs) + 1, 2):
            sched = _rolling(turn, keep) if keep else None
            t = time.perf_counter()
            r = eng.chat(msgs[:turn], sched, max_tokens=8)
            rows.append({"policy": policy, "turn": turn, **r.usage.as_dict(),
                         "seconds": round(time.perf_counter() - t, 3), "text": r.text})
            u = r.usage
            print(f"{policy:16s} turn {turn:2d}  prompt {u.prompt_tokens:5d}  prefill {u.prefill_tokens:5d}  "
                  f"cached {u.cached_tokens:5d}  dropped {u.drop_skipped_tokens:5d}  {rows[-1]['seconds']:.2f}s")
    eng.check_integrity()
    write_result(args.out, {"model": args.model, "rows": rows}, measures=MEASURES)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
