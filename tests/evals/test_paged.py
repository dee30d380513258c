"""The paged-report live suite: tasks that are valid replay tasks, and the one-read-per-page tool
that makes a dropped page's fact unrecoverable, through crashes and resumes."""

from __future__ import annotations

import json

import pytest

from engine.durable import CheckpointStore
from evals.cache.live import Pages, run_episode
from evals.tasks.paged import END_QUESTION_ASK, paged_suite, paged_task
from evals.tasks.schema import Task, mentions
from search_spaces import get_policy
from tests.evals.test_live import ScriptedModel


def read(cursor) -> str:
    return f"<tool_call>{json.dumps({'name': 'read_page', 'arguments': {'cursor': cursor}})}</tool_call>"


def test_tasks_are_complete_trajectories_with_the_fact_where_the_probe_says():
    tasks = paged_suite(tasks=6, pages=14, seed=3)
    assert [t.meta["fact_page"] for t in tasks] == [0, 3, 5, 8, 10, 13]  # spread first to last
    for t in tasks:
        p = t.probes[0]
        assert p.after_message == len(t.messages) - 1 and p.answer in p.candidates
        holders = [i for i, m in enumerate(t.messages) if m["role"] == "tool" and mentions(m["content"], p.answer)]
        assert holders == list(p.evidence_ids) == [3 + 2 * t.meta["fact_page"]]
        assert sum(m["role"] == "tool" for m in t.messages) == 14
        assert Task.from_record(json.loads(json.dumps(t.to_record()))) == t  # the JSON-lines form round-trips
    assert paged_suite(tasks=6, pages=14, seed=3) == tasks  # deterministic
    with pytest.raises(ValueError, match="fact_page"):
        paged_task(0, 0, pages=4, fact_page=4)


def test_each_page_reads_once_and_hostile_cursors_are_refused():
    pages = Pages(paged_task(0, 0, pages=3))
    assert pages.read_page({"cursor": 0}).startswith("[page 1 of 3]")
    assert "already read" in pages.read_page({"cursor": "0"}) and "next unread cursor is 1" in pages.read_page(
        {"cursor": 0})
    for bad in ({"cursor": 3}, {"cursor": -1}, {"cursor": "two"}, {"cursor": None}, {}, {"cursor": [1]},
                {"cursor": 10**30}):
        assert pages.read_page(bad).startswith("error:"), bad
    assert pages.read_page({"cursor": 2}).endswith("END OF REPORT")
    assert pages.read_page({"cursor": 1}).endswith("next_cursor: 2")
    assert "every page is read" in pages.read_page({"cursor": 1})


def test_an_episode_reads_every_page_and_a_short_window_drops_the_early_fact(tmp_path):
    task = paged_task(1, 0, pages=6, fact_page=0)
    answer = task.probes[0].answer
    script = [read(k) for k in range(6)] + [read(0)] + [
        f'<tool_call>{{"name": "submit_answer", "arguments": {{"answer": "{answer}"}}}}</tool_call>']
    model = ScriptedModel(script)
    r = run_episode(model, get_policy("rolling_drop", keep_tool_responses=2), "keep2", task, 0,
                    CheckpointStore(tmp_path))
    assert r.tool_calls == ["read_page"] * 7 + ["submit_answer"] and r.exact and r.error is None
    last = model.calls[-1]
    assert "already read" in last[0][-1]["content"]  # the re-read was refused
    first_page = 3  # system, user, assistant call, tool page 0
    assert answer in last[0][first_page]["content"]  # the text history keeps the page ...
    dropped = {int(i) for ids in last[1]["drop_message"].values() for i in ids}
    assert first_page in dropped  # ... and the policy has dropped it from the cache
    assert last[0][0]["content"] == task.messages[0]["content"]  # the task's own system prompt


def test_a_resumed_episode_still_refuses_pages_read_before_the_crash(tmp_path):
    task = paged_task(2, 0, pages=4)
    store = CheckpointStore(tmp_path)
    r1 = run_episode(ScriptedModel([read(0), read(1), read(2)], fail_at=2), None, "full", task, 0, store)
    assert r1.error is not None and r1.tool_calls == ["read_page", "read_page"]
    second = ScriptedModel([read(0), "done"])
    r2 = run_episode(second, None, "full", task, 0, store)
    assert "already read" in second.calls[-1][0][-1]["content"] and r2.answer == "done"


def test_the_generator_refuses_bad_arguments_in_one_line(tmp_path, capsys):
    from evals.tasks.paged import main

    for argv in (["--out", str(tmp_path)], ["--out", str(tmp_path / "a.jsonl"), "--pages", "1"],
                 ["--out", str(tmp_path / "a.jsonl"), "--tasks", "0"]):
        with pytest.raises(SystemExit) as err:
            main(argv)
        assert err.value.code == 2
    assert "is a directory" in capsys.readouterr().err and not (tmp_path / "a.jsonl").exists()
    assert main(["--out", str(tmp_path / "b.jsonl"), "--tasks", "2", "--pages", "3"]) == 0
    assert len((tmp_path / "b.jsonl").read_text().splitlines()) == 2


def test_question_at_end_puts_the_question_on_the_last_page_only(tmp_path):
    """The user asks to read the report; the question follows END OF REPORT; the live episode asks
    what the task's user asked, and the probe (the replay form) asks the question itself."""
    task = paged_task(2, 5, pages=5, fact_page=1, question_at="end")
    start = paged_task(2, 5, pages=5, fact_page=1)
    question = start.messages[1]["content"]
    assert task.messages[1]["content"] == END_QUESTION_ASK and task.probes[0].question == question
    pages = [m["content"] for m in task.messages if m["role"] == "tool"]
    assert [question in p for p in pages] == [False] * 4 + [True]
    assert pages[-1].endswith(f"END OF REPORT\nQuestion: {question}") and task.meta["question_at"] == "end"
    model = ScriptedModel([read(k) for k in range(5)] + [
        '<tool_call>{"name": "submit_answer", "arguments": {"answer": "x"}}</tool_call>'])
    run_episode(model, None, "full", task, 0, CheckpointStore(tmp_path))
    assert model.calls[0][0][1]["content"] == END_QUESTION_ASK
    with pytest.raises(ValueError, match="question_at"):
        paged_task(0, 0, question_at="middle")
