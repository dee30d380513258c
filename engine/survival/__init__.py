"""Tool-gap survival: what happens to a paused agent session's KV while it waits on a tool.

Public surface::

    from engine.survival import SurvivalManager, TreeBackend, ToolGap, CostModel
    backend = TreeBackend(engine.tree, engine.geometry.bytes_per_token)
    mgr = SurvivalManager(backend, policy)        # policy: search_spaces.survival.get_survival_policy(...)
    mgr.pause("s1", backend.handle_for(items), now=t, turn=3, context_tokens=n,
              gap=ToolGap("search", expected_s=3.0))
    mgr.tick(now)                                 # revisit expired TTLs
    info = mgr.resume("s1", now)                  # waited_s, resident / host / absent tokens

Without a manager (or with the ``lru`` policy) the engine evicts exactly as before. Policies from
the literature and survival programs live in ``search_spaces.survival``; docs/survival.md
describes them.
"""

from engine.survival.backend import (
    Footprint,
    MemoryBackend,
    Paused,
    PoolState,
    ResumeInfo,
    SurvivalCounters,
)
from engine.survival.cost import CostModel
from engine.survival.log import EventLog
from engine.survival.manager import SurvivalManager
from engine.survival.policy import LRUSurvival, SurvivalPolicy
from engine.survival.tree import TreeBackend, TreeHandle, path_of
from engine.survival.types import (
    KEEP,
    Action,
    LogStats,
    SessionInfo,
    SurvivalDecision,
    SurvivalError,
    SurvivalRequest,
    SystemInfo,
    ToolGap,
    tool_call_name,
)

__all__ = [
    "KEEP",
    "Action",
    "CostModel",
    "EventLog",
    "Footprint",
    "LRUSurvival",
    "LogStats",
    "MemoryBackend",
    "Paused",
    "PoolState",
    "ResumeInfo",
    "SessionInfo",
    "SurvivalCounters",
    "SurvivalDecision",
    "SurvivalError",
    "SurvivalManager",
    "SurvivalPolicy",
    "SurvivalRequest",
    "SystemInfo",
    "ToolGap",
    "TreeBackend",
    "TreeHandle",
    "path_of",
    "tool_call_name",
]
