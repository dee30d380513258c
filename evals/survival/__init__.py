"""Multi-session agent workloads: traces, the real-engine replay, the simulator, the survival report.

Public surface (the search loop and outside checks rely on these names)::

    from evals.survival import generate_trace, save_trace, load_trace, import_recorded_file
    from evals.survival import replay, ReplayConfig, simulate, SimConfig, calibrate, load_calibration
    trace = generate_trace("tool-heavy", sessions=8, seed=0)        # or "memory-tight"
    r = replay(trace, "ttl", ReplayConfig(model="tiny-random"))    # real engine, wall clock
    cal = calibrate(engine)                                        # this machine's speeds and template ids
    m = simulate(trace, {"name": "min_waste", "params": {}}, SimConfig(calibration=cal))  # model clock
    m["jct_mean_s"], m["jct_p95_s"], m["resume_ttft_p50_s"], m["resume_ttft_p95_s"],
    m["recompute_tokens"], m["peak_pool_bytes"]

CLI: ``python -m evals.survival.cli`` (``add_parser`` registers ``akv workload``); the report:
``python -m evals.survival.real_vs_sim``. Trace schema: ``evals.survival.trace``; recorded runs:
``evals.survival.importer``; docs/survival.md explains policies, simulator and calibration.
"""

from evals.survival.calibrate import calibrate
from evals.survival.calibration import Calibration, Timing, default_calibration, load_calibration
from evals.survival.chat import ChatTokens
from evals.survival.generate import KINDS, TOOL_KINDS, ToolKind, WorkloadSpec, generate_trace, get_kind
from evals.survival.importer import import_recorded, import_recorded_file
from evals.survival.metrics import METRIC_KEYS, TOKEN_KEYS
from evals.survival.replay import ReplayConfig, replay
from evals.survival.sim import SimConfig, simulate
from evals.survival.trace import (
    FORMAT,
    SessionSpec,
    Trace,
    TraceHeader,
    Turn,
    WorkloadError,
    load_trace,
    parse_trace,
    save_trace,
)

__all__ = [
    "FORMAT",
    "KINDS",
    "METRIC_KEYS",
    "TOKEN_KEYS",
    "TOOL_KINDS",
    "Calibration",
    "ChatTokens",
    "ReplayConfig",
    "SessionSpec",
    "SimConfig",
    "Timing",
    "ToolKind",
    "Trace",
    "TraceHeader",
    "Turn",
    "WorkloadError",
    "WorkloadSpec",
    "calibrate",
    "default_calibration",
    "generate_trace",
    "get_kind",
    "import_recorded",
    "import_recorded_file",
    "load_calibration",
    "load_trace",
    "parse_trace",
    "replay",
    "save_trace",
    "simulate",
]
