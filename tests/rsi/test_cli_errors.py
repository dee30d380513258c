"""Every ``akv`` command ends in a result or one line on stderr with exit status 2.

Caller mistakes (the project's errors, missing or malformed files the user named) print one line
and no traceback; ``--debug`` (before or after the command name) shows the traceback. ``akv
export`` says what is missing in a run that has no archive yet and why a text baseline cannot be
exported. A few cases run ``python -m rsi.cli`` in a subprocess; the sweep over every command
calls ``rsi.cli.main``, the console script's entry point, in this process.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rsi.cache.archive import Archive, Candidate
from rsi.cache.metrics import Metrics
from rsi.cli import main
from search_spaces import seed_source

ROOT = Path(__file__).resolve().parents[2]


def fake_run(run_dir: Path) -> Path:
    """A run directory as a search leaves it after a generation: an evolved program (``g1-p1``,
    rolling_drop with ``keep_tool_responses=0``) and two experts (``full`` and the text baseline
    ``standard``), written by hand here."""
    (run_dir / "programs").mkdir(parents=True)
    source = seed_source("rolling_drop")
    sha = hashlib.sha256(source.encode()).hexdigest()
    (run_dir / "programs" / f"{sha}.py").write_text(source)
    m = Metrics(pass_rate=0.8, cost_cents_mean=1.0, n_tasks=2, n_probes=4)
    Archive([
        Candidate("e-full", "", "expert:full", {}, 0, proposer="expert", train=m, expert=True, spec="full"),
        Candidate("e-std", "", "expert:standard", {}, 0, proposer="expert", train=m, expert=True, spec="standard"),
        Candidate("c-1", sha, "g1-p1", {"keep_tool_responses": 0}, 1, train=m, heldout=m),
    ]).save(run_dir / "archive.json")
    return run_dir


def akv(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "rsi.cli", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=240)


def one_line(status: int, err: str, *words: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert status == 2, err[-3000:]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert all(w in lines[0] for w in words), lines[0]


def test_unknown_suite_is_one_line_and_debug_shows_the_traceback(tmp_path):
    """Before: ``akv eval --suite nosuchsuite`` printed a ``TaskError`` traceback (status 1)."""
    proc = akv(tmp_path, "eval", "--suite", "nosuchsuite", "--policy", "full", "--model", "tiny-random")
    one_line(proc.returncode, proc.stderr, "akv eval", "TaskError", "'nosuchsuite'", "default")
    proc = akv(tmp_path, "--debug", "eval", "--suite", "nosuchsuite", "--policy", "full")
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "TaskError" in proc.stderr
    from evals.errors import TaskError

    with pytest.raises(TaskError, match="nosuchsuite"):  # after the command name too (main re-raises)
        main(["eval", "--debug", "--suite", "nosuchsuite", "--policy", "full"])


def test_export_without_an_archive_and_of_a_text_baseline(tmp_path, capsys, monkeypatch):
    """Before: a ``FileNotFoundError`` traceback for a run without ``archive.json``, and a
    ``PolicyError`` traceback for ``--pick expert:standard``."""
    monkeypatch.chdir(tmp_path)
    started = tmp_path / "started"
    started.mkdir()
    (started / "config.json").write_text("{}")
    one_line(main(["export", str(started), "--out", "p.py"]), capsys.readouterr().err, "no archive.json yet")
    run = fake_run(tmp_path / "run")
    status = main(["export", str(run), "--pick", "expert:standard", "--out", "p.py"])
    one_line(status, capsys.readouterr().err, "expert:standard", "text baseline")
    assert not (tmp_path / "p.py").exists()
    assert main(["export", str(run), "--pick", "best", "--out", "p.py"]) == 0, capsys.readouterr().err
    assert "PROGRAM_SOURCE" in (tmp_path / "p.py").read_text()


@pytest.mark.parametrize("config, words", [("{not json", "not valid JSON"), ("[1, 2]", "expected a JSON object"),
                                           ('{"eval": [true]}', "eval must be a mapping")])
@pytest.mark.parametrize("command", ["eval", "export"])
def test_a_runs_unreadable_config_is_one_line_where_the_guard_is_read(tmp_path, capsys, monkeypatch, config, words,
                                                                        command):
    """``akv eval --run`` and ``akv export`` read the run's config.json for its frame guard: a file
    damaged by hand is a one-line error naming it, not a traceback (and nothing is evaluated)."""
    monkeypatch.chdir(tmp_path)
    run = fake_run(tmp_path / "run")
    (run / "config.json").write_text(config)
    argv = (["eval", "--run", str(run), "--model", "tiny-random"] if command == "eval"
            else ["export", str(run), "--out", "p.py"])
    one_line(main(argv), capsys.readouterr().err, "config.json", words)
    assert not (tmp_path / "p.py").exists()


@pytest.fixture
def files(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"id": "a", "messages": [{"role": "user", "content": "x"}],
                                                      "probes": []}) + "\n")
    bare = {"id": "b", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
            "probes": [{"after_message": 1, "question": "what?", "answer": "y"}]}
    (tmp_path / "bare.jsonl").write_text(json.dumps(bare) + "\n")
    (tmp_path / "dup.jsonl").write_text((tmp_path / "tasks.jsonl").read_text() * 2)
    (tmp_path / "notes.txt").write_text("not a program (\n")
    (tmp_path / "binary.bin").write_bytes(b"text\n\xb2\xff")  # a bad UTF-8 byte on line 2
    return tmp_path


CASES = {
    "eval-unknown-suite": (["eval", "--suite", "nosuchsuite", "--policy", "full"], "nosuchsuite"),
    "eval-bad-task-file": (["eval", "--suite", "bad.jsonl", "--policy", "full"], "bad.jsonl: line 1: not JSON"),
    "eval-duplicate-ids": (["eval", "--suite", "dup.jsonl", "--policy", "full"], "occurs twice"),
    "eval-unknown-split": (["eval", "--suite", "tasks.jsonl", "--split", "train", "--policy", "full"],
                           "no split 'train'; its splits: custom (or all)"),
    "eval-no-candidates": (["eval", "--suite", "bare.jsonl", "--policy", "full"], "--scoring generate"),
    "eval-out-is-a-dir": (["eval", "--suite", "tasks.jsonl", "--policy", "full", "--out", "empty"], "directory"),
    "eval-plot-is-a-dir": (["eval", "--suite", "tasks.jsonl", "--policy", "full", "--plot", "empty"],
                           "--plot empty must be a file name ending in .png"),  # was written as empty.png
    "eval-plot-unknown-format": (["eval", "--suite", "tasks.jsonl", "--policy", "full", "--plot", "p.txt"],
                                 "--plot p.txt must be a file name ending in .png, .pdf, .svg, .jpg"),
    "eval-negative-limit": (["eval", "--suite", "tasks.jsonl", "--policy", "full", "--limit", "-2"],
                            "--limit must be an integer >= 0 (0: every task), got -2"),
    "eval-unknown-policy": (["eval", "--suite", "tasks.jsonl", "--policy", "nope"], "unknown policy 'nope'"),
    "eval-bad-parameter": (["eval", "--suite", "tasks.jsonl", "--policy", "rolling_drop", "--params", "bogus=1"],
                           "bogus"),
    "eval-params-not-kv": (["eval", "--suite", "tasks.jsonl", "--policy", "full", "--params", "x"], "key=value"),
    "eval-params-bad-yaml": (["eval", "--suite", "tasks.jsonl", "--policy", "full", "--params", "x=[1"], "YAML"),
    "eval-params-with-compare": (["eval", "--compare", "full", "--params", "a=1"], "--params"),
    "eval-no-policy": (["eval", "--suite", "tasks.jsonl"], "give a policy"),
    "eval-missing-program": (["eval", "--program", "missing.py"], "missing.py"),
    "eval-program-not-python": (["eval", "--program", "notes.txt"], "refused"),
    "eval-program-is-dir": (["eval", "--program", "empty"], "program file 'empty' is a directory"),
    "eval-program-not-utf8": (["eval", "--program", "binary.bin"], "program file 'binary.bin': line 2: not UTF-8"),
    "eval-task-file-not-utf8": (["eval", "--suite", "binary.bin", "--policy", "full"],
                                "task file 'binary.bin': line 2"),
    "search-config-not-utf8": (["search", "binary.bin"], "config file 'binary.bin': line 2: not UTF-8"),
    "eval-run-not-a-run": (["eval", "--run", "empty"], "no archive.json"),
    "eval-pick-without-run": (["eval", "--policy", "full", "--pick", "best"], "--run"),
    "eval-unknown-rates": (["eval", "--policy", "full", "--rates", "nope"], "nope"),
    "eval-unknown-model": (["eval", "--suite", "tasks.jsonl", "--policy", "full", "--model", "nomodel"], "nomodel"),
    "export-missing-dir": (["export", "missing", "--out", "p.py"], "not a run directory"),
    "report-empty-dir": (["report", "empty"], "no archive.json"),
    "search-missing-config": (["search", "missing.yaml"], "missing.yaml"),
    "search-bad-yaml": (["search", "bad.yaml"], "bad.yaml"),
    "search-no-config": (["search"], "CONFIG"),
    "search-resume-empty": (["search", "--resume", "empty"], "empty"),
    "search-in-process-and-ray": (["search", "--resume", "empty", "--in-process", "--replicas", "2"],
                                  "--in-process evaluates in this process"),
    "survival-search-missing": (["survival-search", "missing.jsonl"], "missing.jsonl"),
    "dashboard-missing": (["dashboard", "missing"], "not a run directory"),
    "serve-unknown-model": (["serve", "--model", "nomodel"], "nomodel"),
    # options checked before the model loads, and those the engine and scheduler check (tiny model)
    "serve-bad-port": (["serve", "--port", "99999"], "--port must be in [0, 65535], got 99999"),
    "serve-negative-pool": (["serve", "--pool-gb", "-1"], "--pool-gb must be a finite number >= 0"),
    "serve-nan-host-tier": (["serve", "--host-gb", "nan"], "--host-gb must be a finite number >= 0, got nan"),
    "serve-negative-key-rate": (["serve", "--key-rate", "-2"], "--key-rate must be a finite number >= 0, got -2"),
    "serve-nan-key-rate": (["serve", "--key-rate", "nan"], "--key-rate must be a finite number >= 0, got nan"),
    "serve-negative-key-concurrency": (["serve", "--key-concurrency", "-1"], "--key-concurrency must be an integer"),
    "oracle-bad-budget": (["oracle", "--budget", "0"], "--budget must be an integer >= 1"),
    "serve-no-batch": (["serve", "--model", "tiny-random", "--max-batch", "0"], "max_batch must be an integer >= 1"),
    "serve-bad-timeout": (["serve", "--model", "tiny-random", "--timeout", "-1"], "timeout must be a positive"),
    "serve-no-gpu": (["serve", "--model", "tiny-random", "--device", "cuda:7"], "device 'cuda:7'"),
    "serve-not-a-device": (["serve", "--model", "tiny-random", "--device", "gpu"], "'gpu' is not a torch device"),
    "serve-keys-not-utf8": (["serve", "--model", "tiny-random", "--api-keys-file", "binary.bin"],
                            "--api-keys-file 'binary.bin': line 2: not UTF-8"),
    "serve-secret-is-dir": (["serve", "--model", "tiny-random", "--snapshot-secret-file", "empty"],
                            "--snapshot-secret-file 'empty' cannot be read"),
    "live-unknown-suite": (["live", "--endpoint", "http://127.0.0.1:9", "--suite", "nosuchsuite"], "nosuchsuite"),
    "live-no-probes": (["live", "--endpoint", "http://127.0.0.1:9", "--suite", "smoke", "--probes", "0"],
                       "--probes must be >= 1"),  # was a summary of zero episodes
    "live-no-steps": (["live", "--endpoint", "http://127.0.0.1:9", "--suite", "smoke", "--max-steps", "0"],
                      "LiveConfig.max_steps must be a positive integer, got 0"),  # was a ValueError traceback
    "live-not-a-url": (["live", "--endpoint", "localhost-30000", "--suite", "smoke", "--limit", "1"],
                       "endpoint 'localhost-30000' is not an http(s) URL"),
    "live-unreachable": (["live", "--endpoint", "http://127.0.0.1:9", "--suite", "smoke", "--limit", "1",
                          "--run-dir", "live"], "http://127.0.0.1:9 cannot be reached"),
    "workload-missing-trace": (["workload", "simulate", "missing.jsonl", "--survival", "lru", "--out", "o.json"],
                               "missing.jsonl"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_command_turns_caller_mistakes_into_one_line(files, capsys, case):
    argv, word = CASES[case]
    status = main(argv)
    one_line(status, capsys.readouterr().err, word)
