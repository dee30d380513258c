"""Task and Probe records: validation with named fields, JSON round trips, helpers."""

from __future__ import annotations

import json

import pytest

from evals.errors import TaskError
from evals.tasks import Probe, Task, mentions, message_text

MESSAGES = (
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "Where does order 41233 ship from?"},
    {"role": "assistant", "content": "", "reasoning_content": "Look it up.",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "get_record", "arguments": '{"id": "41233"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "name": "get_record",
     "content": "Order 41233 ships from warehouse Kestrel."},
)


def probe(**kw) -> Probe:
    base = {"after_message": 3, "question": "Which warehouse?", "answer": "Kestrel",
            "cloze_prefix": "Order 41233 ships from warehouse", "candidates": ("Osprey", "Kestrel", "Heron"),
            "evidence_ids": (3,), "kind": "fact"}
    return Probe(**{**base, **kw})


def test_probe_helpers():
    p = probe()
    assert p.gold_index == 1 and p.continuations == (" Osprey", " Kestrel", " Heron")
    assert Probe.from_dict(p.to_dict()) == p
    assert list(p.to_dict()) == ["after_message", "question", "cloze_prefix", "answer", "candidates", "evidence_ids",
                                 "kind"]
    with pytest.raises(TaskError, match="no candidates"):
        _ = probe(candidates=()).gold_index


@pytest.mark.parametrize(("kw", "field"), [
    ({"answer": "Falcon"}, "candidates"),
    ({"candidates": ("Kestrel", "Kestrel")}, "candidates"),
    ({"evidence_ids": (4,)}, "evidence_ids"),
    ({"evidence_ids": (-1,)}, "evidence_ids"),
    ({"after_message": -1}, "after_message"),
    ({"answer": " "}, "answer"),
    ({"question": "", "cloze_prefix": ""}, "question"),
])
def test_probe_validation_names_the_field(kw, field):
    with pytest.raises(TaskError) as err:
        probe(**kw)
    assert err.value.field == field


def test_task_round_trip_and_context():
    t = Task("t1", MESSAGES, (probe(),), family="evidence-in-old-tool-response", split="train", seed=3,
             generator="g", generator_version="1", entities=("Kestrel",), meta={"a": 1})
    rec = t.to_record()
    assert json.loads(json.dumps(rec)) == rec
    assert Task.from_record(rec) == t
    as_strings = {**rec, "messages": json.dumps(rec["messages"]), "meta": json.dumps(rec["meta"])}
    assert Task.from_record(as_strings) == t
    assert t.context(t.probes[0]) == list(MESSAGES)
    assert len(t.context(probe(after_message=1, evidence_ids=()))) == 2


def test_minimal_record_gets_defaults():
    t = Task.from_record({"id": "mine", "messages": list(MESSAGES),
                          "probes": [{"after_message": 3, "question": "Which warehouse?", "answer": "Kestrel"}]})
    assert (t.family, t.split, t.seed, t.n_tokens, t.probes[0].candidates) == ("custom", "custom", None, None, ())


@pytest.mark.parametrize(("record", "match"), [
    ({"id": "x", "messages": [{"role": "robot", "content": "hi"}], "probes": []}, "role must be one of"),
    ({"id": "x", "messages": [], "probes": []}, "non-empty"),
    ({"id": "", "messages": list(MESSAGES), "probes": []}, "task id"),
    ({"id": "x", "messages": list(MESSAGES), "probes": [{"after_message": 9, "question": "q", "answer": "a"}]},
     "past the last message"),
    ({"id": "x", "messages": list(MESSAGES), "probes": [{"after_message": 1, "answer": "a", "gold": "a"}]},
     "unknown probe fields"),
    ({"id": "x", "messages": list(MESSAGES), "probes": "nope"}, "list of objects"),
])
def test_bad_records_raise_task_errors(record, match):
    with pytest.raises(TaskError, match=match):
        Task.from_record(record)


def test_mentions_and_message_text():
    assert mentions("Order 41233 ships from warehouse Kestrel.", "kestrel")
    assert not mentions("order 412330", "41233") and not mentions("Kestrels", "Kestrel")
    assert mentions('{"weight_kg": "212"}', "212") and mentions("on hold.", "on hold")
    text = message_text(MESSAGES[2])
    assert "Look it up." in text and "get_record" in text and "41233" in text
