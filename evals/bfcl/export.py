"""Live BFCL episodes as agent logs: OpenAI chat logs and ATIF trajectories, as ``akv live`` writes them.

An episode's durable session (:mod:`evals.bfcl.live`) holds the model's replies as it wrote them
and, after each, one tool step per call that ran (its rebuilt call and its arguments by name). A
reply becomes an assistant message whose ``tool_calls`` are those calls (ids ``call_<reply>_<k>``;
BFCL's Python form ``[cd(folder='x')]`` included, which ``evals.cache.live_export`` would not read)
and whose content is the reply's text outside ``<tool_call>`` blocks (none when it was a Python-form
call list); the tool results answer them in order; the user's later turns stay user messages. The
task's tool specs are the log's tools whichever template the endpoint had. The files are
``evals.cache.live_export``'s (:data:`~evals.cache.live_export.OPENAI_FILE`,
:data:`~evals.cache.live_export.ATIF_FILE`), the ATIF made by its :func:`~evals.cache.live_export.as_atif`.

Not for: playing episodes (:mod:`evals.bfcl.live`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.durable import CheckpointStore
from engine.files import atomic_write
from engine.toolcalls import parse_tool_calls
from evals.cache.live import session_name
from evals.cache.live_export import ATIF_FILE, OPENAI_FILE, as_atif
from evals.tasks.schema import Task


def as_openai(session_id: str, state: Mapping[str, Any], tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One episode's session state as an OpenAI chat log record (see the module docstring)."""
    first = {k: v for k, v in dict(state["messages"][0]).items() if k != "tools"}
    out: list[dict[str, Any]] = [first, *({"role": m["role"], "content": m["content"]} for m in state["messages"][1:])]
    steps = [s for s in state.get("steps") or [] if s.get("status") == "done"]
    replies = 0
    for i, step in enumerate(steps):
        if step["kind"] == "message":
            out += [{"role": m["role"], "content": m.get("content") or ""} for m in step["appended"]]
        if step["kind"] != "llm":
            continue
        replies += 1
        ran = []
        for later in steps[i + 1:]:
            if later["kind"] != "tool":
                break
            ran.append(later)
        text = str(step.get("result") or "")
        content = parse_tool_calls(text, {s["tool"] for s in ran}).content if "<tool_call>" in text else \
            ("" if ran else text)
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        ids = [f"call_{replies}_{k}" for k in range(len(ran))]
        if ran:
            msg["tool_calls"] = [{"id": c, "type": "function", "function": {
                "name": s["tool"], "arguments": s["args"].get("arguments", "{}")}} for c, s in zip(ids, ran)]
        out.append(msg)
        out += [{"role": "tool", "tool_call_id": c, "name": s["tool"], "content": s.get("result") or ""}
                for c, s in zip(ids, ran)]
    return {"id": session_id, "tools": [dict(t) for t in tools], "messages": out}


def export_episodes(run_dir: str | Path, episodes: Sequence[tuple[str, Task]], model: str = "") -> tuple[Path, Path]:
    """Write the sessions of ``episodes`` (label, task) under ``run_dir`` as OpenAI logs and ATIF
    (one record each, in order; an episode with no session yet is left out)."""
    run = Path(run_dir)
    store = CheckpointStore(run / "sessions")
    records = []
    for label, task in episodes:
        name = session_name(label, task, 0)
        if store.exists(name):
            records.append(as_openai(name, store.latest(name).state, task.tools))
    openai_path, atif_path = run / OPENAI_FILE, run / ATIF_FILE
    atomic_write(openai_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode())
    atomic_write(atif_path, (json.dumps([as_atif(r, model) for r in records], indent=1, ensure_ascii=False)
                             + "\n").encode())
    return openai_path, atif_path
