"""Your own agent logs as tasks: OpenAI chat logs and ATIF trajectories, recognised by content.

A log file is JSON lines (one record a line; errors name the line) or one JSON document (a record,
or an array of records; errors name the record, counted from 1). Each record is one conversation (a *session*):

- **OpenAI chat log**: ``{"messages": [...], "tools": [...]?, "id": ...?}`` or a bare array of
  messages; assistant ``tool_calls`` (``{"id", "type": "function", "function": {"name",
  "arguments"}}``), ``tool`` messages answering them by ``tool_call_id``, ``reasoning_content``
  where present.
- **ATIF trajectory** (the Agent Trajectory Interchange Format, v1.x): validated with the ``atif``
  package's pydantic models (``atif.Trajectory``). Steps become messages: ``system`` and ``user``
  steps as such; an ``agent`` step as an assistant message (its ``reasoning_content`` and
  ``tool_calls``, arguments as JSON text) followed by one ``tool`` message per observation result
  that answers a call (``source_call_id``); a result of no call, and a system step's observation,
  become a user message. Text content parts are joined; other parts are refused. Embedded
  ``subagent_trajectories`` become sessions of their own (id ``<parent>/<trajectory_id>``).
- A record of the project's own schema (``id``, ``messages``, ``probes``) is a task as it stands.

One file holds one format; records are checked before anything is converted, and the first
problem is one :class:`LogError` naming the record (its line in a JSON-lines file) and the field:
wrong types, a tool call without an id or a name, a tool result answering no call, a call whose
result never comes before the next assistant turn, a message over :data:`MAX_MESSAGE_CHARS`,
nesting deeper than :data:`MAX_DEPTH`. Imported sessions carry no probes; they are split by
conversation (:func:`split_sessions`: a stable hash of the id puts ``heldout_share`` of them in
``heldout``, the rest in ``train``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.errors import MessageError, show
from engine.files import read_text
from engine.template import normalize_message
from evals.tasks.schema import Task, TaskError

FORMATS = ("tasks", "openai", "atif")
MAX_MESSAGE_CHARS = 2_000_000
"""Characters a message's content, reasoning or tool arguments may hold (a log is text, not a dump)."""
MAX_DEPTH = 64
"""JSON nesting a record may have."""
HELDOUT_SHARE = 0.25


class LogError(TaskError):
    """A log file that cannot be imported: names the record and the field."""


# ------------------------------------------------------------------ reading


def read_records(path: str | Path) -> list[tuple[str, Any]]:
    """``(where, record)`` for every record of ``path`` (``where``: ``line N`` or ``record N``).

    Raises:
        LogError: unreadable, not JSON, too deep.
    """
    p = Path(path).expanduser()
    text = read_text(p, "task file", LogError)
    stripped = text.lstrip()
    if not stripped:
        raise LogError(f"{p}: the log file is empty", field="path", value=str(p))
    whole = _loads(stripped, f"{p}", allow_fail=True)
    if whole is not _FAILED:
        if isinstance(whole, list) and whole and all(isinstance(x, Mapping) and "role" in x for x in whole):
            return [("record 1", whole)]  # one conversation written as a bare array of messages
        if not isinstance(whole, list):
            return [("line 1" if len(stripped.splitlines()) == 1 else "record 1", whole)]
        return [(f"record {k}", r) for k, r in enumerate(whole, 1)]
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            out.append((f"line {n}", _loads(line, f"{p}: line {n}")))
    return out


_FAILED = object()


def _loads(text: str, where: str, allow_fail: bool = False) -> Any:
    try:
        value = json.loads(text)
    except RecursionError:
        raise LogError(f"{where}: JSON nested too deeply (more than {MAX_DEPTH} levels)", field="json") from None
    except json.JSONDecodeError as err:
        if allow_fail:
            return _FAILED
        raise LogError(f"{where}: not JSON ({err.msg} at column {err.colno})", field="json") from None
    if _depth(value) > MAX_DEPTH:
        raise LogError(f"{where}: JSON nested too deeply (more than {MAX_DEPTH} levels)", field="json")
    return value


