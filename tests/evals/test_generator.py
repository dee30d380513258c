"""Generated tasks keep the families' promises; generation is deterministic; splits are disjoint."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys

import pytest

from evals.errors import TaskError
from evals.tasks import FAMILIES, check_generated, generate_split, generate_task, get_suite_spec
from tests.evals.conftest import SPEC


def said(message: dict) -> str:
    """Everything a message says (written independently of evals.tasks.schema.message_text)."""
    calls = " ".join(c["function"]["name"] + " " + c["function"]["arguments"] for c in message.get("tool_calls") or [])
    return " ".join([message.get("content") or "", message.get("reasoning_content") or "", calls])


def has(text: str, value: str) -> bool:
    return re.search(r"(?<![A-Za-z0-9_])" + re.escape(value.lower()) + r"(?![A-Za-z0-9_])", text.lower()) is not None


def probes(tasks, family=None):
    return [(t, p) for t in tasks for p in t.probes if family is None or t.family == family]


def test_every_probe_is_well_formed(all_tasks):
    assert all_tasks and all(t.probes for t in all_tasks)
    for t, p in probes(all_tasks):
        before = " ".join(said(m) for m in t.messages[: p.after_message + 1])
        assert p.answer in p.candidates and len(p.candidates) >= 5, (t.id, p)
        assert all(has(before, c) for c in p.candidates), (t.id, p.candidates)
        assert p.evidence_ids and all(i < p.after_message for i in p.evidence_ids), (t.id, p)
        assert any(has(said(t.messages[i]), p.answer) for i in p.evidence_ids), (t.id, p)
        assert p.question and p.cloze_prefix and p.kind
        assert check_generated(t) == []


def test_old_evidence_answer_appears_nowhere_else(all_tasks):
    checked = probes(all_tasks, "evidence-in-old-tool-response")
    assert checked
    for t, p in checked:
        (ev,) = p.evidence_ids
        assert t.messages[ev]["role"] == "tool"
        others = [i for i in range(p.after_message + 1) if i != ev and has(said(t.messages[i]), p.answer)]
        assert others == [], (t.id, p.answer, others)
        tools_after = [i for i in range(ev + 1, p.after_message + 1) if t.messages[i]["role"] == "tool"]
        assert len(tools_after) >= 2  # old: newer tool responses follow it


def test_restated_evidence_is_tool_then_reasoning(all_tasks):
    for t, p in probes(all_tasks, "evidence-restated"):
        tool, assistant = p.evidence_ids
        assert t.messages[tool]["role"] == "tool" and assistant == tool + 1
        assert has(t.messages[assistant]["reasoning_content"], p.answer)
        assert has(t.messages[tool]["content"], p.answer)


def test_recent_only_evidence_is_in_the_last_tool_responses(all_tasks):
    for t, p in probes(all_tasks, "recent-only"):
        tools = [i for i, m in enumerate(t.messages[: p.after_message + 1]) if m["role"] == "tool"]
        assert set(p.evidence_ids) <= set(tools[-4:]), (t.id, p.evidence_ids, tools[-4:])


def test_multi_hop_combines_two_distant_tool_responses(all_tasks):
    checked = probes(all_tasks, "multi-hop")
    assert checked
    for t, p in checked:
        first, second = p.evidence_ids
        assert t.messages[first]["role"] == t.messages[second]["role"] == "tool"
        assert second - first >= 4  # at least one whole round between them
        assert has(said(t.messages[second]), p.answer) and not has(said(t.messages[first]), p.answer)


def test_reversal_asks_before_now_and_why(all_tasks):
    for t, _ in probes(all_tasks, "decision-then-reversal")[::3]:
        by_kind = {p.kind: p for p in t.probes}
        before, now, why = by_kind["status_before"], by_kind["status_now"], by_kind["original_reason"]
        assert before.answer != now.answer and before.after_message < now.after_message
        assert before.question == now.question  # the same question, two moments, two answers
        assert why.evidence_ids == before.evidence_ids and why.answer not in now.candidates
        assert all(i > before.after_message for i in now.evidence_ids)


def test_trajectory_shape(all_tasks):
    for t in all_tasks:
        assert [m["role"] for m in t.messages[:2]] == ["system", "user"]
        for i in range(2, len(t.messages), 2):
            call, out = t.messages[i], t.messages[i + 1]
            assert call["role"] == "assistant" and call["reasoning_content"]
            (tc,) = call["tool_calls"]
            assert out == {**out, "role": "tool", "tool_call_id": tc["id"], "name": tc["function"]["name"]}
            json.loads(tc["function"]["arguments"])
        assert t.generator and t.generator_version and t.seed is not None


def test_heldout_only_family_and_disjoint_splits(split_tasks):
    train, heldout = split_tasks["train"], split_tasks["heldout"]
    assert "multi-hop" not in {t.family for t in train}
    assert {t.family for t in heldout} == set(FAMILIES)
    train_entities = {e for t in train for e in t.entities}
    held_entities = {e for t in heldout for e in t.entities}
    assert train_entities and held_entities and not train_entities & held_entities
    assert not {t.seed for t in train} & {t.seed for t in heldout}
    for t, p in probes(train + heldout):
        assert set(p.candidates) <= set(t.entities)
    assert not {p.question for _, p in probes(train)} & {p.question for _, p in probes(heldout)}


def test_generation_is_deterministic_in_process():
    a = generate_task("decision-then-reversal", "train", 7, target_tokens=2000)
    b = generate_task("decision-then-reversal", "train", 7, target_tokens=2000)
    assert a.to_record() == b.to_record()
    c = generate_task("decision-then-reversal", "train", 8, target_tokens=2000)
    assert c.to_record()["messages"] != a.to_record()["messages"]


def _digest(tasks) -> str:
    return hashlib.sha256(json.dumps([t.to_record() for t in tasks], sort_keys=True).encode()).hexdigest()


def test_generation_is_deterministic_across_processes():
    """Another hash seed must not change anything (no iteration over sets of strings)."""
    code = ("import sys; sys.path.insert(0, '.'); from tests.evals.test_generator import _digest; "
            "from tests.evals.conftest import SPEC; from evals.tasks import generate_split; "
            "print(_digest(generate_split(SPEC, 'heldout')))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.stdout.strip().splitlines()[-1] == _digest(generate_split(SPEC, "heldout"))


def test_length_knob():
    short = generate_task("recent-only", "train", 3, target_tokens=1000)
    long = generate_task("recent-only", "train", 3, target_tokens=12000)
    chars = [sum(len(said(m)) for m in t.messages) for t in (short, long)]
    assert chars[1] > 5 * chars[0]


def test_checker_catches_a_leak(all_tasks):
    t, p = probes(all_tasks, "evidence-in-old-tool-response")[0]
    msgs = [dict(m) for m in t.messages]
    leak = max(i for i in range(p.after_message + 1) if msgs[i]["role"] == "tool" and i not in p.evidence_ids)
    msgs[leak]["content"] += f" Also mentioned: {p.answer}."
    from dataclasses import replace

    problems = check_generated(replace(t, messages=tuple(msgs)))
    assert any("also in messages" in s for s in problems)


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(TaskError, match="valid: evidence-in-old-tool-response"):
        generate_task("no-such-family", "train", 0)
    with pytest.raises(TaskError, match="valid: train, heldout"):
        generate_task("recent-only", "test", 0)
    with pytest.raises(TaskError, match="valid: logistics, itops, procurement"):
        generate_task("recent-only", "train", 0, domain="finance")
    with pytest.raises(TaskError, match="valid: default, long, smoke"):
        get_suite_spec("nope")
    assert SPEC.families("train") == tuple(f for f in FAMILIES if f != "multi-hop")
