"""An export with the frame guard (``FRAME_GUARD``): both forms decide what the evaluator's guard makes
of the policy's decision, request by request, and by the rule's definition no message leaves before an
assistant turn has read it and the frame never leaves; ``akv eval --program`` and ``akv export`` pick
the guard up from the file and from the run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.schedule import parse_schedule
from evals.cache.cli import read_program_file
from evals.cache.guard import FrameGuard, guard_schedule
from rsi.cache.export import run_frame_guard
from search_spaces import Policy, estimate_tokens, export_policy, get_policy, request_points
from search_spaces.cache import rules
from search_spaces.cache.decision import canonical_wire
from tests.exported import load_exported
from tests.search_spaces.trajectories import recorded

EAGER = rules.render({"rules": [{"action": "drop", "when": {"any": [{"f": "role", "is": "tool"},
                                                                     {"f": "role", "is": "system"}]}}],
                      "reposition": None, "defaults": {}})
POLICIES = [Policy.from_program(EAGER, {}),
            get_policy("rolling_drop", keep_tool_responses=0, target="both", reposition="calls", reposition_every=1)]


def _read_before_drop(prefix: list[dict[str, Any]], table: dict[int, Any]) -> None:
    roles = [m["role"] for m in prefix]
    first_user = roles.index("user") if "user" in roles else None
    for t, ids in table.items():
        assert t < len(prefix)
        for m in ids:
            assert roles[m] not in ("system", "developer") and m != first_user, (t, m)
            if roles[m] != "assistant":
                assert any(roles[j] == "assistant" for j in range(m + 1, t + 1)), (t, m)


@pytest.mark.parametrize("policy", POLICIES, ids=["eager-rules", "rolling-K0"])
def test_a_guarded_export_decides_what_the_evaluator_guards(tmp_path, policy):
    module = load_exported(export_policy(policy, tmp_path / "m.py", frame_guard=True))
    harness = load_exported(export_policy(policy, tmp_path / "h.py", format="akv-harness", frame_guard=True))
    assert module.FRAME_GUARD is True and harness.FRAME_GUARD is True
    assert read_program_file(tmp_path / "m.py").frame_guard and read_program_file(tmp_path / "h.py").frame_guard
    moved = 0
    for msgs in recorded():
        for n in request_points(msgs):
            prefix = msgs[:n]
            counts = estimate_tokens(prefix)
            raw = parse_schedule(policy.decide(prefix, token_counts=counts))
            want = canonical_wire(guard_schedule(raw, FrameGuard([m["role"] for m in prefix]), n))
            moved += want != canonical_wire(raw)
            got = module.decide(prefix)
            assert got == want, n
            decision = harness.HarnessPolicy().decide(harness.request_from_payload({"model": "m", "messages": prefix}))
            table = {int(t): tuple(ids) for t, ids in want.get("drop_message", {}).items()}
            assert decision.drop_message == (table or None) and decision.metadata["frame_guard"] is True
            _read_before_drop(prefix, {int(t): ids for t, ids in got.get("drop_message", {}).items()})
    assert moved  # the policy drops unread messages: the guard had work to do


def test_an_unguarded_export_says_so_and_a_run_names_its_guard(tmp_path):
    module = load_exported(export_policy(POLICIES[0], tmp_path / "m.py"))
    assert module.FRAME_GUARD is False and not read_program_file(tmp_path / "m.py").frame_guard
    assert not run_frame_guard(tmp_path)  # no config.json
    (tmp_path / "config.json").write_text(json.dumps({"eval": {"frame_guard": True}}))
    assert run_frame_guard(tmp_path)


MSGS = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"},
        {"role": "tool", "content": "t"}, {"role": "assistant", "content": "b"}]


@pytest.mark.parametrize("wire, match", [
    ({"drop_message": {"4": ["three"]}}, "not a message id"),
    ({"drop_message": {"4": [9]}}, "not a message id"),
    ({"drop_message": {"4": [{"start": 0}]}}, "not a message id"),
    ({"drop_message": {"four": [3]}}, "triggers must be message ids"),
    ({"drop_message": {"4": 3}}, "must map trigger ids to lists"),
    ({"drop_rule": ["text_drop"]}, "drop_rule must be a rule"),
])
def test_the_guard_refuses_a_table_it_cannot_read_in_one_line(wire, match):
    from search_spaces.cache.frame_guard import guard_wire

    with pytest.raises(ValueError, match=match):
        guard_wire(MSGS, wire)


def test_the_guard_keeps_text_ranges_and_waits_for_the_reader():
    from search_spaces.cache.frame_guard import guard_wire

    wire = {"drop_rule": {"type": "text_drop", "drop_messages": {"3": [{"message": 3, "start": 0, "end": 1}],
                                                                 "2": [{"message": 0, "start": 0, "end": 1}]}},
            "reposition": [4]}
    assert guard_wire(MSGS, wire) == {"drop_rule": {"type": "text_drop", "drop_messages": {
        "4": [{"message": 3, "start": 0, "end": 1}]}}, "reposition": [4]}
