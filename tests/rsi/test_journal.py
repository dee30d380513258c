"""The journal storage a screen writes its proxy study to: the same records as Optuna's own
journal file, made durable by one fsync instead of one per record."""

from __future__ import annotations

import json
import os

import optuna

from rsi.tuning import make_storage


def _study() -> optuna.Study:
    study = optuna.create_study(directions=["minimize", "maximize"], sampler=optuna.samplers.RandomSampler(seed=1))
    study.optimize(lambda t: (t.suggest_float("a", 0, 1), t.suggest_int("b", 0, 9)), n_trials=12)
    return study


def _records(path) -> list[dict]:
    """The journal's records, without the writer's id (random per storage object)."""
    return [{k: v for k, v in json.loads(line).items() if k != "worker_id"} for line in path.read_text().splitlines()]


def test_a_study_written_synced_once_is_the_journal_optuna_writes(tmp_path, monkeypatch):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    trials = _study().get_trials(deepcopy=False)
    syncs: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (syncs.append(fd), real(fd))[1])

    plain = JournalStorage(JournalFileBackend(str(tmp_path / "plain.journal")))
    optuna.create_study(study_name="s", storage=plain, directions=["minimize", "maximize"]).add_trials(trials)
    per_record = len(syncs)
    syncs.clear()
    ours = make_storage("journal", tmp_path, "ours")
    with ours.synced_once():
        optuna.create_study(study_name="s", storage=ours, directions=["minimize", "maximize"]).add_trials(trials)
    assert len(syncs) == 1 and per_record > len(trials)
    assert _records(tmp_path / "ours.journal") == _records(tmp_path / "plain.journal")
    again = optuna.load_study(study_name="s", storage=make_storage("journal", tmp_path, "ours"))
    assert [(t.params, t.values) for t in again.trials] == [(t.params, t.values) for t in trials]
    ours.create_new_study([optuna.study.StudyDirection.MINIMIZE], "later")  # outside: Optuna's own sync again
    assert len(syncs) == 2