def _depth(value: Any) -> int:
    depth, level = 0, [value]
    while level:
        depth += 1
        nxt: list[Any] = []
        for v in level:
            if isinstance(v, Mapping):
                nxt += list(v.values())
            elif isinstance(v, list):
                nxt += v
        level = nxt
        if depth > MAX_DEPTH:
            break
    return depth


def sniff(record: Any) -> str | None:
    """The format of one record (:data:`FORMATS`), or ``None``."""
    if isinstance(record, list):
        return "openai"
    if not isinstance(record, Mapping):
        return None
    if isinstance(record.get("schema_version"), str) and "steps" in record:
        return "atif"
    if "messages" in record and "probes" in record:
        return "tasks"
    if "messages" in record:
        return "openai"
    return None


def file_format(records: Sequence[tuple[str, Any]], source: str) -> str:
    """The one format of ``records``.

    Raises:
        LogError: no records, a record of no known format, or two formats in one file.
    """
    first: tuple[str, str] | None = None
    for where, r in records:
        kind = sniff(r)
        if kind is None:
            keys = ", ".join(sorted(r)[:6]) if isinstance(r, Mapping) else type(r).__name__
            raise LogError(f"{source}: {where}: not a conversation: an OpenAI chat log has 'messages', an ATIF "
                           f"trajectory 'schema_version' and 'steps', a task 'id', 'messages' and 'probes' "
                           f"(got {keys})", field=where)
        if first is None:
            first = (kind, where)
        elif kind != first[0]:
            raise LogError(f"{source}: {where} is {_NAMES[kind]} but {first[1]} is {_NAMES[first[0]]}: one format "
                           "per file", field=where, value=kind)
    if first is None:
        raise LogError(f"{source}: no conversations in the file (an empty array)", field="path", value=source)
    return first[0]


_NAMES = {"tasks": "a task", "openai": "an OpenAI chat log", "atif": "an ATIF trajectory"}


# ------------------------------------------------------------------ converting


def load_log(path: str | Path, *, heldout_share: float = HELDOUT_SHARE) -> list[Task]:
    """Every session of the log file ``path`` as a task without probes (module docstring); a file of
    the project's own schema is read as it stands.

    Raises:
        LogError: the first problem, naming the record and the field (nothing is returned).
    """
    source = str(Path(path).expanduser())
    records = read_records(path)
    kind = file_format(records, source)
    if kind == "tasks":
        out = []
        for where, r in records:
            try:
                out.append(Task.from_record(r))
            except TaskError as err:
                raise LogError(f"{source}: {where}: {err}", field=err.field, value=err.value) from None
        return out
    sessions: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]] = []
    for k, (where, r) in enumerate(records, 1):
        convert = _from_openai if kind == "openai" else _from_atif
        try:
            sessions += convert(r, k)
        except MessageError as err:
            raise LogError(f"{source}: {where}: {err}", field=err.field, value=err.value) from None
    ids = [s[0] for s in sessions]
    dup = next((i for i in ids if ids.count(i) > 1), None)
    if dup is not None:
        raise LogError(f"{source}: two sessions have the id {dup!r}", field="id", value=dup)
    splits = split_sessions(ids, heldout_share)
    out = []
    for sid, msgs, tools, meta in sessions:
        try:
            out.append(Task(sid, tuple(msgs), (), family=f"log:{kind}", split=splits[sid], tools=tuple(tools),
                            meta={"format": kind, **meta}))
        except TaskError as err:  # for example a trajectory with no steps: no messages to judge
            raise LogError(f"{source}: session {sid!r}: {err}", field=err.field, value=err.value) from None
    return out


def is_log_task(task: Task) -> bool:
    """Whether ``task`` is an imported session (``family`` ``log:openai`` or ``log:atif``), which a
    replay judges by fidelity rather than probes."""
    return task.family.startswith("log:")


