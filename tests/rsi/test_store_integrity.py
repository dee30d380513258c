"""The evaluation store against damaged files: torn tails, garbage lines, edited rows, old rows.

Each test writes records through :class:`EvalStore`, damages ``evaluations.jsonl`` the way a kill
or a hand edit would, and reloads: what is loaded, what is reported (line numbers), what the next
append does to the file.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from evals.cache.cost import CostBreakdown
from evals.cache.evaluator import ProbeResult, RequestCost, TaskResult
from rsi.store import EvalStore


def _result(i: int, passed: bool = True) -> TaskResult:
    probe = ProbeResult(0, "recall", 3, "Perth", "", False, False, " Perth", passed, passed, (), passed)
    req = RequestCost(4, {"prompt_tokens": 100 + i, "prefill_tokens": 10, "cached_tokens": 90, "drop_skipped_tokens": 0,
                          "repos_tokens": 0, "completion_tokens": 0}, 1e-5)
    return TaskResult(f"task-{i}", "fam", "train", "rolling_drop", f"pk-{i}", {"k": i}, True, None, (probe,), (req,),
                      CostBreakdown(input=1e-5 * (i + 1), cached=2e-6), 0.5)


def _filled(path: Path, n: int) -> EvalStore:
    store = EvalStore(path)
    for i in range(n):
        assert store.put(f"key-{i}", _result(i))
    return store


def _lines(path: Path) -> list[str]:
    return path.read_text().split("\n")


def test_records_carry_a_checksum_of_their_content(tmp_path):
    path = tmp_path / "e.jsonl"
    _filled(path, 2)
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        body = json.dumps({"key": rec["key"], "row": rec["row"]}, sort_keys=True, separators=(",", ":"))
        assert rec["sha256"] == hashlib.sha256(body.encode()).hexdigest()
    again = EvalStore(path)
    assert again.check.clean and len(again) == 2 and again.get("key-1") == _result(1)


def test_a_torn_tail_is_cut_before_the_next_append(tmp_path, caplog):
    path = tmp_path / "e.jsonl"
    _filled(path, 3)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - 30])  # the kill tore the third record
    with caplog.at_level(logging.WARNING, logger="akv.search.store"):
        store = EvalStore(path)
    assert store.check.torn_tail == 3 and store.check.corrupt_lines == ()
    assert len(store) == 2 and "key-2" not in store
    assert "torn last record (line 3)" in caplog.text
    store.put("key-2", _result(2))  # recomputed, appended after the cut
    store.put("key-3", _result(3))
    again = EvalStore(path)
    assert again.check.clean, again.check.summary()
    assert len(again) == 4 and again.get("key-2") == _result(2) and again.get("key-3") == _result(3)
    assert path.read_bytes().startswith(whole[: whole.index(b"\n", whole.index(b"\n") + 1) + 1])


def test_loading_alone_does_not_touch_a_torn_file(tmp_path):
    path = tmp_path / "e.jsonl"
    _filled(path, 2)
    path.write_bytes(path.read_bytes() + b'{"key": "key-9", "ro')
    before = path.read_bytes()
    EvalStore(path)
    assert path.read_bytes() == before


def test_garbage_and_edited_rows_are_reported_and_not_loaded(tmp_path, caplog):
    path = tmp_path / "e.jsonl"
    _filled(path, 5)
    lines = _lines(path)
    lines[1] = "#### not json at all"
    rec = json.loads(lines[3])
    probes = json.loads(rec["row"]["probes"])
    probes[0]["passed"] = not probes[0]["passed"]  # valid JSON, valid row, flipped result
    rec["row"]["probes"] = json.dumps(probes)
    lines[3] = json.dumps(rec)
    path.write_text("\n".join(lines))
    with caplog.at_level(logging.WARNING, logger="akv.search.store"):
        store = EvalStore(path)
    assert store.check.corrupt_lines == (2, 4)
    assert "2 corrupt records" in caplog.text and "line 2, 4" in caplog.text
    assert "key-1" not in store and "key-3" not in store
    assert store.get("key-3") is None  # so the search evaluates it again
    assert all(store.get(f"key-{i}") == _result(i) for i in (0, 2, 4))
    assert store.put("key-3", _result(3)) and EvalStore(path).get("key-3") == _result(3)


def test_a_checksummed_row_missing_a_field_is_corrupt(tmp_path):
    from rsi.store import record_digest

    path = tmp_path / "e.jsonl"
    _filled(path, 2)
    lines = _lines(path)
    rec = json.loads(lines[0])
    del rec["row"]["cost_input_cents"]
    rec["sha256"] = record_digest(rec["key"], rec["row"])  # a consistent checksum over a broken row
    lines[0] = json.dumps(rec)
    path.write_text("\n".join(lines))
    store = EvalStore(path)
    assert store.check.corrupt_lines == (1,) and "key-0" not in store and "key-1" in store


def test_rows_of_older_versions_are_accepted_unverified(tmp_path, caplog):
    path = tmp_path / "e.jsonl"
    _filled(path, 3)
    lines = _lines(path)
    for i in (0, 2):
        rec = json.loads(lines[i])
        del rec["sha256"]
        lines[i] = json.dumps(rec)
    legacy = json.loads(lines[1])
    del legacy["sha256"], legacy["row"]["cost_input_cents"]  # an old row that no longer decodes
    lines[1] = json.dumps(legacy)
    path.write_text("\n".join(lines))
    with caplog.at_level(logging.WARNING, logger="akv.search.store"):
        store = EvalStore(path)
    assert store.check.unverified_lines == (1, 3) and store.check.corrupt_lines == (2,)
    assert store.get("key-0") == _result(0) and store.get("key-2") == _result(2) and "key-1" not in store
    assert "2 records without checksum" in caplog.text


def test_hostile_lines(tmp_path):
    path = tmp_path / "e.jsonl"
    _filled(path, 1)
    good = path.read_bytes()
    hostile = [b"\xff\xfe\x00garbage", b"[1, 2, 3]", b'{"key": 5, "row": {}}', b'{"key": "k", "row": []}',
               b'{"key": "k", "row": {}, "sha256": "00"}', b"null", b'"a string"', b"{}" * 1000]
    path.write_bytes(good + b"\n".join(hostile) + b"\n\n")
    store = EvalStore(path)
    assert store.check.corrupt_lines == tuple(range(2, 2 + len(hostile)))
    assert len(store) == 1 and store.check.torn_tail is None


def test_the_survival_store_is_the_same_store_and_reads_its_older_lines(tmp_path):
    from rsi.survival.evolve import SimStore

    path = tmp_path / "evaluations.jsonl"
    path.write_text('{"key": "old", "metrics": {"ok": true, "resume_ttft_p95_s": 0.5}}\n'
                    '{"key": "bad", "metrics": 3}\n')
    store = SimStore(path)
    assert store.get("old") == {"ok": True, "resume_ttft_p95_s": 0.5}
    assert store.check.unverified_lines == (1,) and store.check.corrupt_lines == (2,)
    store.put("new", {"ok": False, "error": "x"})
    again = SimStore(path)
    assert again.get("new") == {"ok": False, "error": "x"} and again.get("old") is not None and len(again) == 2
    assert again.check.unverified_lines == (1,)  # the new record carries its checksum
