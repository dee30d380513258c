"""``rsi.rundir.RunDir`` says what a run directory is: its track (recorded in ``run.json`` when a run
starts, recognised by the survival track's marks in a directory from before the record) and its
typed config, read once, with errors that name the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsi.cache.export import run_eval_settings, run_frame_guard
from rsi.cache.search import Search, load_run_config
from rsi.rundir import CACHE, RUN_FILE, SURVIVAL, RunDir, RunDirError
from rsi.survival.config import EvolveConfig
from rsi.survival.config import config_from_dict as survival_config
from rsi.survival.evolve import SurvivalEvolution
from rsi.tracking import Tracker
from tests.rsi.conftest import tiny_config
from tests.rsi.test_survival_evolve import TINY as SURVIVAL_TINY


@pytest.fixture
def cache_run(tmp_path) -> Path:
    """A cache search's directory as ``Search`` leaves it when it starts (no evaluation is run)."""
    run = tmp_path / "cache"
    Search(tiny_config(), run, tracker=Tracker())
    return run


@pytest.fixture
def survival_run(tmp_path) -> Path:
    """A survival evolution's directory as ``SurvivalEvolution`` leaves it when it starts."""
    run = tmp_path / "survival"
    SurvivalEvolution(survival_config(SURVIVAL_TINY), run)
    return run


def test_a_cache_search_records_its_track_and_its_config_reads_typed(cache_run):
    assert json.loads((cache_run / RUN_FILE).read_text()) == {"track": CACHE}
    run = RunDir(cache_run)
    assert run.track == CACHE and not run.is_survival
    assert run.cache_config == tiny_config() and run.config is run.cache_config
    assert load_run_config(cache_run) == tiny_config()
    with pytest.raises(RunDirError, match="holds a cache run, not a survival one"):
        _ = run.survival_config


def test_a_survival_evolution_records_its_track_and_its_config_reads_typed(survival_run):
    assert json.loads((survival_run / RUN_FILE).read_text()) == {"track": SURVIVAL}
    run = RunDir(survival_run)
    assert run.track == SURVIVAL and run.is_survival
    config = run.survival_config
    assert isinstance(config, EvolveConfig) and config == survival_config(SURVIVAL_TINY)
    assert run.config is config
    with pytest.raises(RunDirError, match="holds a survival run, not a cache one"):
        _ = run.cache_config
    # what the cache track's readers take from a survival run: nothing (as before)
    assert run_frame_guard(survival_run) is False and run_eval_settings(survival_run) == {}
    with pytest.raises(RunDirError, match="survival run"):
        load_run_config(survival_run)


def test_old_run_directories_without_the_record_keep_their_track(cache_run, survival_run):
    for path in (cache_run, survival_run):
        (path / RUN_FILE).unlink()
    assert RunDir(cache_run).track == CACHE and RunDir(survival_run).track == SURVIVAL
    assert RunDir(survival_run).survival_config == survival_config(SURVIVAL_TINY)
    # a resumed old run records its track, and keeps working
    SurvivalEvolution(survival_config(SURVIVAL_TINY), survival_run)
    Search(tiny_config(), cache_run, tracker=Tracker())
    assert json.loads((survival_run / RUN_FILE).read_text()) == {"track": SURVIVAL}
    assert json.loads((cache_run / RUN_FILE).read_text()) == {"track": CACHE}


@pytest.mark.parametrize("name, content, track", [
    ("archive.json", {"kind": "survival", "candidates": []}, SURVIVAL),  # the survival archive's kind
    ("headline.json", {"unit": "trace"}, SURVIVAL),  # the survival headline's unit
    ("config.json", {"families": ["lru"]}, SURVIVAL),  # the survival config's families
    ("archive.json", {"candidates": []}, CACHE),  # the cache archive has no kind
    ("headline.json", {"comparisons": [], "headroom": None}, CACHE),
    ("config.json", {"eval": {"frame_guard": True}}, CACHE),
    ("archive.json", "{not json", CACHE),  # an unreadable file marks nothing
    (None, None, CACHE),  # an empty directory
])
def test_each_survival_mark_alone_decides_an_old_directory(tmp_path, name, content, track):
    if name is not None:
        (tmp_path / name).write_text(content if isinstance(content, str) else json.dumps(content))
    assert RunDir(tmp_path).track == track


