"""``bench.framework_agent``: the framework run beside the ``akv live`` run (``bench.live_compare``'s
rows, the live run the reference), with the framework run's drops and resend check."""

from __future__ import annotations

import json

import pytest

from bench.framework_agent import main
from tests.bench.test_live_compare import write_run


def test_the_framework_run_sits_beside_akv_live_with_its_drops_and_check(tmp_path, capsys):
    write_run(tmp_path / "live", "keep12", [("t1", True, "G", 2.0), ("t2", False, "x", 2.0)])
    write_run(tmp_path / "fw", "pydantic-ai m@keep12", [("t1", True, "G", 3.0), ("t2", True, "G", 3.0)])
    data = json.loads((tmp_path / "fw" / "live.json").read_text())
    for e, dropped in zip(data["episodes"], ([0, 5, 7], [0, 4]), strict=True):
        e["dropped_tokens"] = dropped
    (tmp_path / "fw" / "live.json").write_text(json.dumps({**data, "framework": "pydantic-ai-slim 2.68.0"}))
    (tmp_path / "fw" / "check.json").write_text(json.dumps(
        {"policy": "keep12=rolling_drop", "model": "m", "requests": 5, "equal": 5, "different": 0, "usage_equal": 5}))
    out = tmp_path / "cmp.json"
    assert main([str(tmp_path / "live"), str(tmp_path / "fw"), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    live, fw = result["policies"]
    assert result["reference"] == "keep12" and (live["pass_rate"], fw["pass_rate"]) == (0.5, 1.0)
    assert fw["cost_delta_pct"] == pytest.approx(50.0) and fw["pass_delta"] == pytest.approx(0.5)
    assert (result["requests"], result["requests_with_drops"], result["dropped_tokens"]) == (5, 3, 16)
    assert result["resend_check"]["equal"] == 5 and "provenance" in result
    assert "5 of 5 replies equal" in capsys.readouterr().out


def test_a_framework_run_without_its_check_is_one_line(tmp_path):
    write_run(tmp_path / "live", "keep12", [("t1", True, "G", 2.0)])
    write_run(tmp_path / "fw", "fw", [("t1", True, "G", 2.0)])
    with pytest.raises(SystemExit, match=r"bench\.framework_agent: "):
        main([str(tmp_path / "live"), str(tmp_path / "fw"), "--out", str(tmp_path / "o.json")])
