"""Workload traces: concurrent agent sessions with turns, context growth and tool gaps (JSON lines).

File layout (``akv-workload/1``), one JSON object per line::

    {"format": "akv-workload/1", "kind": "tool-heavy", "seed": 0, "source": "generated",
     "system_tokens": 64, "pool_tokens": 12000, "host_tokens": 3000, "distributions": {...}}
    {"session": "s000", "program": "p000", "arrival_s": 0.0, "seed": 17, "turns": [
        {"input_tokens": 60, "output_tokens": 12, "tool": "python", "gap_s": 0.41,
         "expected_gap_s": 0.4, "side_effect": false, "relevance": 0.83},
        ...,
        {"input_tokens": 140, "output_tokens": 9, "tool": null, "gap_s": 0.0, ...}]}

A session's turn k is one LLM call: it appends ``input_tokens`` of text (turn 0: the task; turn
k > 0: the output of the tool called at the end of turn k - 1), generates ``output_tokens``, and,
unless it is the last turn, calls ``tool``, which takes ``gap_s`` seconds. ``expected_gap_s`` is
what the harness tells the engine about that pause (``null``: unknown). ``relevance`` in [0, 1]
is the similarity of the turn's input to the session's task (the intent stand-in; ``null``:
unknown). ``text`` (optional) is the input's literal text; without it the replay synthesizes
``input_tokens`` single-token words from ``seed``. ``pool_tokens`` / ``host_tokens`` in the
header are the suggested KV budgets (``null``: unbounded / no host tier).

Loading validates everything and reports the line and field of the first problem.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine import files
from engine.errors import AKVError, show

FORMAT = "akv-workload/1"


class WorkloadError(AKVError):
    """A trace, recorded run or workload option that does not follow the documented schema."""


def read_text(path: str | Path, what: str) -> str:
    """:func:`engine.files.read_text` raising :class:`WorkloadError`."""
    return files.read_text(path, what, WorkloadError)


@dataclass(frozen=True)
class Turn:
    """One LLM call of a session (see the module docstring)."""

    input_tokens: int
    output_tokens: int
    tool: str | None = None
    gap_s: float = 0.0
    expected_gap_s: float | None = None
    side_effect: bool = False
    relevance: float | None = None
    text: str | None = None

    def wire(self) -> dict[str, Any]:
        out = {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens, "tool": self.tool,
               "gap_s": self.gap_s, "expected_gap_s": self.expected_gap_s, "side_effect": self.side_effect,
               "relevance": self.relevance}
        if self.text is not None:
            out["text"] = self.text
        return out


@dataclass(frozen=True)
class SessionSpec:
    """One agent session: when it arrives and its turns."""

    session: str
    program: str
    arrival_s: float
    seed: int
    turns: tuple[Turn, ...]

    @property
    def context_tokens(self) -> int:
        """Content tokens of its history at its last turn (template tokens excluded)."""
        return sum(t.input_tokens for t in self.turns) + sum(t.output_tokens for t in self.turns[:-1])

    def wire(self) -> dict[str, Any]:
        return {"session": self.session, "program": self.program, "arrival_s": self.arrival_s, "seed": self.seed,
                "turns": [t.wire() for t in self.turns]}


@dataclass(frozen=True)
class TraceHeader:
    """The trace's first line: how it was made and the suggested budgets."""

    kind: str
    seed: int = 0
    source: str = "generated"
    system_tokens: int = 0
    pool_tokens: int | None = None
    host_tokens: int | None = None
    distributions: Mapping[str, Any] = field(default_factory=dict)

    def wire(self) -> dict[str, Any]:
        return {"format": FORMAT, "kind": self.kind, "seed": self.seed, "source": self.source,
                "system_tokens": self.system_tokens, "pool_tokens": self.pool_tokens,
                "host_tokens": self.host_tokens, "distributions": dict(self.distributions)}


