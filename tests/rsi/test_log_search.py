"""A search whose suite is a file of agent logs (no probes): fidelity is its quality axis, the
held-out split is by conversation, and the export works on its result as on any other."""

from __future__ import annotations

import json

import pytest

from evals.tasks import load_suite
from rsi.cache.archive import Archive
from rsi.cache.search import Search
from rsi.config import ConfigError
from rsi.store import EvalStore
from tests.rsi.conftest import tiny_config


@pytest.fixture(scope="module")
def log_file(tmp_path_factory):
    """The smoke suite's conversations as an OpenAI chat log: no probes, nothing but the messages, each
    cut before its third assistant turn (two scored turns: a small test)."""
    path = tmp_path_factory.mktemp("logs") / "agent-logs.jsonl"
    lines = []
    for t in load_suite("smoke", None):
        turns = [i for i, m in enumerate(t.messages) if m["role"] == "assistant"]
        cut = turns[2] if len(turns) > 2 else len(t.messages)
        lines.append(json.dumps({"id": t.id.replace("/", "-"), "messages": list(t.messages[:cut])}) + "\n")
    path.write_text("".join(lines))
    return path


LOG_CONFIG = {"cascade": {"enabled": False}, "oracle": {"feedback": "none", "heldout": False},
              "eval": {"fidelity_bound": 0.02}, "proposer": {"kind": "synthesis", "per_generation": 1, "parents": 1}}


def test_a_search_on_logs_judges_by_fidelity_and_exports(log_file, tmp_path, tiny_plain):
    config = tiny_config(data={"suite": str(log_file), "train_tasks": 2, "heldout_tasks": 1}, **LOG_CONFIG)
    run = tmp_path / "run"
    Search(config, run, engine=tiny_plain, progress=False).run()
    rows = [r | {"probes": json.loads(r["probes"])} for r in EvalStore(run / "evaluations.jsonl").rows()]
    assert rows and all(r["n_probes"] == 1 and r["probes"][0]["kind"] == "fidelity" for r in rows if r["ok"])
    full = [r for r in rows if r["policy"] == "expert:full" or r["policy_key"].startswith("full")]
    assert full and all(r["n_passed"] == 1 for r in full)  # the full cache loses nothing: it passes every one
    assert any("worst change of log-likelihood per token" in r["probes"][0]["generated"] for r in rows if r["ok"])
    train = {r["task_id"] for r in rows if r["split"] == "train"}
    held = {r["task_id"] for r in rows if r["split"] == "heldout"}
    assert train and held and not train & held  # split by conversation
    archive = Archive.load(run / "archive.json")
    assert archive.front() and (run / "pick.json").exists()
    from rsi.cli import main

    assert main(["export", str(run), "--out", str(tmp_path / "policy.py")]) == 0
    assert (tmp_path / "policy.py").read_text().startswith('"""')


def test_settings_a_log_suite_cannot_have_are_refused_by_name(log_file, tmp_path, tiny_plain):
    for k, (key, value) in enumerate((("cascade", {"enabled": True}), ("oracle", {"feedback": "evidence"}),
                                      ("oracle", {"heldout": True}))):
        changes = {**LOG_CONFIG, key: {**LOG_CONFIG[key], **value}}
        config = tiny_config(data={"suite": str(log_file), "train_tasks": 2, "heldout_tasks": 1}, **changes)
        with pytest.raises(ConfigError, match=r"is agent logs without probes \(judged by fidelity\)") as err:
            Search(config, tmp_path / f"run{k}", engine=tiny_plain, progress=False).run()
        assert err.value.field == f"{key}.{next(iter(value))}"
