"""Agent logs as tasks: the docs' OpenAI and ATIF samples import to hand-checked messages, and
hostile files are one-line errors naming the record and the field, with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.tasks import load_suite
from evals.tasks.logs import MAX_DEPTH, MAX_MESSAGE_CHARS, LogError, load_log, split_sessions
from rsi.cli import main

ROOT = Path(__file__).resolve().parents[2]
OPENAI = ROOT / "docs" / "examples" / "openai-chat.jsonl"
ATIF = ROOT / "docs" / "examples" / "atif-trajectories.json"


def test_the_openai_sample_imports_message_for_message():
    tasks = load_log(OPENAI)
    records = [json.loads(line) for line in OPENAI.read_text().splitlines()]
    assert [t.id for t in tasks] == ["fix-timeout-bug", "order-status"]
    for task, rec in zip(tasks, records):
        assert task.probes == () and task.meta["format"] == "openai" and task.family == "log:openai"
        assert [m["role"] for m in task.messages] == [m["role"] for m in rec["messages"]]
        assert [m["content"] or "" for m in task.messages] == [m["content"] or "" for m in rec["messages"]]
        assert list(task.tools) == rec["tools"]
    first = tasks[0].messages
    assert first[2]["reasoning_content"] == "Start with the client module."
    assert [c["id"] for c in first[4]["tool_calls"]] == ["c2", "c3"] and first[6]["tool_call_id"] == "c3"


def test_the_atif_sample_imports_steps_as_messages():
    tasks = {t.id: t for t in load_log(ATIF)}
    assert set(tasks) == {"refund-check", "refund-check/billing-lookup", "s-8a1"}
    refund = tasks["refund-check"]
    assert refund.meta == {"format": "atif", "agent": "support-bot", "agent_version": "2.3.0", "model": "some-model"}
    assert [t["function"]["name"] for t in refund.tools] == ["get_invoice", "ask_billing"]
    m = refund.messages
    assert [x["role"] for x in m] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert m[2] == {"role": "assistant", "content": "", "reasoning_content": "Look the invoice up first.",
                    "tool_calls": [{"id": "t1", "type": "function",
                                    "function": {"name": "get_invoice", "arguments": '{"invoice": "INV-2291"}'}}]}
    assert m[3] == {"role": "tool", "content": "INV-2291: 149.00 EUR, paid 2026-11-03, refund requested 2026-11-20, "
                    "refund status: pending review", "name": "get_invoice", "tool_call_id": "t1"}
    assert m[-1]["content"].startswith("The refund of INV-2291")
    assert [x["role"] for x in tasks["refund-check/billing-lookup"].messages] == ["user", "assistant"]


def test_logs_load_as_suites_and_import_round_trips(tmp_path, capsys):
    for path in (OPENAI, ATIF):
        tasks = load_log(path)
        assert load_suite(path, None) == tasks
        assert [t.id for t in load_suite(path, "heldout")] == [t.id for t in tasks if t.split == "heldout"]
        out = tmp_path / f"{path.stem}.jsonl"
        assert main(["import", str(path), "--out", str(out)]) == 0
        assert "sessions" in capsys.readouterr().out
        assert load_suite(out, None) == tasks  # the written file is the project's schema, read back the same


def test_split_by_conversation_is_stable():
    ids = [f"s{i}" for i in range(20)]
    split = split_sessions(ids, 0.25)
    assert sum(v == "heldout" for v in split.values()) == 5
    more = split_sessions([*ids, "s20"], 0.25)
    assert sum(split[i] != more[i] for i in ids) <= 1  # adding a session moves at most the boundary one
    assert split_sessions(["only"], 0.25) == {"only": "train"}
    with pytest.raises(LogError, match=r"heldout_share must be in \[0, 1\]"):
        split_sessions(ids, 1.5)


def _call(cid, name="read_file", args='{"path": "a"}'):
    c = {"type": "function", "function": {"name": name, "arguments": args}}
    return c | ({"id": cid} if cid is not None else {})


def _conv(*extra, **over):
    msgs = [{"role": "user", "content": "task"}, {"role": "assistant", "content": "", "tool_calls": [_call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "A"}, {"role": "assistant", "content": "done"}]
    return {"id": "x", "messages": msgs, **over} if not extra else {"id": "x", "messages": list(extra)}


ATIF_OK = {"schema_version": "ATIF-v1.8", "agent": {"name": "a", "version": "1"},
           "steps": [{"step_id": 1, "source": "user", "message": "hi"},
                     {"step_id": 2, "source": "agent", "message": "ok"}]}
DEEP = "[" * (MAX_DEPTH + 10) + "]" * (MAX_DEPTH + 10)
HOSTILE = {
    "wrong type of messages": (json.dumps({"messages": "hello"}), r"line 1: 'messages' must be a non-empty list"),
    "wrong type of content": (json.dumps(_conv({"role": "user", "content": 7})),
                              r"line 1: messages\[0\]\.content must be a string"),
    "a role that is not one": (json.dumps(_conv({"role": "robot", "content": "x"})), r"messages\[0\]\.role must be"),
    "a call never answered": (json.dumps(_conv({"role": "user", "content": "t"},
                                               {"role": "assistant", "content": "", "tool_calls": [_call("c1")]},
                                               {"role": "assistant", "content": "done"})),
                              r"messages\[1\] calls 'c1', whose tool result never comes"),
    "a result of no call": (json.dumps(_conv({"role": "user", "content": "t"},
                                             {"role": "tool", "tool_call_id": "zz", "content": "A"})),
                            r"messages\[1\] answers tool call 'zz', which no open call"),
    "a call without an id": (json.dumps(_conv({"role": "user", "content": "t"},
                                              {"role": "assistant", "content": "", "tool_calls": [_call(None)]})),
                             r"messages\[1\]\.tool_calls\[0\] has no id"),
    "a 10 MB string": (json.dumps(_conv({"role": "user", "content": "x" * 10_000_000})),
                       rf"messages\[0\]\.content holds 10,000,000 characters; at most {MAX_MESSAGE_CHARS:,}"),
    "deep nesting": (json.dumps(_conv()) + "\n" + DEEP, r"line 2: JSON nested too deeply"),
    "mixed formats": (json.dumps(_conv()) + "\n" + json.dumps(ATIF_OK),
                      r"line 2 is an ATIF trajectory but line 1 is an OpenAI chat log: one format per file"),
    "not a conversation": (json.dumps({"hello": 1}), r"line 1: not a conversation"),
    "not JSON": ('{"messages": [}\n', r"line 1: not JSON"),
    "an invalid ATIF step": (json.dumps({**ATIF_OK, "steps": [{**ATIF_OK["steps"][0], "step_id": 3}]}),
                             r"line 1: not a valid ATIF trajectory: .*step_id=3 is not sequential"),
    "ATIF agent fields on a user step": (
        json.dumps({**ATIF_OK, "steps": [{**ATIF_OK["steps"][0], "reasoning_content": "x"}]}),
        r"not a valid ATIF trajectory: steps\.0: .*only valid on `source='agent'`"),
    "two sessions with one id": (json.dumps(_conv()) + "\n" + json.dumps(_conv()), r"two sessions have the id 'x'"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_logs_are_one_line_errors_and_nothing_is_written(name, tmp_path, capsys):
    text, pattern = HOSTILE[name]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(text + "\n")
    with pytest.raises(LogError, match=pattern) as err:
        load_log(bad)
    assert "\n" not in str(err.value) and str(bad) in str(err.value)
    out = tmp_path / "suite.jsonl"
    assert main(["import", str(bad), "--out", str(out)]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("akv import: LogError:") and "\n" not in line and len(line) < 600
    assert not out.exists() and not list(tmp_path.glob("suite.jsonl*"))
