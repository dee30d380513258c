"""Calibration schedules drop exactly the evidence (or everything but it) and obey the wire rules."""

from __future__ import annotations

import pytest

from engine.history import Drop
from engine.layout import Renderer
from engine.schedule import parse_schedule
from evals import drop_evidence_schedule, drop_messages_schedule, keep_evidence_schedule
from evals.errors import TaskError
from evals.tasks import Probe


class CharTokenizer:
    """One token per character: enough for the layout to place drops (no model files needed)."""

    bos_token_id = 1

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(map(chr, ids))


def test_drop_evidence_schedule_removes_exactly_the_evidence(all_tasks):
    renderer = Renderer(CharTokenizer(), "gemma")
    for t in all_tasks[::4]:
        for p in t.probes:
            schedule = drop_evidence_schedule(t, p)
            assert schedule == {"drop_message": {str(p.after_message): sorted(p.evidence_ids)}}
            context = t.context(p)
            parse_schedule(schedule, n_messages=len(context))  # the engine's own rule check
            layout = renderer.layout(context, schedule)
            (drop,) = [it for it in layout.items if isinstance(it, Drop)]
            dropped = {tok for s, e in drop.ranges for tok in range(s, e)}
            spans = layout.rendered.spans
            assert dropped == {tok for i in p.evidence_ids for tok in range(*spans[i])}


def test_keep_evidence_schedule_drops_every_other_tool_response(all_tasks):
    t = all_tasks[0]
    p = t.probes[0]
    (ids,) = keep_evidence_schedule(t, p)["drop_message"].values()
    tools = [i for i, m in enumerate(t.messages[: p.after_message + 1]) if m["role"] == "tool"]
    assert ids == [i for i in tools if i not in p.evidence_ids] and ids
    parse_schedule(keep_evidence_schedule(t, p), n_messages=p.after_message + 1)


def test_errors(all_tasks):
    t = all_tasks[0]
    with pytest.raises(TaskError, match="not one of"):
        drop_evidence_schedule(t, Probe(2, "q", "a"))
    with pytest.raises(TaskError, match="lists no evidence_ids"):
        drop_evidence_schedule(t.__class__(**{**t.__dict__, "probes": (Probe(2, "q", "a"),)}), Probe(2, "q", "a"))
    with pytest.raises(TaskError, match="trigger=3"):
        drop_messages_schedule(3, [1, 4])
    assert drop_messages_schedule(3, []) == {}
