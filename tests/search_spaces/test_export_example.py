"""The docs/export.md example (``examples/akv_harness_loop.py``) against a real ``akv serve`` with the
tiny random model: every request carries the schedule the in-framework policy decides for that
history, and the server honours it (drops skip tokens, the prefix is reused)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rsi.cache.executors.launcher import ServerProcess
from search_spaces import estimate_tokens, export_policy, get_policy

ROOT = Path(__file__).resolve().parents[2]
# (--intake-bytes 0: the harness sends small bodies, and the intake has its own tests)
AKV_SERVE = ("{python} -m rsi.cli serve --model {model} --port {port} --host {host} --template plain --threads 1 "
             "--intake-bytes 0")


def test_example_harness_loop_against_akv_serve(tmp_path):
    policy = get_policy("rolling_drop", keep_tool_responses=2, rolling_drop_target="both", reposition_after_call=3,
                        reposition_interval_calls=2)
    path = export_policy(policy, tmp_path / "policy.py", format="akv-harness")
    server = ServerProcess(AKV_SERVE, model="tiny-random", log_path=tmp_path / "akv.log", gpu="", health_timeout_s=240,
                           grace_s=10, env={"HF_HUB_OFFLINE": "1"})
    server.start()
    try:
        run = subprocess.run([sys.executable, str(ROOT / "examples" / "akv_harness_loop.py"), "--policy", str(path),
                              "--base-url", server.base_url, "--model", "tiny-random", "--rounds", "7"],
                             capture_output=True, text=True, cwd=tmp_path, timeout=300)
    finally:
        server.stop()
    assert run.returncode == 0, run.stderr + (tmp_path / "akv.log").read_text()[-2000:]
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    rounds, history = lines[:-1], lines[-1]["history"]
    assert len(rounds) == 7
    for r in rounds:
        prefix = history[: r["messages"]]
        expected = policy.decide(prefix, token_counts=estimate_tokens(prefix))
        assert r["drop_message"] == expected["drop_message"], r
        assert r["reposition"] == expected["reposition"], r
    last = rounds[-1]
    assert last["drop_message"] and last["reposition"] == [7, 11]  # calls 3 and 5 end at messages 7 and 11
    assert any(2 in ids for ids in last["drop_message"].values())  # an assistant turn left with its batch
    assert last["drop_skipped_tokens"] > 0 and last["cached_tokens"] > 0  # the server dropped and reused KV
    assert all(r["prompt_tokens"] > 0 for r in rounds)