def split_sessions(ids: Sequence[str], heldout_share: float = HELDOUT_SHARE) -> dict[str, str]:
    """``id -> train | heldout``: the ``ceil(share x n)`` ids of lowest SHA-256 go to held-out (a
    session keeps its split when others are added or removed, unless it is at the boundary)."""
    if not 0.0 <= heldout_share <= 1.0:
        raise LogError(f"heldout_share must be in [0, 1], got {show(heldout_share)}", field="heldout_share",
                       value=heldout_share)
    ranked = sorted(ids, key=lambda i: hashlib.sha256(i.encode()).hexdigest())
    n_held = math.ceil(heldout_share * len(ids)) if len(ids) > 1 else 0
    return {i: ("heldout" if k < n_held else "train") for k, i in enumerate(ranked)}


def _check_size(text: Any, where: str) -> None:
    if isinstance(text, str) and len(text) > MAX_MESSAGE_CHARS:
        raise MessageError(f"{where} holds {len(text):,} characters; at most {MAX_MESSAGE_CHARS:,} a message",
                           field=where, value=f"<{len(text)} characters>")


def _from_openai(record: Any, k: int) -> list[tuple[str, list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]]:
    if isinstance(record, list):
        record = {"messages": record}
    messages, tools = record.get("messages"), record.get("tools") or []
    if not isinstance(messages, list) or not messages:
        raise MessageError(f"'messages' must be a non-empty list, got {show(messages)}", field="messages",
                           value=messages)
    if not isinstance(tools, list) or not all(isinstance(t, Mapping) for t in tools):
        raise MessageError(f"'tools' must be a list of tool objects, got {show(tools)}", field="tools", value=tools)
    sid = record.get("id", record.get("session_id", f"session-{k}"))
    if not isinstance(sid, str | int) or isinstance(sid, bool) or str(sid) == "":
        raise MessageError(f"'id' must be a non-empty string, got {show(sid)}", field="id", value=sid)
    out = [_openai_message(m, i) for i, m in enumerate(messages)]
    check_calls(out)
    return [(str(sid), out, [dict(t) for t in tools], {})]


def _openai_message(m: Any, i: int) -> dict[str, Any]:
    msg = normalize_message(m, i)
    where = f"messages[{i}]"
    _check_size(msg.get("content"), f"{where}.content")
    _check_size(msg.get("reasoning_content"), f"{where}.reasoning_content")
    for j, call in enumerate(msg.get("tool_calls") or []):
        at = f"{where}.tool_calls[{j}]"
        fn = call.get("function")
        if not isinstance(call.get("id"), str) or not call.get("id"):
            raise MessageError(f"{at} has no id: a tool result can only answer a call by its id", field=f"{at}.id",
                               value=call.get("id"))
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn.get("name"):
            raise MessageError(f"{at}.function.name must be a non-empty string, got {show(fn)}",
                               field=f"{at}.function.name", value=fn)
        args = fn.get("arguments", "")
        if not isinstance(args, str):
            try:
                args = json.dumps(args, ensure_ascii=False)
            except (TypeError, ValueError, RecursionError):
                raise MessageError(f"{at}.function.arguments must be a JSON string or object", field=f"{at}.arguments",
                                   value=show(args)) from None
        _check_size(args, f"{at}.function.arguments")
        msg["tool_calls"][j] = {"id": call["id"], "type": "function",
                                "function": {"name": fn["name"], "arguments": args}}
    if msg["role"] == "tool" and not msg.get("tool_call_id"):
        raise MessageError(f"{where} is a tool result without tool_call_id", field=f"{where}.tool_call_id")
    return msg


def check_calls(messages: Sequence[Mapping[str, Any]]) -> None:
    """Every tool result answers a call made before it and not yet answered, and every call is
    answered before the next assistant turn (a call left open by the last turn of a log is allowed).

    Raises:
        MessageError: naming the message and the call id.
    """
    open_calls: dict[str, int] = {}
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            if open_calls:
                cid, at = next(iter(open_calls.items()))
                raise MessageError(f"messages[{at}] calls {cid!r}, whose tool result never comes before the next "
                                   f"assistant turn (messages[{i}])", field=f"messages[{at}].tool_calls", value=cid)
            for call in m.get("tool_calls") or []:
                if call["id"] in open_calls:
                    raise MessageError(f"messages[{i}] repeats the tool call id {call['id']!r}",
                                       field=f"messages[{i}].tool_calls", value=call["id"])
                open_calls[call["id"]] = i
        elif m["role"] == "tool":
            answered = m.get("tool_call_id")
            if answered not in open_calls:
                raise MessageError(f"messages[{i}] answers tool call {answered!r}, which no open call of an earlier "
                                   "assistant message has", field=f"messages[{i}].tool_call_id", value=answered)
            del open_calls[answered]


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        _check_size(content, where)
        return content
    parts = []
    for j, part in enumerate(content):
        if getattr(part, "type", None) != "text":
            raise MessageError(f"{where}[{j}] is a {getattr(part, 'type', '?')} part; only text can be imported",
                               field=f"{where}[{j}]", value=getattr(part, "type", None))
        parts.append(part.text or "")
    text = "".join(parts)
    _check_size(text, where)
    return text


