"""The AKV engine: drop and reposition with exact semantics on a history-aware radix tree.

Public surface (other packages and outside checks rely on these names)::

    from engine import Engine
    eng = Engine.from_pretrained("gemma-3-270m")   # or "tiny-random", or a local path
    r = eng.render(messages)                        # r.token_ids, r.spans
    c = eng.chat(messages, schedule={"drop_message": {"7": [3]}, "reposition": [7]}, max_tokens=8)
    c.text, c.token_ids, c.usage                    # chat options: engine.ChatOptions (one list, every engine)

    remote = RemoteEngine("http://127.0.0.1:30000", "tiny-random")   # the same interface over HTTP
"""

from engine import settings as _settings  # noqa: F401  (switches hub access off before anything loads)
from engine.cache.accounting import Accountant
from engine.cache.plan import TokenUsage
from engine.engine import Engine
from engine.errors import (
    AKVError,
    CapacityError,
    ContextLengthError,
    MessageError,
    RemoteError,
    RemoteUnavailableError,
    ScheduleError,
    ScoringUnsupportedError,
    SnapshotError,
)
from engine.history import REPOSITION, Drop, History, Reposition, replay
from engine.interface import BatchGenerator, BatchScorer, ChatEngine, ChatOptions
from engine.layout import Layout, Rendered, Renderer
from engine.remote import RemoteEngine
from engine.results import ChatResult, ScoreResult
from engine.schedule import DropKind, DropTarget, Schedule, parse_schedule

Usage = TokenUsage

__all__ = [
    "REPOSITION",
    "AKVError",
    "Accountant",
    "BatchGenerator",
    "BatchScorer",
    "CapacityError",
    "ChatEngine",
    "ChatOptions",
    "ChatResult",
    "ContextLengthError",
    "Drop",
    "DropKind",
    "DropTarget",
    "Engine",
    "History",
    "Layout",
    "MessageError",
    "RemoteEngine",
    "RemoteError",
    "RemoteUnavailableError",
    "Rendered",
    "Renderer",
    "Reposition",
    "Schedule",
    "ScheduleError",
    "ScoreResult",
    "ScoringUnsupportedError",
    "SnapshotError",
    "TokenUsage",
    "Usage",
    "parse_schedule",
    "replay",
]
