"""Suites on disk: versioned, byte-identical rebuilds, typed loading, foreign task sets."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path

import pytest

from evals.errors import TaskError
from evals.tasks import build_suite, generate_split, get_suite_spec, load_suite, save_jsonl, suite_dir


def files(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> Path:
    return build_suite("smoke", out_dir=tmp_path_factory.mktemp("a"), measure_tokens=False).path


def test_build_twice_gives_identical_files(smoke, tmp_path):
    again = build_suite("smoke", out_dir=tmp_path, measure_tokens=False)
    assert again.built and again.path == tmp_path / f"smoke-v{get_suite_spec('smoke').version}"
    assert files(smoke) == files(again.path)
    assert all(filecmp.cmp(smoke / f, again.path / f, shallow=False) for f in files(smoke))


def test_manifest_and_reuse(smoke):
    manifest = json.loads((smoke / "manifest.json").read_text())
    assert manifest["generator_version"] and manifest["counts"] == {"train": 8, "heldout": 10}
    assert "multi-hop" in manifest["families"]["heldout"] and "multi-hop" not in manifest["families"]["train"]
    reused = build_suite("smoke", out_dir=smoke.parent)
    assert not reused.built and reused.counts == manifest["counts"]


def test_load_gives_the_generated_tasks(smoke):
    spec = get_suite_spec("smoke")
    for split in ("train", "heldout"):
        loaded = load_suite(smoke, split)
        assert [t.to_record() for t in loaded] == [t.to_record() for t in generate_split(spec, split)]
    assert len(load_suite(smoke, None)) == 18
    with pytest.raises(TaskError, match="splits: train, heldout"):
        load_suite(smoke, "test")


def test_registered_name_builds_under_the_cache_dir(tmp_path, monkeypatch):
    import evals.tasks.storage as storage

    monkeypatch.setenv("AKV_CACHE_DIR", str(tmp_path))  # (its models/ is empty: keep the tokenizer out)
    monkeypatch.setattr(storage, "token_counter", lambda: lambda messages: 7 * len(messages))
    tasks = load_suite("smoke", "heldout")
    where = suite_dir("smoke", get_suite_spec("smoke").version)
    assert (where / "manifest.json").exists() and str(where).startswith(str(tmp_path))
    assert [t.n_tokens for t in tasks] == [7 * len(t.messages) for t in tasks]
    with pytest.raises(TaskError, match="not built"):
        load_suite("default", "train", build=False)


@pytest.mark.slow
def test_token_lengths_with_the_gemma_tokenizer():
    """Measured lengths track the targets (the first run converts the tokenizer, later ones load it in ~2 s)."""
    from evals.tasks import generate_task, measure

    tasks = measure([generate_task("recent-only", "train", s, target_tokens=n) for s, n in ((1, 1500), (2, 6000))])
    short, long = (t.n_tokens or 0 for t in tasks)
    assert 1000 < short < 2500 and 4000 < long < 8000


def test_jsonl_and_single_dataset_task_sets(smoke, tmp_path):
    import datasets

    from evals.tasks.storage import _features, _row

    tasks = load_suite(smoke, None)
    path = save_jsonl(tasks, tmp_path / "mine.jsonl")
    assert [t.to_record() for t in load_suite(path, None)] == [t.to_record() for t in tasks]
    assert {t.split for t in load_suite(path, "heldout")} == {"heldout"}
    with pytest.raises(TaskError, match="has no split 'dev'"):
        load_suite(path, "dev")
    datasets.Dataset.from_list([_row(t) for t in tasks], features=_features()).save_to_disk(str(tmp_path / "ds"))
    assert len(load_suite(tmp_path / "ds", "train")) == 8


def test_unknown_sources_are_named(tmp_path):
    suites = r"not a registered suite \(default, long, smoke, horizon, horizon-long, mixed\)"
    with pytest.raises(TaskError, match=suites):
        load_suite("no-such-suite")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json}\n")
    with pytest.raises(TaskError, match=r"bad\.jsonl: line 1: not JSON \(Expecting property name"):
        load_suite(bad, None)
