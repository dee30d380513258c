"""evals.bfcl.data and .backends against BFCL's own helper and checker, on real tasks (gold calls only).

BFCL's helper ``execute_multi_turn_func_call`` runs call strings with ``eval``: it gets only BFCL's
own gold strings here (trusted data), as the independent reference for the project's dispatcher.
"""

from __future__ import annotations

import pytest

from evals.bfcl import SPLIT_RULE, Entry, load_bfcl_suite, split_of
from evals.bfcl.data import read_entries, to_task, tool_specs
from evals.errors import TaskError

IDS = ("multi_turn_base_0", "multi_turn_long_context_3", "multi_turn_long_context_7")


@pytest.fixture(scope="module")
def entries() -> dict[str, Entry]:
    wanted = {}
    for category in ("multi_turn_base", "multi_turn_long_context"):
        wanted.update({e.id: e for e in read_entries(category) if e.id in IDS})
    return wanted


def _bfcl_reference(entry: Entry, label: str) -> tuple[list[list[str]], dict]:
    """Gold outputs per turn and final instances from BFCL's own helper (gold strings only)."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call

    outputs, instances = [], {}
    for turn in entry.gold:
        out, instances = execute_multi_turn_func_call(list(turn), dict(entry.initial_config),
                                                      list(entry.involved_classes), f"akv_test_{label}", entry.id,
                                                      long_context=entry.long_context)
        outputs.append(out)
    return outputs, instances


def test_the_project_runs_gold_calls_as_bfcl_s_own_helper_does(entries):
    assert sorted(entries) == sorted(IDS)
    for entry in entries.values():
        declared = [t["function"]["name"] for t in tool_specs(entry.involved_classes, entry.excluded)]
        ours = entry.backends(declared)
        mine = [[e.output for e in ours.run(calls)] for calls in entry.gold_calls(declared)]
        theirs, instances = _bfcl_reference(entry, "ref")
        assert mine == theirs, entry.id
        for name, instance in instances.items():
            public = {k: v for k, v in vars(instance).items() if not k.startswith("_")}
            assert {k: v for k, v in vars(ours.instances[name]).items() if not k.startswith("_")} == public
        task = to_task(entry)
        assert [m["content"] for m in task.messages if m["role"] == "tool"] == [o for turn in theirs for o in turn]


def test_bfcl_s_checker_passes_every_gold_turn(entries):
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    for entry in entries.values():
        gold = [list(t) for t in entry.gold]
        verdict = multi_turn_checker([[t] for t in gold], gold, {"id": entry.id, "initial_config": entry.initial_config,
                                                                 "involved_classes": list(entry.involved_classes)},
                                     entry.category, "akv_test_checker")
        assert verdict == {"valid": True}, entry.id


def test_a_task_holds_the_schema_s_messages_and_bfcl_s_meta(entries):
    entry = entries["multi_turn_long_context_3"]
    task = to_task(entry)
    first = task.messages[0]
    assert first["role"] == "system" and first["tools"] == list(task.tools)
    assert all(t["function"]["parameters"]["type"] == "object" for t in task.tools)  # BFCL's "dict" as OpenAPI's
    assert not {t["function"]["name"] for t in task.tools} & set(entry.excluded)
    starts = task.meta["bfcl"]["turn_starts"]
    assert [task.messages[s]["content"] for s in starts] == [t[0]["content"] for t in entry.turns]
    for s, gold in zip(starts, entry.gold):  # the assistant turn: the gold calls, no prose
        if gold:
            assistant = task.messages[s + 1]
            assert assistant["role"] == "assistant" and assistant["content"] == ""
            assert len(assistant["tool_calls"]) == len(gold)
    assert Entry.of_task(task) == entry
    assert task.split == split_of(task.id) and task.meta["bfcl"]["split_rule"] == SPLIT_RULE


def test_the_split_is_a_fixed_hash_disjoint_and_recorded():
    every = load_bfcl_suite("bfcl-base", None)
    train, held = [t for t in every if t.split == "train"], [t for t in every if t.split == "heldout"]
    assert len(train) + len(held) == 200 and not {t.id for t in train} & {t.id for t in held}
    assert 40 <= len(held) <= 80  # about 30%
    assert [t.id for t in load_bfcl_suite("bfcl-base", "heldout")] == [t.id for t in held]
    assert all(t.meta["bfcl"]["split_rule"] == SPLIT_RULE for t in train + held)
    assert split_of("multi_turn_base_0") == split_of("multi_turn_base_0")


def test_unknown_suite_split_and_a_missing_package_are_one_line(monkeypatch):
    from importlib import metadata

    with pytest.raises(TaskError, match="valid: bfcl-base, bfcl-long"):
        load_bfcl_suite("bfcl-nope")
    with pytest.raises(TaskError, match="splits: train, heldout"):
        load_bfcl_suite("bfcl-base", "custom")

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    with pytest.raises(TaskError) as err:
        load_bfcl_suite("bfcl-long", "heldout")
    assert str(err.value) == "the BFCL suites need bfcl-eval==2026.3.23: run `make bfcl`"
