"""``akv export --format akv-harness``: the pick of a run as a module for an AKV harness; the default
format is unchanged; what cannot take the harness form is refused in one line."""

from __future__ import annotations

from types import SimpleNamespace

from tests.exported import load_exported
from tests.rsi.test_cli_errors import akv, fake_run, one_line
from tests.search_spaces.trajectories import build


def test_export_pick_in_the_harness_format(tmp_path):
    run = fake_run(tmp_path / "run")  # g1-p1: the rolling_drop seed with K = 0
    proc = akv(tmp_path, "export", str(run), "--pick", "best", "--format", "akv-harness", "--out", "h.py")
    assert proc.returncode == 0 and "(akv-harness)" in proc.stdout, proc.stderr
    module = load_exported(tmp_path / "h.py")
    d = module.HarnessPolicy().decide(SimpleNamespace(messages=build(["call"] * 2, [False])))
    assert d.drop_message == {3: (3,), 5: (5,)} and module.PARAMS["keep_tool_responses"] == 0
    proc = akv(tmp_path, "export", str(run), "--pick", "best", "--out", "m.py")  # the default format
    assert proc.returncode == 0 and "def apply(payload" in (tmp_path / "m.py").read_text()
    assert "HarnessPolicy" not in (tmp_path / "m.py").read_text()


def test_export_refusals_in_the_harness_format(tmp_path):
    run = fake_run(tmp_path / "run")
    proc = akv(tmp_path, "export", str(run), "--pick", "expert:standard", "--format", "akv-harness", "--out", "p.py")
    one_line(proc.returncode, proc.stderr, "expert:standard", "text baseline")
    assert not (tmp_path / "p.py").exists()
    proc = akv(tmp_path, "export", str(run), "--pick", "best", "--format", "sglang", "--out", "p.py")
    assert proc.returncode == 2 and "invalid choice: 'sglang'" in proc.stderr
