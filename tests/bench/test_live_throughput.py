"""bench.live_throughput's arithmetic: arms parsed or refused by name, a row's episodes per hour from
its wall time, the reference comparison carried over, and the goal measured only at the first arm's
pass rate (the script itself runs the real server and ``akv live``; it is a timing, not a test)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench.live_throughput import Arm, arm_row, goal, live_command, table


def _live(episodes: int, pass_rate: float, versus: dict | None = None) -> dict:
    summary = {"episodes": episodes, "pass_rate": pass_rate, "pass_rate_ci95": [0.0, 1.0], "steps_mean": 15.0,
               "invalid_calls": 0, "errors": 0}
    return {"summary": summary | ({"versus_reference": {"run_dir": "x", **versus}} if versus else {})}


def test_arms_parse_and_bad_ones_are_named():
    assert Arm.parse("gguf:4") == Arm("gguf", 4) and Arm("dense", 1).label == "dense:1"
    for bad in ("int8:4", "dense:0", "dense", "dense:x", "gguf:-1"):
        with pytest.raises(argparse.ArgumentTypeError, match=repr(bad).replace("'", ".")):
            Arm.parse(bad)


def test_row_is_episodes_over_wall_hours_and_keeps_the_reference_diff():
    first = arm_row(Arm("dense", 1), 1800.0, _live(8, 0.875))
    assert first["episodes_per_hour"] == pytest.approx(16.0) and "versus_first" not in first
    diff = {"episodes": 8, "answers_differ": 1, "verdicts_differ": 0, "turns": 120, "turns_differ": 3,
            "tokens_differ": 17, "examples": ["..."]}
    later = arm_row(Arm("gguf", 4), 300.0, _live(8, 0.875, diff))
    assert later["episodes_per_hour"] == pytest.approx(96.0)
    assert later["versus_first"] == {k: v for k, v in diff.items() if k != "examples"}
    assert "6.00" in table([first, later]) and "3/120 (17)" in table([first, later])


def test_goal_counts_only_arms_that_pass_as_often_as_the_first():
    first = arm_row(Arm("dense", 1), 3600.0, _live(8, 0.875))
    fast_worse = arm_row(Arm("gguf", 4), 600.0, _live(8, 0.75))   # 6x, but one pass fewer
    slower_same = arm_row(Arm("dense", 4), 1200.0, _live(8, 0.875))  # 3x
    g = goal([first, fast_worse, slower_same])
    assert g["best_arm"] == "dense:4" and g["speedup"] == pytest.approx(3.0) and g["met"] is False
    assert goal([first, arm_row(Arm("gguf", 4), 900.0, _live(8, 1.0))])["met"] is True  # exactly 4x
    assert goal([first, fast_worse]) | {"target": None} == {
        "target": None, "best_arm": None, "speedup": None, "met": False,
        "reason": "no arm passed as often as dense:1"}
    assert goal([first])["met"] is None  # one arm: not measured, not missed


def test_the_live_command_is_the_users_with_the_reference_after_the_first():
    args = argparse.Namespace(model="qwen2.5-coder-1.5b", suite="examples/live-pages-end.jsonl", split="heldout",
                              limit=8, max_steps=18, max_tokens=48)
    cmd = live_command("http://127.0.0.1:1", args, Arm("gguf", 4), Path("runs/x"), Path("runs/first"))
    assert cmd[1:4] == ["-m", "rsi.cli", "live"]
    assert cmd[cmd.index("--concurrency") + 1] == "4" and cmd[-2:] == ["--reference", "runs/first"]
    assert "--reference" not in live_command("http://127.0.0.1:1", args, Arm("dense", 1), Path("runs/x"), None)
