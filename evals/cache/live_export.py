"""``akv live`` episodes as agent logs: OpenAI chat logs and ATIF trajectories another run can judge.

A live run keeps each episode as a durable session (``RUN_DIR/sessions/<id>``, ``engine.durable``):
its first messages and the steps that followed, each with the messages it appended. An episode's
conversation is those messages in order; the assistant's replies are the text the model wrote, with
``<tool_call>`` blocks (or, for declared tools, a bare call object) read back into OpenAI
``tool_calls`` (``engine.toolcalls.parse_tool_calls``), ids ``call_<turn>_<k>``, and the tool results
that follow answer them in order. Written by :func:`export_run` (and at the end of ``akv live``):

- ``RUN_DIR/episodes.openai.jsonl``: one conversation a line (``id``, ``tools``, ``messages``);
- ``RUN_DIR/episodes.atif.json``: an array of ATIF v1.8 trajectories (validated with ``atif``),
  agent ``akv-live``, the served model's name as ``model_name``.

Both import back through ``evals.tasks.logs`` to the same messages, so ``akv eval --suite
RUN_DIR/episodes.atif.json`` judges another policy's fidelity on what this run's model did.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.durable import CheckpointStore
from engine.files import atomic_write
from engine.toolcalls import parse_tool_calls

OPENAI_FILE = "episodes.openai.jsonl"
ATIF_FILE = "episodes.atif.json"


def session_messages(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The conversation of one session state: its messages, then what each finished step appended."""
    out = [dict(m) for m in state.get("messages") or []]
    for step in state.get("steps") or []:
        if step.get("status") == "done":
            out += [dict(m) for m in step.get("appended") or []]
    return out


def as_openai(session_id: str, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One episode as an OpenAI chat log record (module docstring)."""
    first = dict(messages[0])
    tools = list(first.pop("tools", None) or [])
    names = {t.get("function", {}).get("name") for t in tools} - {None}
    out: list[dict[str, Any]] = [first]
    pending: list[str] = []
    turn = 0
    for m in messages[1:]:
        role = m["role"]
        if role == "assistant":
            turn += 1
            parsed = parse_tool_calls(m.get("content") or "", names)
            msg: dict[str, Any] = {"role": "assistant", "content": parsed.content}
            if parsed.tool_calls:
                msg["tool_calls"] = [{"id": f"call_{turn}_{k}", "type": "function",
                                      "function": {"name": c["function"]["name"],
                                                   "arguments": c["function"]["arguments"]}}
                                     for k, c in enumerate(parsed.tool_calls)]
                pending = [c["id"] for c in msg["tool_calls"]]
            out.append(msg)
        elif role == "tool":
            if not pending:  # a result of no parsed call (a call the parser refused): kept as an observation
                out.append({"role": "user", "content": f"[tool {m.get('name') or 'result'}] {m.get('content') or ''}"})
                continue
            out.append({"role": "tool", "tool_call_id": pending.pop(0), "name": m.get("name") or "",
                        "content": m.get("content") or ""})
        else:
            out.append({k: v for k, v in m.items() if k in ("role", "content")})
    return {"id": session_id, "tools": tools, "messages": out}


def as_atif(record: Mapping[str, Any], model: str = "") -> dict[str, Any]:
    """An OpenAI chat log record (:func:`as_openai`) as an ATIF v1.8 trajectory, validated."""
    import atif

    steps: list[dict[str, Any]] = []
    for m in record["messages"]:
        if m["role"] in ("system", "user"):
            steps.append({"source": m["role"], "message": m.get("content") or ""})
        elif m["role"] == "assistant":
            step: dict[str, Any] = {"source": "agent", "message": m.get("content") or ""}
            if m.get("tool_calls"):
                step["tool_calls"] = [{"tool_call_id": c["id"], "function_name": c["function"]["name"],
                                       "arguments": _arguments(c["function"]["arguments"])}
                                      for c in m["tool_calls"]]
            steps.append(step)
        else:  # a tool result: an observation of the agent step that called it
            steps[-1].setdefault("observation", {"results": []})["results"].append(
                {"source_call_id": m["tool_call_id"], "content": m.get("content") or ""})
    for k, s in enumerate(steps, 1):
        s["step_id"] = k
    doc = {"schema_version": "ATIF-v1.8", "trajectory_id": record["id"],
           "agent": {"name": "akv-live", "version": "1", "model_name": model or None,
                     "tool_definitions": record.get("tools") or None}, "steps": steps}
    return atif.Trajectory.model_validate(doc).to_json_dict()


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {"raw": text}
    return value if isinstance(value, dict) else {"value": value}


def export_run(run_dir: str | Path, model: str = "") -> tuple[Path, Path]:
    """Write a live run's episodes as :data:`OPENAI_FILE` and :data:`ATIF_FILE` in ``run_dir``."""
    run = Path(run_dir)
    store = CheckpointStore(run / "sessions")
    records = []
    for d in sorted(p for p in (run / "sessions").iterdir() if p.is_dir()):
        loaded = store.latest(d.name)
        records.append(as_openai(d.name, session_messages(loaded.state)))
    openai_path, atif_path = run / OPENAI_FILE, run / ATIF_FILE
    atomic_write(openai_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode())
    atomic_write(atif_path, (json.dumps([as_atif(r, model) for r in records], indent=1, ensure_ascii=False)
                             + "\n").encode())
    return openai_path, atif_path


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m evals.cache.live_export", description=__doc__.splitlines()[0])
    p.add_argument("run_dir", help="an akv live run directory")
    p.add_argument("--model", default="", help="the served model's name, written as the ATIF model_name")
    args = p.parse_args(argv)
    a, b = export_run(args.run_dir, args.model)
    print(f"wrote {a} and {b}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
