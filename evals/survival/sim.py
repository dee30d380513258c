"""The simulator: the engine's own memory logic and the real run loop, on a model clock, without a model.

``simulate(trace, policy_spec, config) -> metrics dict`` is what the search loop calls to score a
survival policy (a name, ``{"name", "params"}`` or a program ``{"source", "params"}``). Nothing
of the engine's memory is modelled: each turn is the engine's own request path on a radix tree
whose KV payloads are sizes only (``engine.cache.accounting.Accountant``: ``engine.cache.plan`` matching,
planning, storing, eviction and the host tier of ``engine.cache.radix``), with the histories the
engine's renderer would build (``evals.survival.chat.ChatTokens``, from the calibration), the real
survival manager and policies over the real :class:`engine.survival.TreeBackend`, and the real
scheduling loop (``evals.survival.loop``). Generated tokens are ids no history contains.

Time is a :class:`evals.survival.clock.ModelClock` over the calibration's timing: a request's
start, each decode step, each finish and every swapped byte advance it; tool gaps come from the
trace. The real replay on the same clock (``ReplayConfig(clock="model")``) therefore takes the
same decisions in the same order and must report the same token metrics (a test). On the wall
clock the engine's order depends on timing; docs/survival.md states what that changes.

A policy program that fails gives ``{"ok": false, "error": reason}`` with every metric ``None``:
a failure is recorded, never turned into a score.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.cache.accounting import Accountant, DryRequest
from engine.errors import AKVError
from engine.history import Item
from engine.survival import SurvivalManager, SurvivalPolicy, TreeBackend
from evals.survival.calibration import Calibration, default_calibration
from evals.survival.chat import SessionTokens, new_tokens
from evals.survival.clock import ModelClock
from evals.survival.loop import LoopConfig, Started, run_loop
from evals.survival.metrics import METRIC_KEYS
from evals.survival.trace import SessionSpec, Trace, WorkloadError, load_trace
from search_spaces.errors import ProgramFailure
from search_spaces.sandbox import SandboxLimits
from search_spaces.survival import make_survival_policy, spec_name

UNBOUNDED = 1 << 50


@dataclass(frozen=True)
class SimConfig:
    """How to simulate.

    Attributes:
        calibration: timing, cost model and template ids (default: the stored gemma-3-270m one).
        pool_tokens / host_tokens: KV budgets in tokens (default: the trace's suggestion; no
            suggestion means an unbounded pool and no host tier).
        max_batch: generations in flight at once.
        limits: sandbox limits for program policies.
    """

    calibration: Calibration = field(default_factory=default_calibration)
    pool_tokens: int | None = None
    host_tokens: int | None = None
    max_batch: int = 4
    limits: SandboxLimits | None = None


@dataclass(eq=False)
class _SimTurn:
    request: DryRequest
    out: int
    generated: int = 0


@dataclass(eq=False)
class _Session:
    tokens: SessionTokens
    prompt: Sequence[Item] = ()


class SimExecutor:
    """The engine's request path on a dry-run tree, on a model clock (see the module docstring)."""

    def __init__(self, trace: Trace, accountant: Accountant, backend: TreeBackend, calibration: Calibration) -> None:
        self.trace = trace
        self.acc = accountant
        self.backend = backend
        self.chat = calibration.chat
        self.clock = ModelClock(calibration.timing, accountant.tree.stats)
        self._sessions: dict[str, _Session] = {}
        self._fresh = itertools.count(-1, -1)  # generated token ids: negative, in no history

    def now(self) -> float:
        return self.clock.now()

    def wait_until(self, t: float) -> None:
        self.clock.wait_until(t)

    def start(self, spec: SessionSpec, turn: int) -> Started:
        st = self._sessions.get(spec.session)
        if st is None:
            st = self._sessions[spec.session] = _Session(SessionTokens(self.chat, self.trace.header, spec))
        items = st.tokens.at(turn)
        req = self.acc.start(items)
        usage = req.usage
        self.clock.started(usage.prefill_tokens, usage.prompt_tokens)
        recompute = max(0, usage.prefill_tokens - new_tokens(st.prompt, items))
        st.prompt = items
        return Started(_SimTurn(req, spec.turns[turn].output_tokens), usage.prompt_tokens, usage.prefill_tokens,
                       recompute)

    def step(self, handles: list[Any]) -> None:
        going = [h for h in handles if h.generated + 1 < h.out]  # the others finish: no forward pass
        self.clock.stepped(len(handles), len(going), sum(h.request.usage.prompt_tokens + h.generated for h in going))
        for h in handles:
            h.generated += 1

    def generated(self, handle: Any) -> int:
        return int(handle.generated)

    def done(self, handle: Any) -> bool:
        return bool(handle.generated >= handle.out)

    def finish(self, handle: Any, last: bool) -> Any:
        self.acc.finish(handle.request, list(itertools.islice(self._fresh, handle.generated)))
        self.clock.finished()
        return None if last else self.backend.handle_for(handle.request.items)

    def pool_used(self) -> int:
        return self.acc.tree.pool_used


