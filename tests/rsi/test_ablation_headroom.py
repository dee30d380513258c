"""A tiny search with the synthesis proposer, the three baseline arms, guide tasks and the held-out
headroom, end to end: each arm spends the generations' budget, its choice is a headline comparator,
the picks are frozen before any held-out evaluation, the guide tasks reach the proposer without a
model evaluation, the headroom's numbers are the stored evaluations, the report and akv pool read them."""

from __future__ import annotations

import json

import pytest

from evals.cache.fidelity import ProbeOutcome
from evals.tasks import load_suite, select_tasks
from rsi.archive import Status
from rsi.cache.archive import Archive
from rsi.cache.headline import read_headline, read_headroom
from rsi.cache.search import Search
from rsi.cli import main
from rsi.config import ConfigError
from rsi.store import EvalStore
from tests.rsi.conftest import tiny_config

CONFIG = {"proposer": {"kind": "synthesis", "per_generation": 2, "parents": 2, "candidates": 3},
          "cascade": {"enabled": True, "trials": 6, "promote": 1},
          "ablation": ["tuning-only", "random", "hillclimb"],
          "oracle": {"heldout": True, "budget": 2, "bound_budget": 1, "single_budget": 1},
          "data": {"guide_tasks": 2}}


@pytest.fixture(scope="module")
def searched(tmp_path_factory, tiny_plain):
    search = Search(tiny_config(**CONFIG), tmp_path_factory.mktemp("ablation") / "run", engine=tiny_plain,
                    progress=False)
    search.run()
    return search


@pytest.fixture(scope="module")
def run(searched):
    return searched.run_dir


def test_guide_tasks_reach_the_proposer_without_a_model_evaluation(searched):
    guide, train = searched.guide, searched.train
    ids = {t.id for t in guide}
    assert len(guide) == 2 and not ids & {t.id for t in train + searched.heldout}
    assert [t.id for t in select_tasks(load_suite("smoke", "train"), 4)] == [t.id for t in train + guide]
    stored = {r["task_id"] for r in EvalStore(searched.run_dir / "evaluations.jsonl").rows()}
    assert not ids & stored  # the model never ran on them
    hindsight = searched.hindsight
    assert hindsight is not None and len(hindsight.needed) == len(train) + len(guide)
    for task, needed in zip(guide, hindsight.needed[len(train):]):  # every probe assumed passed by the full cache
        evidence = [set(p.evidence_ids) for p in task.probes]
        assert set(needed) <= set().union(*evidence) and all(e & set(needed) for e in evidence if e)
    proxy = searched.cascade.proxy
    assert proxy is not None and all(proxy.table.outcomes[(t.id, i)] == ProbeOutcome(True, False)
                                     for t in guide for i in range(len(t.probes)))


def test_the_tuning_only_arm_spends_the_generations_budget_and_joins_the_headline(run):
    ablation = json.loads((run / "ablation.json").read_text())
    budget, spent = ablation["budget_train_evaluations"], ablation["spent_train_evaluations"]
    assert budget > 0 and spent >= budget
    arm = ablation["candidates"]
    assert {c["proposer"] for c in arm} <= {"seed", "tuning-only"} and any(c["proposer"] == "tuning-only" for c in arm)
    archive = Archive.load(run / "archive.json")
    comparator = next(c for c in archive.candidates if c.label == "tuning-only")
    assert comparator.expert and comparator.heldout is not None
    assert all(c.proposer != "tuning-only" for c in archive.front())  # nothing of the arm is in the evolved front
    assert "tuning-only" in [r.versus for r in read_headline(run) or []]
    assert all(c.proposer.startswith(("seed", "synthesis:")) for c in archive.scored())


def test_the_random_and_hillclimb_arms_spend_the_budget_and_join_the_headline(run):
    from search_spaces import check_program
    from search_spaces.cache import rules

    arms = {a["arm"]: a for a in json.loads((run / "ablation.json").read_text())["arms"]}
    assert list(arms) == ["tuning-only", "random", "hillclimb"]
    rows = {r.versus: r for r in read_headline(run) or []}
    archive = Archive.load(run / "archive.json")
    for name in ("random", "hillclimb"):
        arm = arms[name]
        assert arm["spent_train_evaluations"] >= arm["budget_train_evaluations"] > 0, arm
        made = [c for c in arm["candidates"] if c["proposer"] == name]
        assert made and all(c["label"].startswith(name[0]) for c in made)
        for c in made:  # programs of the synthesis grammar that the checker accepts
            source = (run / "programs" / f"{c['program']}.py").read_text()
            assert check_program(source).ok and rules.read(source) is not None
        assert name in rows and archive.get(rows[name].versus_id).heldout is not None
    assert all(not c["parents"] for c in arms["random"]["candidates"] if c["proposer"] == "random")
    climbed = [c for c in arms["hillclimb"]["candidates"] if c["proposer"] == "hillclimb"]
    ids = {c["id"] for c in arms["hillclimb"]["candidates"]}
    assert all(len(c["parents"]) == 1 and c["parents"][0] in ids for c in climbed)


