"""Evaluation: task suites, cost model, metrics, and the evaluators of both tracks.

Public surface (light: importing it loads no model)::

    from evals import build_suite, load_suite, drop_evidence_schedule
    from evals import load_rates, request_cost, task_cost, pass_rate, exact_match
    from evals import Replay, EvalConfig, PolicySpec        # loaded on first use (they bring the engine)

Shared by both tracks: ``evals.tasks`` (generated agent trajectories with probes, stored as
versioned HF datasets), ``evals.rates`` (rate tables), ``evals.paired`` (paired bootstrap
intervals over tasks), ``evals.errors``.

- ``evals.cache``: the cache-drop track: ``evaluator.Replay`` scores a ``PolicySpec`` on tasks with
  the model; ``fidelity.ProxyReplay``, the zero-forward fidelity; ``cost``, ``scoring``,
  ``probes``, ``probe_calibration``, ``diagnostics``; ``live`` (live-agent episodes); ``cli``
  (``akv eval``).
- ``evals.survival``: the tool-gap survival track (traces, real-engine replay, the simulator and
  its timing calibration, the survival report; ``akv workload``).
"""

from evals.cache.cost import CostBreakdown, Counts, counts, request_cost, sum_costs, task_cost
from evals.cache.diagnostics import drop_evidence_schedule, drop_messages_schedule, keep_evidence_schedule
from evals.cache.scoring import (
    Interval,
    PassRate,
    contains_match,
    exact_match,
    normalize_answer,
    pass_rate,
    per_family,
    wilson_interval,
)
from evals.errors import CostError, TaskError
from evals.rates import Rates, available_rates, load_rates
from evals.tasks import FAMILIES, Probe, SuiteSpec, Task, build_suite, load_suite

_LAZY = {"Replay": "evals.cache.evaluator", "EvalConfig": "evals.cache.evaluator",
         "PolicySpec": "evals.cache.evaluator", "TaskResult": "evals.cache.evaluator",
         "ProxyReplay": "evals.cache.fidelity"}


def __getattr__(name: str) -> object:
    """The evaluators, imported on first use (PEP 562): ``import evals`` stays free of the engine."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'evals' has no attribute {name!r}")


__all__ = [
    "FAMILIES",
    "CostBreakdown",
    "CostError",
    "Counts",
    "EvalConfig",
    "Interval",
    "PassRate",
    "PolicySpec",
    "Probe",
    "ProxyReplay",
    "Rates",
    "Replay",
    "SuiteSpec",
    "Task",
    "TaskError",
    "TaskResult",
    "available_rates",
    "build_suite",
    "contains_match",
    "counts",
    "drop_evidence_schedule",
    "drop_messages_schedule",
    "exact_match",
    "keep_evidence_schedule",
    "load_rates",
    "load_suite",
    "normalize_answer",
    "pass_rate",
    "per_family",
    "request_cost",
    "sum_costs",
    "task_cost",
    "wilson_interval",
]