def resolve_budgets(trace: Trace, pool_tokens: int | None, host_tokens: int | None) -> tuple[int, int]:
    """Pool and host budgets in tokens: given, else the trace's suggestion, else unbounded / none."""
    pool = pool_tokens if pool_tokens is not None else trace.header.pool_tokens
    host = host_tokens if host_tokens is not None else trace.header.host_tokens
    for name, v in (("pool_tokens", pool), ("host_tokens", host)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise WorkloadError(f"{name} must be an integer >= 0, got {v!r}", field=name, value=v)
    return (pool if pool is not None else UNBOUNDED), (host or 0)


def failed(policy: str, mode: str, reason: str, status: str) -> dict[str, Any]:
    """The record of a run whose policy failed: every metric ``None``, with the reason."""
    return {"ok": False, "mode": mode, "policy": policy, "error": reason, "status": status,
            **dict.fromkeys(METRIC_KEYS)}


def as_trace(trace: Trace | str | Path) -> Trace:
    return trace if isinstance(trace, Trace) else load_trace(trace)


def as_policy(spec: Any, limits: SandboxLimits | None) -> tuple[SurvivalPolicy, str]:
    if hasattr(spec, "decide") and hasattr(spec, "close"):
        return spec, str(spec.name)
    return make_survival_policy(spec, limits), spec_name(spec)


def simulate(trace: Trace | str | Path, policy_spec: Any, config: SimConfig | None = None) -> dict[str, Any]:
    """Simulate ``trace`` under survival policy ``policy_spec``; returns the metrics dict.

    The dict has the six keys of ``evals.survival.metrics.METRIC_KEYS`` plus details
    (``ok``, ``policy``, token counts, swap bytes, pool occupancy, head-of-line waiting,
    decisions by action) -- the same keys as :func:`evals.survival.replay.replay`.

    Raises:
        WorkloadError: a malformed trace or budget; UnknownPolicyError / ParameterError: a bad spec.
    """
    config = config or SimConfig()
    tr = as_trace(trace)
    policy, name = as_policy(policy_spec, config.limits)
    pool_t, host_t = resolve_budgets(tr, config.pool_tokens, config.host_tokens)
    cal = config.calibration
    bpt = cal.cost.bytes_per_token
    acc = Accountant(None, bpt, min(pool_t * bpt, UNBOUNDED), host_t * bpt)
    backend = TreeBackend(acc.tree, bpt)
    manager = SurvivalManager(backend, policy, cal.cost)
    ex = SimExecutor(tr, acc, backend, cal)
    try:
        rec = run_loop(tr, ex, manager, LoopConfig(config.max_batch), acc.tree.pool_bytes)
        backend.check_integrity()
    except ProgramFailure as err:
        res = getattr(err, "result", None)
        return failed(name, "simulate", str(err), getattr(getattr(res, "status", None), "value", "error"))
    except AKVError as err:
        if isinstance(err, WorkloadError):
            raise
        return failed(name, "simulate", str(err), "invalid")
    finally:
        manager.close()
        backend.detach()
    return rec.metrics(pool_t * bpt, {
        "ok": True, "mode": "simulate", "policy": name, "trace_kind": tr.header.kind, "model": cal.model,
        **run_details(acc.tree.stats, manager, pool_t * bpt, host_t * bpt),
        "calibration": {"model": cal.model, "source": cal.cost.source, "machine": dict(cal.machine)},
    })


def run_details(stats: Any, manager: SurvivalManager, pool_bytes: int, host_bytes: int) -> dict[str, Any]:
    """The details both ``simulate`` and ``replay`` report: budgets, the tree's counters, decisions."""
    c = manager.counters
    return {"pool_bytes": pool_bytes, "host_bytes": host_bytes,
            "swap_out_bytes": stats.swap_out_bytes, "swap_in_bytes": stats.swap_in_bytes,
            "evicted_tokens": stats.evicted_tokens, "host_discarded_tokens": stats.host_discarded_tokens,
            "discarded_tokens": c.discarded_tokens, "policy_calls": c.policy_calls,
            "policy_seconds": round(c.policy_seconds, 4), "actions": dict(c.actions)}
