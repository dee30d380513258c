"""``akv pool``: two tiny searches judged on distinct held-out tasks, pooled from their stores and
checked against their own headlines and sums recomputed here from the stored rows; runs that
share a task, a run given twice and a directory without a headline are refused by name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.errors import AKVError
from rsi.cache.headline import read_headline
from rsi.cache.pooling import pool_runs
from rsi.cache.search import Search
from rsi.cli import main
from rsi.store import EvalStore
from rsi.tracking import Tracker
from tests.rsi.conftest import tiny_config


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, tiny_plain) -> tuple[Path, Path]:
    """The same config judged on held-out tasks 1-3 and 4-6 (like two confirmations)."""
    root = tmp_path_factory.mktemp("pool")
    runs = []
    for offset in (0, 3):
        config = tiny_config(generations=0, experts=["rolling_drop:keep_tool_responses=1"],
                             data={"heldout_tasks": 3, "heldout_offset": offset})
        run = root / f"offset-{offset}"
        Search(config, run, engine=tiny_plain, tracker=Tracker()).run()
        runs.append(run)
    return runs[0], runs[1]


def _heldout_rows(run: Path, policy_id: str) -> dict[str, dict]:
    from rsi.cache.export import load_archive, pick, spec_of

    key = spec_of(run, pick(load_archive(run), policy_id)).key
    return {r["task_id"]: r for r in EvalStore(run / "evaluations.jsonl").rows()
            if r["policy_key"] == key and r["split"] == "heldout" and r["ok"]}


def test_one_run_pooled_is_its_own_headline(two_runs):
    run = two_runs[0]
    config = json.loads((run / "config.json").read_text())
    pooled = pool_runs([run], samples=int(config["bootstrap_samples"]), seed=int(config["seed"]))
    rows = read_headline(run)
    assert rows and [p.versus for p in pooled] == [r.versus for r in rows]
    for p, row in zip(pooled, rows):
        d = p.delta
        assert p.runs[0].row == row
        assert (d.cost_delta_pct, d.cost_delta_ci95, d.pass_delta, d.pass_delta_ci95, d.n_tasks, d.significant) == (
            row.cost_delta_pct, row.cost_delta_ci95, row.pass_delta, row.pass_delta_ci95, row.heldout_tasks,
            row.significant)


def test_two_runs_pool_every_task_of_both(two_runs, tmp_path, capsys):
    pooled = pool_runs(two_runs, samples=500, seed=1)
    assert pooled
    for p in pooled:
        assert len(p.runs) == 2 and not set(p.runs[0].task_ids) & set(p.runs[1].task_ids)
        ours, theirs = [], []  # (cost, passed, probes) of each run's chosen policy and of the expert
        for r in p.runs:
            a, b = _heldout_rows(Path(r.run_dir), r.row.policy_id), _heldout_rows(Path(r.run_dir), r.row.versus_id)
            assert sorted(r.task_ids) == sorted(set(a) & set(b))
            ours += [a[t] for t in r.task_ids]
            theirs += [b[t] for t in r.task_ids]
        cost = 100 * (sum(x["cost_cents"] for x in ours) / sum(x["cost_cents"] for x in theirs) - 1)
        rate = [sum(x["n_passed"] for x in xs) / sum(x["n_probes"] for x in xs) for xs in (ours, theirs)]
        assert p.delta.n_tasks == 6 == len(ours)
        assert p.delta.cost_delta_pct == pytest.approx(cost) and p.delta.pass_delta == pytest.approx(rate[0] - rate[1])
        assert p.delta.cost_delta_ci95[0] <= p.delta.cost_delta_pct <= p.delta.cost_delta_ci95[1]

    out = tmp_path / "pooled.json"
    assert main(["pool", str(two_runs[0]), str(two_runs[1]), "--samples", "500", "--seed", "1",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    written = json.loads(out.read_text())
    assert written["suites"] == ["smoke"] and written["samples"] == 500
    assert written["comparisons"] == [p.to_dict() for p in pooled]
    lines = [line.split() for line in printed.splitlines() if line.startswith("  pooled ")]
    assert len(lines) == len(pooled)
    for p, words in zip(pooled, lines):
        assert f"vs {p.versus}" in printed
        assert words[1:5] == ["2", "runs", "6", "tasks"] and words[6] == f"{p.delta.cost_delta_pct:+.1f}%"


def test_runs_sharing_a_task_a_run_twice_and_a_run_without_headline_are_refused(two_runs, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(two_runs[0], copy)  # the same held-out tasks in another directory
    with pytest.raises(AKVError, match=r"is in comparisons 0 and 1: pooled tasks must be distinct \(runs: "):
        pool_runs([two_runs[0], copy])
    with pytest.raises(AKVError, match="is given twice"):
        pool_runs([two_runs[0], two_runs[1], Path(str(two_runs[0]) + "/")])
    bare = tmp_path / "bare"
    bare.mkdir()
    assert main(["pool", str(two_runs[0]), str(bare)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("akv pool: ") and f"{bare} has no headline.json" in err and len(err.splitlines()) == 1
    with pytest.raises(AKVError, match="is not a run directory"):
        pool_runs([two_runs[0], tmp_path / "missing"])
    with pytest.raises(AKVError, match="at least one run directory"):
        pool_runs([])
    with pytest.raises(AKVError, match="samples must be an integer >= 100, got 99"):
        pool_runs([two_runs[0]], samples=99)
    for bad in ('[{"policy": "g1-p0"}]', '[3]', '[{"policy": "a", "versus": "b", "cost_delta_pct": "x"}]',
                '{"comparisons": [3], "headroom": null}'):
        (bare / "headline.json").write_text(bad)  # a hand-edited headline: one line naming the file
        with pytest.raises(AKVError, match=r"headline.json: entry 0 is not a headline row \("):
            pool_runs([bare])
    for bad in ('{"comparisons": 3}', '{"comparisons": [], "headroom": 1}', '"text"'):
        (bare / "headline.json").write_text(bad)
        with pytest.raises(AKVError, match=r"headline.json: expected"):
            pool_runs([bare])


def test_the_pooled_line_says_how_many_runs_matched_nothing_on_train():
    from evals.paired import PairedDelta
    from rsi.cache.headline import HeadlineRow
    from rsi.cache.pooling import PooledComparison, RunComparison, pooled_lines

    def row(matched: bool) -> HeadlineRow:
        return HeadlineRow("g1-p0", "a", "expert:standard", "b", matched, -12.0, (-15.0, -9.0), 0.1, (0.0, 0.2), 10,
                           True)

    runs = (RunComparison("runs/one", row(True), ("t1",)), RunComparison("runs/two", row(False), ("t2",)))
    lines = pooled_lines([PooledComparison("expert:standard", runs, PairedDelta(-12.0, (-14.0, -10.0), 0.1,
                                                                                  (0.0, 0.2), 20, 500))])
    assert lines[0] == "vs expert:standard" and lines[2].endswith("(matched nothing on train)")
    assert lines[3].endswith("significantly cheaper (1 of 2 runs matched nothing on train)")


def test_a_pool_carries_its_runs_provenance_or_says_what_is_unknown(two_runs):
    from rsi.provenance import RUN_FILE, capture, head_commit, pooled, read_run, record_run

    unrecorded = pooled(two_runs)
    assert unrecorded.commit is None and {"commit", "configs", "model"} <= set(unrecorded.unknown)
    try:
        for run in two_runs:
            record_run(run, capture(measures=["rsi"], model="tiny-random", dtype="float32", judge="tiny (loglik)"))
        record_run(two_runs[0], capture(measures=["rsi"]))  # a resume is added, the start kept
        assert read_run(two_runs[0]).model == "tiny-random"
        assert len(json.loads((two_runs[0] / RUN_FILE).read_text())["resumes"]) == 1
        both = pooled(two_runs)
        assert both.commit == head_commit() and both.model == "tiny-random" and both.unknown == ()
        assert both.measures == ("engine", "evals", "search_spaces", "rsi")
    finally:
        for run in two_runs:
            (run / RUN_FILE).unlink(missing_ok=True)
