"""The discrete-event simulator: the same loop, manager and policies as the real replay, on a model clock.

``simulate(trace, policy_spec, config) -> metrics dict`` is what the search loop calls to score a
survival policy (a name, ``{"name", "params"}`` or a program ``{"source", "params"}``) at cluster
scale. Time advances only by modeled work: a turn's start costs the swap-in of its host KV plus
the prefill of its recomputed and new tokens (``CostModel.t_prefill``), each decode step
``CostModel.t_decode(batch)``, each turn's end ``Calibration.finish_s``; tool gaps come from the
trace. Memory is ``evals.workload.simpool`` (a session-granular model of the radix tree).
Scheduling (``evals.workload.loop``), the survival manager and the policies are the real ones.

A policy program that fails gives ``{"ok": false, "error": reason}`` with every metric ``None``:
a failure is recorded, never turned into a score.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import AKVError
from engine.survival import SurvivalManager, SurvivalPolicy
from evals.workload.calibrate import Calibration, default_calibration
from evals.workload.loop import LoopConfig, Started, run_loop
from evals.workload.metrics import METRIC_KEYS
from evals.workload.simpool import SimPool
from evals.workload.trace import SessionSpec, Trace, WorkloadError, load_trace
from search_spaces.errors import ProgramFailure
from search_spaces.sandbox import SandboxLimits
from search_spaces.survival import make_survival_policy, spec_name

UNBOUNDED = 1 << 50


@dataclass(frozen=True)
class SimConfig:
    """How to simulate.

    Attributes:
        calibration: speeds and template sizes (default: this machine's gemma-3-270m measurement).
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
    session: str
    out: int
    generated: int = 0


class SimExecutor:
    """Model-clock executor over a :class:`SimPool` (see the module docstring)."""

    def __init__(self, trace: Trace, pool: SimPool, calibration: Calibration) -> None:
        self.trace = trace
        self.pool = pool
        self.cal = calibration
        self.clock = 0.0
        self._prompt: dict[str, int] = {}

    def now(self) -> float:
        return self.clock

    def wait_until(self, t: float) -> None:
        self.clock = max(self.clock, t)

    def prompt_tokens(self, spec: SessionSpec, turn: int) -> int:
        tpl, sys_n = self.cal.template, self.trace.header.system_tokens
        n = (sys_n + tpl.system + tpl.first if sys_n else tpl.first_no_system) + spec.turns[0].input_tokens
        for k in range(1, turn + 1):
            n += spec.turns[k - 1].output_tokens + spec.turns[k].input_tokens + tpl.turn
        return n

    def start(self, spec: SessionSpec, turn: int) -> Started:
        prompt = self.prompt_tokens(spec, turn)
        shared_new = 0
        if turn == 0:
            sys_n = self.trace.header.system_tokens
            shared = sys_n + self.cal.template.system if sys_n else 0
            shared_new = self.pool.share(shared)  # the first request computes the shared system prompt
            own_new = prompt - shared
        else:
            own_new = prompt - self._prompt[spec.session]
        self._prompt[spec.session] = prompt
        b = self.pool.begin(spec.session, own_new, self.clock)
        compute = b.recompute_tokens + own_new + shared_new
        cost = self.cal.cost
        self.clock += cost.t_swap(b.swapped_in_bytes) + cost.t_prefill(compute, prompt - compute)
        return Started(_SimTurn(spec.session, spec.turns[turn].output_tokens), prompt, compute, b.recompute_tokens)

    def step(self, handles: list[Any]) -> None:
        self.clock += self.cal.cost.t_decode(len(handles))
        for h in handles:
            h.generated += 1

    def generated(self, handle: Any) -> int:
        return int(handle.generated)

    def done(self, handle: Any) -> bool:
        return bool(handle.generated >= handle.out)

    def finish(self, handle: Any, last: bool) -> Any:
        self.clock += self.cal.finish_s
        self.pool.finish(handle.session, handle.out - 1, self.clock)
        return None if last else handle.session

    def pool_used(self) -> int:
        return self.pool.pool_used


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

    The dict has the six keys of ``evals.workload.metrics.METRIC_KEYS`` plus details
    (``ok``, ``policy``, swap bytes, pool occupancy, head-of-line waiting, decisions by action).

    Raises:
        WorkloadError: a malformed trace or budget; UnknownPolicyError / ParameterError: a bad spec.
    """
    config = config or SimConfig()
    tr = as_trace(trace)
    policy, name = as_policy(policy_spec, config.limits)
    pool_t, host_t = resolve_budgets(tr, config.pool_tokens, config.host_tokens)
    cal = config.calibration
    bpt = cal.cost.bytes_per_token
    pool = SimPool(pool_t * bpt, host_t * bpt, bpt)
    manager = SurvivalManager(pool, policy, cal.cost)
    ex = SimExecutor(tr, pool, cal)
    try:
        rec = run_loop(tr, ex, manager, LoopConfig(config.max_batch), pool.pool_bytes)
        pool.check_integrity()
    except ProgramFailure as err:
        res = getattr(err, "result", None)
        return failed(name, "simulate", str(err), getattr(getattr(res, "status", None), "value", "error"))
    except AKVError as err:
        if isinstance(err, WorkloadError):
            raise
        return failed(name, "simulate", str(err), "invalid")
    finally:
        manager.close()
    c = manager.counters
    return rec.metrics(pool.pool_bytes, {
        "ok": True, "mode": "simulate", "policy": name, "trace_kind": tr.header.kind,
        "pool_bytes": pool.pool_bytes, "host_bytes": pool.host_bytes,
        "swap_out_bytes": pool.swap_out_bytes, "swap_in_bytes": pool.swap_in_bytes,
        "evicted_tokens": pool.evicted_tokens, "policy_calls": c.policy_calls,
        "policy_seconds": round(c.policy_seconds, 4), "actions": dict(c.actions),
        "calibration": {"model": cal.model, "source": cal.cost.source},
    })
