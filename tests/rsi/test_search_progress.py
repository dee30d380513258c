"""The search's progress bar: evaluations done out of planned, per evaluation, also from the store."""

from __future__ import annotations

import json
import re
import shutil

from rsi.cache.progress import SearchProgress, plan_evaluations
from rsi.cache.search import Search
from tests.rsi.conftest import TINY, tiny_config


def test_the_plan_counts_what_the_config_implies():
    # TINY: 2 experts on 2 train + 1 held-out task; 1 seed and 1 generation x 2 proposals, each tuned
    # with 2 trials on 2 train tasks; once the picks are frozen, on the held-out task: at most 1 front
    # member, and each comparator (expert, tuned expert, arm) with its match on train.
    assert (TINY["optuna"]["trials"], TINY["data"]["train_tasks"], TINY["heldout_front"]) == (2, 2, 1)
    # experts on train, programs x trials x train, then held-out once: front + (comparator and its match) each
    assert plan_evaluations(tiny_config(), 2, 1).total == 2 * 2 + (1 + 1 * 2) * 2 * 2 + (1 + 2 * 2) * 1
    assert plan_evaluations(tiny_config(generations=3), 2, 1).total == 4 + (1 + 3 * 2) * 4 + 5
    assert plan_evaluations(tiny_config(ablation=["random", "hillclimb"]), 2, 1).heldout == 1 + 2 * 4


def test_units_settle_the_total_and_keys_count_once():
    p = SearchProgress(10, enabled=False)
    with p.unit(6):
        for key in ("a", "b", "a", "c"):
            p.advance(key)
    assert (p.done, p.total) == (3, 7)
    with p.unit(4):
        p.advance("b")  # seen before: not counted again
    assert (p.done, p.total) == (3, 3)


def test_the_bar_advances_per_evaluation_also_from_the_store(finished, tmp_path, tiny_plain, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    evals = run / "evaluations.jsonl"
    lines = evals.read_text().splitlines()
    keys = {json.loads(line)["key"] for line in lines}
    evals.write_text("\n".join(lines[:-3]) + "\n")  # three evaluations to compute, the rest from the store
    capsys.readouterr()
    search = Search(tiny_config(), run, engine=tiny_plain, progress=True)
    search.run()
    out, err = capsys.readouterr()
    p = search.progress
    assert p.planned == 21 and p.drawn
    assert p.done == p.total == len(keys) == len(search.store) and p.bar.n == p.done
    assert len(evals.read_text().splitlines()) == len(lines)  # exactly the three were computed
    assert f"{len(keys)}/{len(keys)}" in err and re.search(r"search: .*\d+/21 ", err)
    assert "expert expert:full" in out and "generation 1 done" in out


def test_no_bar_off_a_terminal_but_the_per_candidate_lines(finished, tmp_path, tiny_plain, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    capsys.readouterr()
    search = Search(tiny_config(), run, engine=tiny_plain)  # progress=None: a bar only on a terminal
    search.run()
    out, err = capsys.readouterr()
    assert not search.progress.drawn and search.progress.done == len(search.store)
    assert "eval/s" not in err and "search: " not in err
    for line in ("expert expert:full", "seed:rolling_drop", "generation 0 done", "generation 1 done"):
        assert line in out
