"""bench.bfcl_result: an akv eval result on a BFCL suite stored with its provenance, its rows summarized again."""

from __future__ import annotations

import json

from bench.bfcl_result import main
from evals.bfcl.data import load_bfcl_suite
from evals.bfcl.evidence import turn_evidence


def _row(task_id: str, policy: str, passes: list[bool]) -> dict:
    return {"task_id": task_id, "category": "multi_turn_base", "split": "train", "policy": policy, "ok": True,
            "error": None, "seconds": 1.0, "split_rule": "", "passed": all(passes),
            "turns": [{"turn": i, "passed": p, "reason": "", "calls": [], "refused": [], "steps": 1,
                       "dropped_messages": 0} for i, p in enumerate(passes)]}


def test_a_bfcl_run_is_stored_with_its_provenance_and_its_rows_summarized_again(tmp_path):
    task = next(t for t in load_bfcl_suite("bfcl-base", "heldout") if any(e.has_evidence for e in turn_evidence(t)))
    n = len(task.meta["bfcl"]["turn_starts"])
    run = {"suite": "bfcl-base", "split": "heldout", "model": "m", "dtype": "bfloat16", "judge": "BFCL's checker",
           "config": {"tool_choice": "required"}, "policies": [{"policy": "full"}, {"policy": "keep0"}],
           "tasks": [_row(task.id, "full", [True] * n), _row(task.id, "keep0", [False] + [True] * (n - 1))]}
    src, out = tmp_path / "run.json", tmp_path / "stored.json"
    src.write_text(json.dumps(run))
    assert main([str(src), "--out", str(out), "--command", "akv eval ...", "--commit", "abc1234",
                 "--date", "2026-12-07T23:00:00", "--note", "a test"]) == 0
    data = json.loads(out.read_text())
    assert data["provenance"]["commit"] == "abc1234" and data["provenance"]["command"] == "akv eval ..."
    assert data["note"] == "a test" and [r["policy"] for r in data["policies"]] == ["full", "keep0"]
    vs = data["policies"][1]["vs_full"]
    assert (vs["lost"], vs["gained"], vs["turns"]) == (1, 0, n) and "evidence_turn_accuracy" in data["policies"][1]
    src.write_text(json.dumps({**run, "suite": "default"}))
    assert main([str(src), "--out", str(out), "--command", "c", "--commit", "c", "--date", "d", "--note", "n"]) == 2
