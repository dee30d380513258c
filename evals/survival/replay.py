"""Replay a trace against the real engine on this machine (wall clock, small scale).

``replay(trace, policy_spec, config) -> metrics dict`` loads the model (or uses the engine it is
given), gives it a fresh radix tree with the trace's KV budgets, installs the survival layer with
the policy, and runs the shared loop (``evals.survival.loop``) with the real executor
(``evals.survival.real``). It returns the same keys as :func:`evals.survival.sim.simulate`.
The engine's tree and stop tokens are restored afterwards, so a shared engine can be used.

``clock="wall"`` (the default) runs in real time, sleeping through tool gaps; ``clock="model"``
runs the real engine on the simulator's model clock (no sleeping): events then happen in the
simulator's order, which is how the conformance test checks that the two agree token for token.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.engine import Engine
from engine.errors import AKVError
from engine.survival import CostModel, SurvivalManager, TreeBackend
from evals.survival.calibration import Calibration, default_calibration
from evals.survival.clock import ModelClock
from evals.survival.loop import LoopConfig, run_loop
from evals.survival.real import RealExecutor
from evals.survival.sim import as_policy, as_trace, failed, resolve_budgets, run_details
from evals.survival.trace import Trace, WorkloadError
from search_spaces.errors import ProgramFailure
from search_spaces.sandbox import SandboxLimits


@dataclass(frozen=True)
class ReplayConfig:
    """How to replay.

    Attributes:
        model: engine model name when no engine is given (``gemma-3-270m``, ``tiny-random``, a path).
        pool_tokens / host_tokens: KV budgets in tokens (default: the trace's suggestion).
        max_batch: generations in flight at once.
        calibration: the cost model policies see (default: the stored one for ``model``, else
            MEASURED.md figures with this engine's bytes per token).
        threads: torch threads when loading the model.
        limits: sandbox limits for program policies.
        clock: ``"wall"`` (real time) or ``"model"`` (the calibration's timing, as the simulator).
    """

    model: str = "gemma-3-270m"
    pool_tokens: int | None = None
    host_tokens: int | None = None
    max_batch: int = 4
    calibration: Calibration | None = None
    threads: int | None = None
    limits: SandboxLimits | None = None
    clock: str = "wall"

    def __post_init__(self) -> None:
        if self.clock not in ("wall", "model"):
            raise WorkloadError(f"clock must be 'wall' or 'model', got {self.clock!r}", field="clock",
                                value=self.clock)


def _calibration(config: ReplayConfig, engine: Engine) -> Calibration:
    """The calibration given (or stored for the engine's model); one for another KV size is
    replaced by MEASURED.md's figures with this engine's bytes per token."""
    cal = config.calibration or default_calibration(engine.name)
    if cal.cost.bytes_per_token != engine.geometry.bytes_per_token:
        if config.clock == "model":
            raise WorkloadError(f"the calibration's KV bytes per token ({cal.cost.bytes_per_token}) are not the "
                                f"engine's ({engine.geometry.bytes_per_token})", field="calibration",
                                value=cal.model)
        return Calibration.assumed(engine.name, CostModel(bytes_per_token=engine.geometry.bytes_per_token))
    return cal


def replay(trace: Trace | str | Path, policy_spec: Any, config: ReplayConfig | None = None,
           engine: Engine | None = None) -> dict[str, Any]:
    """Replay ``trace`` on the real engine under survival policy ``policy_spec``.

    Raises:
        WorkloadError: a malformed trace or budget; UnknownPolicyError / ParameterError: a bad spec;
        ModelLoadError: a model that cannot be loaded offline.
    """
    config = config or ReplayConfig()
    tr = as_trace(trace)
    policy, name = as_policy(policy_spec, config.limits)
    try:
        pool_t, host_t = resolve_budgets(tr, config.pool_tokens, config.host_tokens)
        eng = engine or Engine.from_pretrained(config.model, threads=config.threads)
        cal = _calibration(config, eng)
    except BaseException:
        policy.close()
        raise
    bpt = eng.geometry.bytes_per_token
    with eng.scratch_cache(min(pool_t * bpt, 1 << 50), host_t * bpt) as tree:
        backend = TreeBackend(tree, bpt)
        manager = SurvivalManager(backend, policy, cal.cost)
        clock = ModelClock(cal.timing, tree.stats) if config.clock == "model" else None
        try:
            ex = RealExecutor(eng, tr, backend, clock)
            rec = run_loop(tr, ex, manager, LoopConfig(config.max_batch), tree.pool_bytes)
            backend.check_integrity()
            stats = tree.stats
        except ProgramFailure as err:
            res = getattr(err, "result", None)
            return failed(name, "replay", str(err), getattr(getattr(res, "status", None), "value", "error"))
        except AKVError as err:
            if isinstance(err, WorkloadError):
                raise
            return failed(name, "replay", str(err), "invalid")
        finally:
            manager.close()
            backend.detach()
    return rec.metrics(pool_t * bpt, {
        "ok": True, "mode": "replay", "clock": config.clock, "policy": name, "trace_kind": tr.header.kind,
        "model": eng.name, **run_details(stats, manager, pool_t * bpt, host_t * bpt),
        "overlap_tokens": ex.overlap_tokens, "short_turns": ex.short_turns,
        "samples": {"prefill": ex.prefill_samples, "decode": ex.decode_samples, "finish": ex.finish_samples},
    })
