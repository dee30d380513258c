"""Durable agent state: checkpoint a session before each step, resume after a crash, fork, restore, merge.

Public surface::

    from engine.durable import CheckpointStore, DurableSession, Tool, ToolBox
    tools = ToolBox([Tool("search", search_fn), Tool("send_email", send_fn, side_effect=True)])
    s = DurableSession.create(CheckpointStore(dir), "run-1", engine, tools, messages)
    text = s.llm(max_tokens=64)            # checkpointed before and after
    out = s.tool("search", {"q": "..."})   # side-effecting tools run at most once per call
    s = DurableSession.open(store, "run-1", engine, tools)   # after a crash: re-run the agent (event replay)
    b = s.fork("run-1-b"); s.restore(3); s.merge(b)

See ``engine.durable.session`` for the rules.
"""

from engine.durable.records import ReplayMismatchError, SideEffectError, StepKind, StepRecord, StepStatus
from engine.durable.session import DurableSession
from engine.durable.store import CheckpointStore, DurableError, Loaded
from engine.durable.tools import Tool, ToolBox, idempotency_key
from engine.files import atomic_write

__all__ = [
    "CheckpointStore",
    "DurableError",
    "DurableSession",
    "Loaded",
    "ReplayMismatchError",
    "SideEffectError",
    "StepKind",
    "StepRecord",
    "StepStatus",
    "Tool",
    "ToolBox",
    "atomic_write",
    "idempotency_key",
]
