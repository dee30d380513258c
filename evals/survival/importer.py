"""Trace import from recorded agent runs (``akv-recorded/1``, JSON lines, one LLM call per line).

Schema of a recorded call (times in seconds on any common clock; tokens as the serving API
reported them)::

    {"session": "a", "program": "p1",                  program optional (default: the session)
     "start_s": 10.0, "end_s": 11.2,                    when the LLM call started and ended
     "prompt_tokens": 812, "completion_tokens": 40,     usage of the call
     "tool": "search",                                  the tool the reply called (null: the session ended)
     "tool_start_s": 11.2, "tool_end_s": 14.9,          optional; default: end_s and the next call's start
     "expected_gap_s": 3.0, "side_effect": false,       optional: the harness's hint, the tool's kind
     "text": "..."}                                     optional: the input message's literal text

Calls are grouped by session and ordered by ``start_s``. Turn k's input is the growth of the
prompt: ``prompt_k - prompt_{k-1} - completion_{k-1}`` (at least 1; turn 0: the whole prompt,
since a recording cannot tell a shared system prompt apart), its output ``completion_tokens``,
its gap ``tool_end_s - tool_start_s``. Arrivals are relative to the earliest call. The result
is an ordinary trace (``kind: "imported"``, no suggested budgets unless given).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from engine.errors import show
from evals.survival.trace import SessionSpec, Trace, TraceHeader, Turn, WorkloadError, json_lines, read_text

RECORDED_FIELDS = {"session", "program", "start_s", "end_s", "prompt_tokens", "completion_tokens", "tool",
                   "tool_start_s", "tool_end_s", "expected_gap_s", "side_effect", "text"}


def _num(raw: Mapping[str, Any], key: str, where: str, required: bool = True) -> float | None:
    v = raw.get(key)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v or v < 0 or v == float("inf"):
        raise WorkloadError(f"{where}.{key}: must be a finite number >= 0, got {show(v)}", field=f"{where}.{key}",
                            value=v)
    return float(v)


def _calls(lines: Iterable[str], name: str) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    by_session: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for where, raw in json_lines(lines, name):
        if not isinstance(raw, dict):
            raise WorkloadError(f"{where}: a recorded call must be an object, got {show(raw)}", field=where, value=raw)
        extra = set(raw) - RECORDED_FIELDS
        if extra:
            raise WorkloadError(f"{where}: unknown field {sorted(extra)[0]!r}; valid fields: "
                                f"{', '.join(sorted(RECORDED_FIELDS))}", field=where, value=sorted(extra)[0])
        sid = raw.get("session")
        if not isinstance(sid, str) or not sid:
            raise WorkloadError(f"{where}.session: must be a non-empty string, got {show(sid)}",
                                field=f"{where}.session", value=sid)
        for key in ("start_s", "end_s", "prompt_tokens", "completion_tokens"):
            _num(raw, key, where)
        if raw["end_s"] < raw["start_s"]:
            raise WorkloadError(f"{where}: end_s {raw['end_s']} is before start_s {raw['start_s']}",
                                field=f"{where}.end_s", value=raw["end_s"])
        by_session[sid].append((where, raw))
    if not by_session:
        raise WorkloadError(f"{name}: no recorded calls", field=name)
    return by_session


def import_recorded(lines: Iterable[str], name: str = "recorded") -> Trace:
    """Convert recorded calls (see the module docstring) into a trace.

    Raises:
        WorkloadError: naming ``name:line`` and the field of the first problem.
    """
    by_session = _calls(lines, name)
    t0 = min(raw["start_s"] for calls in by_session.values() for _, raw in calls)
    sessions = []
    for sid, calls in sorted(by_session.items()):
        calls.sort(key=lambda c: c[1]["start_s"])
        turns = []
        for k, (where, raw) in enumerate(calls):
            last = k == len(calls) - 1
            prev = calls[k - 1][1] if k else None
            grow = raw["prompt_tokens"] - (prev["prompt_tokens"] + prev["completion_tokens"] if prev else 0)
            tool = raw.get("tool")
            if not last and not isinstance(tool, str):
                tool = "unknown"  # a later call exists, so the reply must have waited on something
            gap = 0.0
            if not last:
                start = _num(raw, "tool_start_s", where, required=False)
                end = _num(raw, "tool_end_s", where, required=False)
                start = raw["end_s"] if start is None else start
                end = calls[k + 1][1]["start_s"] if end is None else end
                if end < start:
                    raise WorkloadError(f"{where}: the tool ends ({end}) before it starts ({start})",
                                        field=f"{where}.tool_end_s", value=end)
                gap = end - start
            turns.append(Turn(max(1, int(grow)), max(1, int(raw["completion_tokens"])), None if last else tool,
                              round(gap, 6), None if last else _num(raw, "expected_gap_s", where, required=False),
                              bool(raw.get("side_effect", False)), None,
                              raw.get("text") if isinstance(raw.get("text"), str) else None))
        first = calls[0][1]
        sessions.append(SessionSpec(sid, str(first.get("program") or sid), round(first["start_s"] - t0, 6), 0,
                                    tuple(turns)))
    return Trace(TraceHeader("imported", 0, "imported", 0, None, None, {"format": "akv-recorded/1"}),
                 tuple(sessions))


def import_recorded_file(path: str | Path) -> Trace:
    return import_recorded(read_text(path, "recorded run").splitlines(keepends=True), Path(path).name)
