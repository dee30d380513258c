"""What the fuzzer feeds, and what counts as a crash: one function per parser, shared by
``bench.fuzz`` (which runs them under atheris) and the tests (which replay every input that ever
crashed one of them, ``tests/fuzz/<target>/``).

Each target takes the raw bytes of one input. Refusing it with the parser's own error (the one-line
errors users see) is the expected outcome for hostile bytes; anything else raised is a crash, and
so is a broken invariant on an input that was accepted:

- ``openai``, ``atif``: the log importer (``evals.tasks.logs.load_log``) on the bytes as a file;
  refused with ``LogError``; an accepted file's tasks survive their own record round trip. The two
  differ in their seeds (OpenAI chat logs, ATIF trajectories), which is what the fuzzer mutates.
- ``body``: what the server does with a chat request's bytes before its engine thread: the body
  parser and the route's model (``parse_model(raw, ChatRequest, ...)``), then ``prepare_chat`` on a
  tiny-random engine (sampling values, schedule, messages, window, tokenizing); refused with
  ``RequestValidationError`` or an ``AKVError`` (the server's 400s and 413s).
- ``snapshot``: a session snapshot loaded into a tiny-random engine (``engine.snapshot.warm``);
  refused with ``SnapshotError`` leaving the engine's tree exactly as it was; an accepted one leaves
  the tree consistent (``check_integrity``).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fuzz"
"""``CORPUS/<target>/<hash>``: every input that crashed a target, replayed by the tests."""
TARGETS = ("openai", "atif", "body", "snapshot")

_TMP = Path(os.environ.get("AKV_FUZZ_TMP", "/dev/shm" if Path("/dev/shm").is_dir() else tempfile.gettempdir()))


class Broken(AssertionError):
    """An accepted input broke an invariant of its parser (a crash like any other)."""


def _log_file(data: bytes) -> None:
    from evals.tasks.logs import LogError, load_log
    from evals.tasks.schema import Task

    with tempfile.NamedTemporaryFile(dir=_TMP, suffix=".jsonl") as f:
        f.write(data)
        f.flush()
        try:
            tasks = load_log(f.name)
        except LogError:
            return
    for t in tasks:
        if Task.from_record(json.loads(json.dumps(t.to_record()))) != t:
            raise Broken(f"task {t.id!r} does not survive its own record round trip")


def _body(data: bytes, engine: Any = None) -> None:
    from fastapi.exceptions import RequestValidationError

    from engine.errors import AKVError
    from engine.server.body import parse_model
    from engine.server.limits import ServerLimits
    from engine.server.prepare import prepare_chat
    from engine.server.schemas import ChatRequest
    from engine.server.sessions import Sessions

    limits = ServerLimits()
    try:
        req = parse_model(data, ChatRequest, limits.max_json_depth)
        prepare_chat(engine if engine is not None else tiny_engine(), req, Sessions(), None, None, limits)
    except (AKVError, RequestValidationError):
        return


_ENGINE: list[Any] = []


def tiny_engine() -> Any:
    """The tiny-random engine the snapshot target loads into (one per process)."""
    if not _ENGINE:
        from engine import Engine

        _ENGINE.append(Engine.from_pretrained("tiny-random"))
    return _ENGINE[0]


def tree_state(eng: Any) -> Any:
    return sorted((n.token_start, n.n_tokens, n.state.name) for n in eng.tree.nodes()), eng.tree.pool_used


def _snapshot(data: bytes, engine: Any = None) -> None:
    from engine import SnapshotError
    from engine.snapshot import warm

    eng = engine if engine is not None else tiny_engine()
    before = tree_state(eng)
    try:
        warm(eng, data, label="fuzz")
    except SnapshotError:
        if tree_state(eng) != before:
            raise Broken("a refused snapshot changed the engine's tree") from None
        return
    eng.check_integrity()


def run(target: str, data: bytes, engine: Any = None) -> None:
    """Feed ``data`` to ``target`` (``engine``: the tiny-random engine to use, else one of this
    process); returns when it was refused or accepted as it should be, raises otherwise."""
    if target in ("openai", "atif"):
        _log_file(data)
    elif target == "body":
        _body(data, engine)
    elif target == "snapshot":
        _snapshot(data, engine)
    else:
        raise ValueError(f"unknown fuzz target {target!r}; choose from {', '.join(TARGETS)}")


def seeds(target: str, engine: Any = None) -> list[bytes]:
    """Valid inputs the fuzzer starts from (the project's sample files; a session saved by ``engine``,
    a tiny-random one by default, for ``snapshot``)."""
    docs = ROOT / "docs" / "examples"
    if target == "openai":
        return [(docs / n).read_bytes() for n in ("openai-chat.jsonl", "live-qwen-pages.openai.jsonl")]
    if target == "atif":
        return [(docs / n).read_bytes() for n in ("atif-trajectories.json", "live-qwen-pages.atif.json")]
    if target == "body":
        tools = [{"type": "function", "function": {"name": "read_page", "description": "read a page",
                                                   "parameters": {"type": "object",
                                                                  "properties": {"n": {"type": "integer"}}}}}]
        chat = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Read page 1."},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "read_page", "arguments": "{\"n\": 1}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "Page 1: the client is Tidemark."}]
        return [json.dumps(b).encode() for b in (
            {"model": "m", "messages": chat[:2], "max_tokens": 8},
            {"model": "m", "messages": chat, "tools": tools, "max_tokens": 4, "temperature": 0, "session_id": "s"},
            {"model": "m", "messages": chat, "drop_message": {"3": [3]}, "reposition": [[3, 0]], "stop": ["\n"]},
        )]
    if target == "snapshot":
        eng = engine if engine is not None else tiny_engine()
        msgs = [{"role": "user", "content": "Read page 1."}, {"role": "assistant", "content": "It says Tidemark."}]
        with tempfile.TemporaryDirectory(dir=_TMP) as d:
            eng.save_session(msgs, None, Path(d) / "s.safetensors")
            return [(Path(d) / "s.safetensors").read_bytes()]
    raise ValueError(f"unknown fuzz target {target!r}; choose from {', '.join(TARGETS)}")


def corpus(target: str) -> list[Path]:
    """The committed inputs that once crashed ``target``."""
    folder = CORPUS / target
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")) if folder.is_dir() else []
