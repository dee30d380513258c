"""Resuming the real search loop (tiny model) from damaged run directories.

Each test copies the finished tiny search, damages it the way a kill, a full disk or a hand edit
would, resumes, and checks that nothing finished is lost, that damaged records are recomputed
and reported, and that a resume that cannot go on leaves every file as it was.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rsi.cache.archive import Archive
from rsi.cache.search import Search, load_run_config
from rsi.proposers.base import Proposer
from rsi.rundir import RunDirError
from rsi.store import EvalStore
from tests.rsi.conftest import tiny_config
from tests.rsi.test_search import _summary


def _copy(finished: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    return run


def _snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def _records(path: Path) -> dict[str, dict]:
    out = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        out.setdefault(rec["key"], rec["row"])
    return out


def _without_seconds(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "seconds"}


class _BrokenProposer(Proposer):
    def propose(self, *args, **kwargs):
        raise RuntimeError("proposer endpoint down")


def test_a_failed_resume_leaves_the_outputs_as_they_were(finished, tmp_path, tiny_plain):
    run = _copy(finished, tmp_path)
    (run / "proposals" / "g1.json").unlink()  # generation 1 must be proposed again, and the proposer fails
    outputs = ["archive.json", "pareto.json", "report.html", "replicas.json"]
    before = {name: (run / name).read_bytes() for name in outputs}
    figures = {p.name: p.read_bytes() for p in (run / "figures").iterdir()}
    with pytest.raises(RuntimeError, match="proposer endpoint down"):
        Search(tiny_config(), run, engine=tiny_plain, proposer=_BrokenProposer()).run()
    assert {name: (run / name).read_bytes() for name in outputs} == before
    assert {p.name: p.read_bytes() for p in (run / "figures").iterdir()} == figures
    assert len(Archive.load(run / "archive.json").candidates) == len(Archive.load(finished / "archive.json").candidates)
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "failed" and "proposer endpoint down" in state["error"] and state["attempt"] == 2


def test_resume_recomputes_corrupt_torn_and_edited_records(finished, tmp_path, tiny_plain):
    run = _copy(finished, tmp_path)
    evals = run / "evaluations.jsonl"
    original = _records(evals)
    lines = evals.read_text().splitlines()
    n = len(lines)
    missing = json.loads(lines[3])
    del missing["row"]["cost_input_cents"]  # the KeyError of the issue
    lines[3] = json.dumps(missing)
    flipped = json.loads(lines[5])
    probes = json.loads(flipped["row"]["probes"])
    probes[0]["passed"] = not probes[0]["passed"]
    flipped["row"]["probes"] = json.dumps(probes)
    flipped["row"]["n_passed"] += 1 if probes[0]["passed"] else -1
    lines[5] = json.dumps(flipped)
    lines[7] = "\x00\x00 garbage from a bad disk"
    torn = lines[-1][: len(lines[-1]) // 2]
    evals.write_text("\n".join(lines[:-1]) + "\n" + torn)

    Search(tiny_config(), run, engine=tiny_plain).run()

    assert _summary(run) == _summary(finished)
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "finished"
    assert state["store_check"]["corrupt_lines"] == [4, 6, 8] and state["store_check"]["torn_tail"] == n
    after = EvalStore(evals)
    assert after.check.torn_tail is None and after.check.corrupt_lines == (4, 6, 8)  # kept, never rewritten
    assert set(after._rows) == set(original)
    for key, row in original.items():
        assert _without_seconds(after._rows[key]) == _without_seconds(row), key
    appended = evals.read_text().splitlines()[n - 1:]
    assert len(appended) == 4  # the three damaged records and the torn one, nothing else
    assert all("sha256" in json.loads(line) for line in appended)


@pytest.mark.parametrize("name, damage, needle", [
    ("state.json", b'{"attempt": 1, "sta', "line 1 column"),
    ("state.json", b'{"attempt": "one"}', "'attempt' must be"),
    ("state.json", b"\xff\xfe", "not UTF-8"),
    ("config.json", b'{\n "name": "tiny-test",\n "seed": 3,\n', "line 4 column"),
    ("proposals/g1.json", b'[{"source": "def f(', "line 1 column"),
    ("proposals/g1.json", b'[{"parents": []}]', "proposal 0 must be"),
    ("mlflow_runs.json", b"", "empty"),
    ("optuna.db", b"SQLite format 3\x00" + b"\x07" * 200, "SQLite"),
])
def test_a_bad_run_file_fails_before_anything_is_written(finished, tmp_path, tiny_plain, name, damage, needle):
    run = _copy(finished, tmp_path)
    (run / name).write_bytes(damage)
    before = _snapshot(run)
    with pytest.raises(RunDirError) as err:
        Search(tiny_config(), run, engine=tiny_plain)
    assert name.split("/")[-1] in str(err.value) and needle in str(err.value), str(err.value)
    assert _snapshot(run) == before


def test_load_run_config_names_the_file(finished, tmp_path):
    run = _copy(finished, tmp_path)
    with pytest.raises(RunDirError, match=r"holds no config\.json"):
        load_run_config(tmp_path / "nothing-here")
    (run / "config.json").write_text('{"name": "x",')
    with pytest.raises(RunDirError, match=r"config\.json: line 1 column"):
        load_run_config(run)
    (run / "config.json").write_text('{"generations": -1}')
    with pytest.raises(RunDirError, match=r"config\.json: generations must be >= 0"):
        load_run_config(run)


def test_archive_load_names_the_file_and_line(finished, tmp_path):
    run = _copy(finished, tmp_path)
    text = (run / "archive.json").read_text()
    (run / "archive.json").write_text(text[: len(text) // 2])
    with pytest.raises(RunDirError, match=r"archive\.json: line \d+ column"):
        Archive.load(run / "archive.json")
    d = json.loads(text)
    del d["candidates"][1]["label"]
    (run / "archive.json").write_text(json.dumps(d))
    with pytest.raises(RunDirError, match="candidate 1 is malformed"):
        Archive.load(run / "archive.json")


def test_akv_search_resume_names_the_bad_file(finished, tmp_path, capsys):
    from rsi.cli import main

    run = _copy(finished, tmp_path)
    (run / "state.json").write_text('{\n "attempt": 1,\n "status": "fini')
    before = _snapshot(run)
    assert main(["search", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert "state.json: line 3 column" in err and "Traceback" not in err, err
    assert _snapshot(run) == before


def test_run_dir_holds_the_run_state(tmp_path):
    """``RunDir``: the attempt counter, the refusal of another config, proposals and programs
    round-trip, and a malformed proposal named by file (the checks ``Search`` runs before writing)."""
    from rsi.rundir import RunDir

    files = RunDir(tmp_path)
    same = lambda raw: raw  # noqa: E731  (the stored config read as is)
    state = files.next_state({"a": 1}, same)
    assert state == {"attempt": 1}
    files.write("config.json", {"a": 1})
    files.write_state(state)
    assert files.next_state({"a": 1}, same)["attempt"] == 2
    with pytest.raises(RunDirError, match="another config"):
        files.next_state({"a": 2}, same)
    (tmp_path / "proposals").mkdir()
    files.save_proposals(3, [{"source": "S", "parents": [], "proposer": "m"}])
    assert files.proposals_of(3) == [{"source": "S", "parents": [], "proposer": "m"}] and files.proposals_of(4) is None
    (tmp_path / "programs").mkdir()
    files.save_program("abc", "def decide(r, p):\n    return r.plan()\n")
    assert files.program("abc").startswith("def decide")
    files.save_proposals(5, [{"source": 1}])
    with pytest.raises(RunDirError, match=r"g5.json: proposal 0"):
        files.check_resume(optuna_sqlite=False, mlflow_local=False)
