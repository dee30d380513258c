"""Evaluation: task suites, cost model, metrics, and the evaluators that score a policy.

Public surface (light: importing it loads no model)::

    from evals import build_suite, load_suite, drop_evidence_schedule
    from evals import load_rates, request_cost, task_cost, pass_rate, exact_match

- ``evals.tasks``: generated agent trajectories with probes, stored as versioned HF datasets.
- ``evals.diagnostics``: calibration schedules (drop exactly a probe's evidence, or all but it).
- ``evals.rates`` / ``evals.cost``: rate tables and per-request / per-task cost from token usage.
- ``evals.metrics``: answer matching, pass rates with Wilson intervals, per-family aggregation.

The evaluators (imported from their modules, since they load the engine):

- ``evals.replay``: ``Replay`` scores a ``PolicySpec`` on tasks with the model (exact cost, probes).
- ``evals.fidelity``: ``ProxyReplay``, the zero-forward fidelity (exact cost, predicted pass), and
  the Spearman check against the model; ``evals.paired``: paired bootstrap intervals over tasks.
- ``evals.live``: live-agent episodes against an OpenAI-compatible endpoint.
- ``evals.survival``: the tool-gap survival track (traces, real-engine replay, the simulator and
  its calibration, conformance).
"""

from evals.cost import CostBreakdown, Counts, counts, request_cost, sum_costs, task_cost
from evals.diagnostics import drop_evidence_schedule, drop_messages_schedule, keep_evidence_schedule
from evals.errors import CostError, TaskError
from evals.metrics import (
    Interval,
    PassRate,
    contains_match,
    exact_match,
    normalize_answer,
    pass_rate,
    per_family,
    wilson_interval,
)
from evals.rates import Rates, available_rates, load_rates
from evals.tasks import FAMILIES, Probe, SuiteSpec, Task, build_suite, load_suite

__all__ = [
    "FAMILIES",
    "CostBreakdown",
    "CostError",
    "Counts",
    "Interval",
    "PassRate",
    "Probe",
    "Rates",
    "SuiteSpec",
    "Task",
    "TaskError",
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
