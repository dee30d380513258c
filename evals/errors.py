"""Errors of the evals package: subclasses of the project's one base error, ``engine.errors.AKVError``.

Each names the offending field and value, so a caller can tell what to fix without reading code.
"""

from __future__ import annotations

from engine.errors import AKVError


class TaskError(AKVError):
    """A task, probe, suite or task file that does not follow the documented schema (docs/tasks.md)."""


class CostError(AKVError):
    """A rate table or a usage record that cannot be priced (unknown name, negative or inconsistent counts)."""


__all__ = ["AKVError", "CostError", "TaskError"]
