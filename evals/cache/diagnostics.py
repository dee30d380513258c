"""Calibration schedules: cache schedules that remove, or keep only, a probe's evidence.

Used to calibrate the probe format on the real model: a probe is informative when the model
answers it with the full cache, still answers when everything *but* the evidence is dropped, and
fails once exactly the evidence is dropped. Each function returns a cumulative schedule in the
wire format (``{"drop_message": {"<trigger>": [ids]}}``) with the probe's ``after_message`` as the
trigger, so every dropped id is <= the trigger as the wire rules require.

Not a policy: policies live in ``search_spaces``; these are fixed controls for one probe.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from evals.errors import TaskError
from evals.tasks.schema import Probe, Task


def drop_messages_schedule(trigger: int, ids: Iterable[int]) -> dict[str, Any]:
    """``{"drop_message": {str(trigger): sorted ids}}``, or ``{}`` when there is nothing to drop.

    Raises:
        TaskError: for an id above ``trigger`` or below 0.
    """
    ids = sorted(set(ids))
    bad = [i for i in ids if not 0 <= i <= trigger]
    if bad:
        raise TaskError(f"dropped ids must lie in [0, trigger={trigger}], got {bad}", field="drop_message", value=bad)
    return {"drop_message": {str(trigger): ids}} if ids else {}


def _check(task: Task, probe: Probe) -> None:
    if probe not in task.probes:
        raise TaskError(f"the probe is not one of task {task.id}'s probes", field="probe", value=probe.question)
    if not probe.evidence_ids:
        raise TaskError(f"task {task.id}: probe {probe.question!r} lists no evidence_ids", field="evidence_ids",
                        value=[])


def drop_evidence_schedule(task: Task, probe: Probe) -> dict[str, Any]:
    """Drop exactly ``probe.evidence_ids``, triggered at ``probe.after_message``.

    Send it with ``task.context(probe)`` (messages 0..after_message). Raises :class:`TaskError`
    when ``probe`` is not one of ``task`` 's probes or has no evidence ids.
    """
    _check(task, probe)
    return drop_messages_schedule(probe.after_message, probe.evidence_ids)


def keep_evidence_schedule(task: Task, probe: Probe) -> dict[str, Any]:
    """Drop every tool response before the probe except the evidence (the positive control)."""
    _check(task, probe)
    ids = [i for i, m in enumerate(task.messages[: probe.after_message + 1])
           if m.get("role") == "tool" and i not in probe.evidence_ids]
    return drop_messages_schedule(probe.after_message, ids)