def test_the_picks_are_frozen_before_any_held_out_evaluation(run):
    from rsi.cache.protocol import PICK_FILE, sha256

    frozen = json.loads((run / PICK_FILE).read_text())
    archive = Archive.load(run / "archive.json")
    with_heldout = {c.id for c in archive.candidates if c.heldout is not None}
    assert with_heldout and with_heldout <= {p["id"] for p in frozen["picks"]}
    for p in frozen["picks"]:
        c = archive.get(p["id"])
        if c.spec == "program":
            assert p["program_sha256"] == sha256((run / "programs" / f"{c.program}.py").read_text())
            assert p["size"] == c.size > 0
    splits = [r["split"] for r in EvalStore(run / "evaluations.jsonl").rows()]
    first_heldout = splits.index("heldout")
    assert "train" not in splits[first_heldout:]  # every train evaluation (generations, arms) came first


def test_the_headroom_is_made_of_stored_model_evaluations(run):
    h = read_headroom(run)
    assert h is not None and h["tasks"] == 1
    costs = h["costs_cents"]
    assert costs["oracle"] <= costs["full"] * (1 + 1e-12) and costs["per_task_rolling"] <= costs["full"] * (1 + 1e-12)
    rows = [r for r in EvalStore(run / "evaluations.jsonl").rows() if r["split"] == "heldout" and r["ok"]]
    oracle_rows = [r for r in rows if r["policy"] == "oracle"]
    assert oracle_rows and all(r["fidelity"] == "model" for r in oracle_rows)
    detail = json.loads((run / "headroom.json").read_text())
    assert detail["tasks"][0]["oracle"]["cost_cents"] == pytest.approx(costs["oracle"])
    check = h["oracle_check"]
    assert check["stored_results"] >= len(oracle_rows) and isinstance(check["cheaper_than_the_oracle"], list)
    if h["share_captured"] is not None:
        want = (costs["tuned_seed"] - costs["evolved"]) / (costs["tuned_seed"] - costs["oracle"])
        assert h["share_captured"] == pytest.approx(want)
    # the rule table: one stored model evaluation per held-out task, dearer than the oracle under the
    # evidence rule's choice, its share computed from the same summed costs
    keys = {t["policy_key"] for t in detail["rule_table"]["per_task"].values()}
    table_rows = [r for r in rows if r["policy_key"] in keys]  # (stored under the first label of that schedule)
    assert len(table_rows) == 1 and table_rows[0]["fidelity"] == "model"
    assert costs["rule_table"] == pytest.approx(table_rows[0]["cost_cents"])
    assert detail["rule_table"]["hindsight"] and h["rule_table"]["kept"] == detail["rule_table"]["kept"]
    if h["share_of_table_gap"] is not None:
        want = (costs["tuned_seed"] - costs["evolved"]) / (costs["tuned_seed"] - costs["rule_table"])
        assert h["share_of_table_gap"] == pytest.approx(want)


def test_duplicates_are_recorded_not_scored(run):
    archive = Archive.load(run / "archive.json")
    state = json.loads((run / "state.json").read_text())
    arms = json.loads((run / "ablation.json").read_text())["arms"]
    in_arms = [c for a in arms for c in a["candidates"] if c["status"] == Status.DUPLICATE.value]
    dups = [c for c in archive.candidates if c.status is Status.DUPLICATE]
    assert state.get("duplicates", 0) == len(dups) + len(in_arms)  # (the arms' are in ablation.json)
    assert all(c.train is None and "decides as program" in c.reason for c in dups)


def test_the_report_and_the_pool_read_the_ablation(run, capsys):
    html = (run / "report.html").read_text()
    assert "Headroom (held-out)" in html and "Baseline arms" in html and "hindsight oracle" in html
    assert all(f"<td>{arm}</td>" in html for arm in ("tuning-only", "random", "hillclimb"))
    assert "rule table: role, tool, length (hindsight)" in html
    status = main(["pool", str(run), "--versus", "tuning-only", "--samples", "200"])
    out = capsys.readouterr().out
    assert status == 0 and "vs tuning-only" in out and "expert:full" not in out
    assert main(["pool", str(run), "--versus", "nothing-like-this", "--samples", "200"]) == 2
    assert "no comparison with 'nothing-like-this'" in capsys.readouterr().err


def test_guide_tasks_need_train_tasks_left_over(tmp_path, tiny_plain):
    config = tiny_config(data={"train_tasks": 0, "guide_tasks": 2})
    with pytest.raises(ConfigError, match=r"data\.guide_tasks: the train split has 8 tasks") as err:
        Search(config, tmp_path / "run", engine=tiny_plain, progress=False).run()
    assert err.value.field == "data.guide_tasks"
    assert not list((tmp_path / "run").glob("evaluations.jsonl")) or not EvalStore(
        tmp_path / "run" / "evaluations.jsonl").rows()
