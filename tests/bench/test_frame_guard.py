"""bench.frame_guard's guard: the frame is never dropped, a non-assistant message's drop waits for the
next assistant turn, an assistant message's drop and the repositions stay (against a hand-made case)."""

from __future__ import annotations

from bench.frame_guard import guarded
from evals.tasks import Task


def _task() -> Task:
    roles = ["system", "user", "assistant", "tool", "tool", "assistant", "tool", "user", "assistant", "tool"]
    msgs = []
    for i, r in enumerate(roles):
        m = {"role": r, "content": f"m{i}"}
        if r == "tool":
            m["tool_call_id"] = f"c{i}"
        msgs.append(m)
    return Task("guard/1", tuple(msgs), ())


def test_the_guard_keeps_the_frame_and_waits_for_the_reader():
    wire = {"drop_message": {"2": [0, 1, 2], "3": [3], "4": [4], "6": [6], "7": [5, 7], "9": [9]},
            "reposition": [4, 9]}
    out = guarded(_task(), wire)
    assert out == {"drop_message": {"2": [2], "5": [3, 4], "7": [5], "8": [6, 7]}, "reposition": [4, 9]}
    # (0 and 1 are the frame; 3, 4 wait for assistant 5, 6 and 7 for assistant 8; 9 has no reader after it)
    assert guarded(_task(), out) == out  # a guarded schedule is its own guard