def _from_atif(record: Any, k: int) -> list[tuple[str, list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]]:
    import atif
    import pydantic

    try:
        traj = atif.Trajectory.model_validate(record)
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(x) for x in first["loc"]) or "trajectory"
        raise MessageError(f"not a valid ATIF trajectory: {loc}: {first['msg']}", field=loc,
                           value=show(first.get("input"))) from None
    return _trajectory(traj, traj.trajectory_id or traj.session_id or f"session-{k}")


def _trajectory(traj: Any, sid: str) -> list[tuple[str, list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]]:
    msgs: list[dict[str, Any]] = []
    for s, step in enumerate(traj.steps):
        where = f"steps[{s}]"
        text = _text(step.message, f"{where}.message")
        if step.source in ("system", "user"):
            if text or step.source == "system":
                msgs.append({"role": step.source, "content": text})
            msgs += [{"role": "user", "content": _text(r.content, f"{where}.observation.results[{j}].content")}
                     for j, r in enumerate(step.observation.results if step.observation else [])]
            continue
        names = {}
        m: dict[str, Any] = {"role": "assistant", "content": text}
        if step.reasoning_content:
            _check_size(step.reasoning_content, f"{where}.reasoning_content")
            m["reasoning_content"] = step.reasoning_content
        if step.tool_calls:
            m["tool_calls"] = []
            for j, tc in enumerate(step.tool_calls):
                try:
                    args = json.dumps(tc.arguments, ensure_ascii=False)
                except (TypeError, ValueError, RecursionError):
                    raise MessageError(f"{where}.tool_calls[{j}].arguments is not JSON", field=f"{where}.tool_calls",
                                       value=tc.tool_call_id) from None
                _check_size(args, f"{where}.tool_calls[{j}].arguments")
                m["tool_calls"].append({"id": tc.tool_call_id, "type": "function",
                                        "function": {"name": tc.function_name, "arguments": args}})
                names[tc.tool_call_id] = tc.function_name
        msgs.append(m)
        for j, r in enumerate(step.observation.results if step.observation else []):
            content = _text(r.content, f"{where}.observation.results[{j}].content")
            if r.source_call_id is not None:
                msgs.append({"role": "tool", "tool_call_id": r.source_call_id, "name": names[r.source_call_id],
                             "content": content})
            elif content:
                msgs.append({"role": "user", "content": content})
    msgs = [normalize_message(x, i) for i, x in enumerate(_answered_first(msgs))]
    check_calls(msgs)
    agent = traj.agent
    meta = {"agent": agent.name, "agent_version": agent.version, "model": agent.model_name or ""}
    out = [(sid, msgs, list(agent.tool_definitions or []), meta)]
    for sub in traj.subagent_trajectories or []:
        out += _trajectory(sub, f"{sid}/{sub.trajectory_id}")
    return out


def _answered_first(msgs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Messages with empty user turns left out (a step with neither text nor observation)."""
    for m in msgs:
        if m["role"] == "user" and not m["content"]:
            continue
        yield m


def write_suite(tasks: Sequence[Task], out: str | Path) -> Path:
    """Write imported ``tasks`` in the project's schema (JSON lines), all or nothing."""
    from evals.tasks.storage import save_jsonl

    target = Path(out).expanduser()
    tmp = target.with_name(target.name + ".tmp")
    save_jsonl(tasks, tmp)
    tmp.replace(target)
    return target