def test_the_record_wins_and_a_bad_record_names_its_file(tmp_path):
    (tmp_path / "archive.json").write_text(json.dumps({"kind": "survival", "candidates": []}))
    (tmp_path / RUN_FILE).write_text(json.dumps({"track": CACHE}))
    assert RunDir(tmp_path).track == CACHE
    (tmp_path / RUN_FILE).write_text(json.dumps({"track": "cash"}))
    with pytest.raises(RunDirError, match=r"run\.json: 'track' must be one of cache, survival, got 'cash'"):
        _ = RunDir(tmp_path).track


def test_a_run_of_the_other_track_is_refused_before_it_writes(cache_run, survival_run):
    before = (cache_run / "config.json").read_text()
    with pytest.raises(RunDirError, match="holds a run with another config"):
        SurvivalEvolution(survival_config(SURVIVAL_TINY), cache_run)
    assert (cache_run / "config.json").read_text() == before
    with pytest.raises(RunDirError, match="holds a survival run, not a cache one"):
        RunDir(survival_run).record_track(CACHE)


def test_a_missing_config_is_a_run_dir_error_naming_it(tmp_path):
    run = RunDir(tmp_path)
    assert not run.has_config()
    for read in (lambda: run.cache_config, run.raw_config, lambda: load_run_config(tmp_path)):
        with pytest.raises(RunDirError, match=rf"{tmp_path} is not a search run directory: it holds no config\.json"):
            read()
    assert run_frame_guard(tmp_path) is False and run_eval_settings(tmp_path) == {}  # as before: nothing to take


@pytest.mark.parametrize("text, words", [
    ("{not json", "line 1 column 2: not valid JSON"),
    ("", "empty"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('{"eval": [true]}', "eval must be a mapping"),
    ('{"generations": -1}', "generations must be >= 0"),
    ('{"evaluation": {}}', "unknown config key 'evaluation'"),
])
def test_a_malformed_cache_config_is_a_run_dir_error_naming_the_file(tmp_path, text, words):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(RunDirError) as err:
        _ = RunDir(tmp_path).config
    assert f"{tmp_path / 'config.json'}" in str(err.value) and words in str(err.value)
    with pytest.raises(RunDirError, match=r"config\.json"):
        run_frame_guard(tmp_path)


def test_a_malformed_survival_config_is_a_run_dir_error_naming_the_file(survival_run):
    raw = json.loads((survival_run / "config.json").read_text())
    del raw["train"]
    (survival_run / "config.json").write_text(json.dumps(raw))
    with pytest.raises(RunDirError, match=r"config\.json: not a survival config \(KeyError: 'train'\)"):
        _ = RunDir(survival_run).survival_config


def test_the_config_is_read_once_and_again_after_the_run_dir_writes_it(cache_run):
    run = RunDir(cache_run)
    first = run.cache_config
    (cache_run / "config.json").write_text("{not json")  # behind the object's back: not read again
    assert run.cache_config is first and run.raw_config()["name"] == "tiny-test"
    run.write("config.json", tiny_config(name="renamed").to_dict())
    assert run.cache_config.name == "renamed"


def test_the_cache_readers_take_the_typed_config(tmp_path, cache_run):
    assert run_frame_guard(cache_run) is False
    settings = run_eval_settings(cache_run)
    assert settings["suite"] == "smoke" and settings["limit"] == 1 and settings["model"] == "tiny-random"
    assert settings["frame_guard"] is False and settings["dtype"] == tiny_config().dtype
    (tmp_path / "config.json").write_text(json.dumps({"eval": {"frame_guard": True}}))
    assert run_frame_guard(tmp_path) is True
    assert run_eval_settings(tmp_path) == {"frame_guard": True}  # only what the config holds


def test_a_finished_search_stops_writing_its_log(finished):
    """The run's log handler is removed when the search ends: a later search in the same process
    does not write into this run's search.log (nor keep its file open)."""

    from rsi.cache.search import log

    before = (finished / "search.log").read_text()
    assert "attempt 1" in before
    log.warning("a line logged after the search ended")
    assert (finished / "search.log").read_text() == before
    path = str((finished / "search.log").absolute())
    assert not [h for h in log.handlers if getattr(h, "baseFilename", None) == path]