@dataclass(frozen=True)
class Trace:
    header: TraceHeader
    sessions: tuple[SessionSpec, ...]

    def __post_init__(self) -> None:
        ids = [s.session for s in self.sessions]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise WorkloadError(f"session id {dup!r} appears twice", field="session", value=dup)

    @property
    def n_turns(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    def head(self, n: int) -> Trace:
        """The first ``n`` sessions (by arrival)."""
        return replace(self, sessions=tuple(sorted(self.sessions, key=lambda s: (s.arrival_s, s.session))[:n]))


# ---------------------------------------------------------------------- validation

def _fail(where: str, message: str, value: Any = None) -> WorkloadError:
    return WorkloadError(f"{where}: {message}", field=where, value=value)


def _int(raw: Mapping[str, Any], key: str, where: str, low: int = 0) -> int:
    v = raw.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise _fail(f"{where}.{key}", f"must be an integer >= {low}, got {show(v)}", v)
    return v


def _opt(raw: Mapping[str, Any], key: str, where: str, low: float = 0.0, high: float = math.inf) -> float | None:
    v = raw.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not low <= v <= high:
        raise _fail(f"{where}.{key}", f"must be a finite number in [{low:g}, {high:g}], got {show(v)}", v)
    return float(v)


def _num(raw: Mapping[str, Any], key: str, where: str, default: float | None = None) -> float:
    v = _opt(raw, key, where)
    if v is None:
        if default is None:
            raise _fail(f"{where}.{key}", "is required (a finite number >= 0)")
        return default
    return v


def parse_turn(raw: Any, where: str, last: bool) -> Turn:
    if not isinstance(raw, Mapping):
        raise _fail(where, f"must be an object, got {show(raw)}", raw)
    extra = set(raw) - {"input_tokens", "output_tokens", "tool", "gap_s", "expected_gap_s", "side_effect",
                        "relevance", "text"}
    if extra:
        raise _fail(where, f"unknown field {sorted(extra)[0]!r}", sorted(extra)[0])
    tool = raw.get("tool")
    if last and tool is not None:
        raise _fail(f"{where}.tool", f"the last turn ends the session and calls no tool, got {show(tool)}", tool)
    if not last and (not isinstance(tool, str) or not 0 < len(tool) <= 128):
        raise _fail(f"{where}.tool", f"every turn but the last calls a tool (a non-empty name), got {show(tool)}",
                    tool)
    side = raw.get("side_effect", False)
    if not isinstance(side, bool):
        raise _fail(f"{where}.side_effect", f"must be a boolean, got {show(side)}", side)
    text = raw.get("text")
    if text is not None and not isinstance(text, str):
        raise _fail(f"{where}.text", f"must be a string, got {show(text)}", text)
    return Turn(_int(raw, "input_tokens", where, 1), _int(raw, "output_tokens", where, 1), tool,
                _num(raw, "gap_s", where, 0.0 if last else None), _opt(raw, "expected_gap_s", where), side,
                _opt(raw, "relevance", where, high=1.0), text)


def parse_session(raw: Any, where: str) -> SessionSpec:
    if not isinstance(raw, Mapping):
        raise _fail(where, f"must be an object, got {show(raw)}", raw)
    extra = set(raw) - {"session", "program", "arrival_s", "seed", "turns"}
    if extra:
        raise _fail(where, f"unknown field {sorted(extra)[0]!r}", sorted(extra)[0])
    sid = raw.get("session")
    if not isinstance(sid, str) or not 0 < len(sid) <= 200:
        raise _fail(f"{where}.session", f"must be a non-empty string, got {show(sid)}", sid)
    program = raw.get("program", sid)
    if not isinstance(program, str) or not program:
        raise _fail(f"{where}.program", f"must be a non-empty string, got {show(program)}", program)
    turns = raw.get("turns")
    if not isinstance(turns, list) or not turns:
        raise _fail(f"{where}.turns", f"must be a non-empty list, got {show(turns)}", turns)
    parsed = tuple(parse_turn(t, f"{where}.turns[{i}]", i == len(turns) - 1) for i, t in enumerate(turns))
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise _fail(f"{where}.seed", f"must be an integer, got {show(seed)}", seed)
    return SessionSpec(sid, program, _num(raw, "arrival_s", where), seed, parsed)


def parse_header(raw: Any, where: str) -> TraceHeader:
    if not isinstance(raw, Mapping) or raw.get("format") != FORMAT:
        got = raw.get("format") if isinstance(raw, Mapping) else raw
        raise _fail(f"{where}.format", f"the first line must be a header with format {FORMAT!r}, got {show(got)}", got)
    kind = raw.get("kind")
    if not isinstance(kind, str) or not kind:
        raise _fail(f"{where}.kind", f"must be a non-empty string, got {show(kind)}", kind)
    budgets = {}
    for key in ("pool_tokens", "host_tokens"):
        budgets[key] = None if raw.get(key) is None else _int(raw, key, where, 1 if key == "pool_tokens" else 0)
    dist = raw.get("distributions", {})
    if not isinstance(dist, Mapping):
        raise _fail(f"{where}.distributions", f"must be an object, got {show(dist)}", dist)
    return TraceHeader(kind, raw.get("seed", 0) if isinstance(raw.get("seed"), int) else 0,
                       str(raw.get("source", "generated")), _int(raw, "system_tokens", where) if "system_tokens"
                       in raw else 0, budgets["pool_tokens"], budgets["host_tokens"], dict(dist))


def json_lines(lines: Iterable[str], name: str) -> Iterator[tuple[str, Any]]:
    """``(name:line, parsed value)`` for every non-blank line (raises :class:`WorkloadError` on
    a line that is not JSON)."""
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{name}:{i}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as err:
            raise _fail(where, f"not JSON ({err.msg})") from None
        yield where, raw


def parse_trace(lines: Iterable[str], name: str = "trace") -> Trace:
    """Parse the lines of a trace file.

    Raises:
        WorkloadError: naming ``name:line`` and the field of the first problem.
    """
    header: TraceHeader | None = None
    sessions = []
    for where, raw in json_lines(lines, name):
        if header is None:
            header = parse_header(raw, where)
        else:
            sessions.append(parse_session(raw, where))
    if header is None:
        raise _fail(name, "empty trace (no header line)")
    if not sessions:
        raise _fail(name, "the trace has no sessions")
    return Trace(header, tuple(sessions))


def load_trace(path: str | Path) -> Trace:
    """Read and validate a trace file (raises :class:`WorkloadError`)."""
    return parse_trace(read_text(path, "trace").splitlines(keepends=True), Path(path).name)


def save_trace(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` as JSON lines (atomically: a temporary file, then a rename)."""
    p = Path(path)
    lines = [json.dumps(trace.header.wire()), *(json.dumps(s.wire()) for s in trace.sessions)]
    files.atomic_write(p, ("\n".join(lines) + "\n").encode("utf-8"))
    return p
