"""Tuned experts and the paired held-out headline: the choice rules against hand-worked cases, the
tuned expert against its stored Optuna study, headline.json from a tiny search, reproducibility."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace
from typing import Any

import optuna
import pytest

from evals.cache.evaluator import PolicySpec
from rsi.cache.archive import Archive, Candidate
from rsi.cache.expert_tuning import ExpertTrial, choose, space
from rsi.cache.headline import (
    HeadlineRow,
    TrainMatch,
    build_headline,
    describe,
    headline_lines,
    heldout_targets,
    pick_policy,
    read_headline,
    read_headroom,
    write_headline,
)
from rsi.cache.metrics import Metrics
from rsi.cache.report import write_report
from rsi.cache.search import Search
from rsi.config import ConfigError
from rsi.tracking import Tracker
from tests.rsi.conftest import TINY, tiny_config

KEYS = {"policy", "versus", "cost_delta_pct", "cost_delta_ci95", "pass_delta", "pass_delta_ci95", "heldout_tasks",
        "significant"}


def _m(pass_rate: float, cost: float) -> Metrics:
    return Metrics(pass_rate, cost, 3, 6)


def _cand(cid: str, held: tuple[float, float] | None, *, expert: bool = False, proposer: str = "seed",
          train: tuple[float, float] = (0.5, 1.0)) -> Candidate:
    return Candidate(cid, cid, cid, {}, 0, proposer=proposer, train=_m(*train),
                     heldout=_m(*held) if held else None, expert=expert, spec="full" if expert else "program")


# ----------------------------------------------------------------- choice rules


def _per_task(passed: list[int], probes: int = 1) -> list[Any]:
    return [SimpleNamespace(task_id=f"t{i}", ok=True, error=None, cost_cents=1.0, n_passed=p,
                            probes=(None,) * probes) for i, p in enumerate(passed)]


def _match(per_task: dict[str, list[int]], probes: int = 1) -> TrainMatch:
    return TrainMatch(lambda c: _per_task(per_task[c.id], probes) if c.id in per_task else None, 500, 0)


def test_the_cheapest_evolved_policy_that_matches_the_expert_on_train_is_compared():
    # held-out results are deliberately the reverse of train: the choice must follow train only.
    # Train: 4 tasks of 2 probes; e passes 6 of 8.
    train = {"a": [2, 2, 2, 1], "b": [1, 1, 2, 1], "c": [2, 2, 1, 1], "d": [2, 2, 2, 2], "w": [1, 1, 2, 2],
             "e": [2, 2, 1, 1], "e2": [2, 2, 2, 2]}
    evolved = [_cand("a", (0.70, 0.5), train=(7 / 8, 1.0)), _cand("b", (0.90, 1.0), train=(5 / 8, 0.5)),
               _cand("c", (0.60, 2.0), train=(6 / 8, 0.8)), _cand("d", None, train=(1.0, 0.1)),
               _cand("w", (0.99, 0.1), train=(6 / 8, 0.3))]
    versus = _cand("e", (0.95, 0.1), expert=True, train=(6 / 8, 0.9))
    match = _match(train, probes=2)
    # w is the cheapest at e's train pass rate, but it loses 2 tasks and wins 2: the paired interval of
    # its train pass difference is [-0.5, +0.5] (all four resampled tasks lost has probability 1/16 >
    # 2.5%), below -0.05. c passes exactly e's tasks (interval [0, 0]) and is cheaper than a.
    assert not match(evolved[4], versus) and match(evolved[2], versus) and match(evolved[0], versus)
    assert pick_policy(evolved, versus, match) == (evolved[2], True)
    higher = _cand("e2", (0.10, 5.0), expert=True, train=(1.0, 0.9))
    assert pick_policy(evolved, higher, match) == (evolved[0], False)  # d: no held-out result; a: most accurate
    assert pick_policy([evolved[3]], versus, match) is None
    assert pick_policy(evolved, _cand("e3", None, expert=True), match) is None
    # without per-task train results on the expert's tasks nothing matches
    assert pick_policy(evolved, versus, _match({"e": [2, 2, 1, 1]}, probes=2)) == (evolved[0], False)
    assert not _match({"c": [2, 2, 1], "e": [2, 2, 1, 1]}, probes=2)(evolved[2], versus)


def test_heldout_targets_are_the_most_accurate_and_each_experts_match_on_train():
    # 10 train tasks of one probe; each candidate passes its first tasks
    first = {"a": 9, "b": 8, "c": 6, "d": 4, "full": 9, "k12": 5, "std": 3, "te": 10}
    match = _match({k: [1] * n + [0] * (10 - n) for k, n in first.items()})
    front = [_cand("a", None, train=(0.9, 1.0)), _cand("b", None, train=(0.8, 0.7)),
             _cand("c", None, train=(0.6, 0.5)), _cand("d", None, train=(0.4, 0.2))]
    experts = [_cand("full", None, expert=True, train=(0.9, 1.1)), _cand("k12", None, expert=True, train=(0.5, 0.8)),
               _cand("std", None, expert=True, train=(0.3, 0.9)), _cand("te", None, expert=True, train=(1.0, 2.0))]
    # a: most accurate (and full's match); c: k12's cheapest match; d: std's; te: nothing matches, a again
    assert [c.id for c in heldout_targets(front, experts, 1, match)] == ["a", "c", "d"]
    assert [c.id for c in heldout_targets(front, experts, 2, match)] == ["a", "b", "c", "d"]
    assert [c.id for c in heldout_targets(front, [], 0, match)] == []


def test_the_tuned_expert_is_the_cheapest_trial_at_the_fixed_settings_pass_rate():
    trials = [ExpertTrial(0, {"k": 12}, _m(0.6, 1.0)), ExpertTrial(1, {"k": 3}, _m(0.5, 0.4)),
              ExpertTrial(2, {"k": 8}, _m(0.6, 0.7)), ExpertTrial(3, {"k": 20}, _m(0.7, 1.2)),
              ExpertTrial(4, {"k": 9}, None, "crashed")]
    assert choose(trials, 0.6) is trials[2]
    assert choose(trials, None) is trials[3]  # no fixed result: best pass, then cost
    assert choose([trials[4]], 0.6) is None


def test_the_expert_spaces_tune_one_setting_and_keep_the_rest():
    def drawn(spec: PolicySpec, value: int) -> dict[str, Any]:
        trial = optuna.trial.FixedTrial({"keep_tool_responses": value, "window": value})
        return space(spec)(trial)

    rd = PolicySpec("rolling_drop", {"keep_tool_responses": 12, "target": "both"})
    assert drawn(rd, 5) == {"keep_tool_responses": 5, "target": "both"}
    std = PolicySpec("standard", {"keep_rounds": 3})
    assert drawn(std, 4096) == {"keep_rounds": 3}  # the default window: the fixed expert's own params
    assert drawn(std, 1000) == {"keep_rounds": 3, "window": 1000}
    study = optuna.create_study()
    params = space(PolicySpec("standard", {"window": 2048}))(study.ask())
    dist = study.trials[0].distributions["window"]
    assert isinstance(dist, optuna.distributions.IntDistribution)
    assert (dist.low, dist.high, dist.log) == (256, 8192, True) and 256 <= params["window"] <= 8192


def test_the_hand_rule_is_tuned_over_its_whole_space():
    hand = PolicySpec("read_drop", {})
    fixed = {"read_after": 1, "min_tokens": 256, "supersede": True}
    assert space(hand)(optuna.trial.FixedTrial(fixed)) == {}  # the fixed setting: the fixed expert's own params
    other = {"read_after": 3, "min_tokens": 900, "supersede": False}
    assert space(hand)(optuna.trial.FixedTrial(other)) == other
    study = optuna.create_study()
    space(hand)(study.ask())
    assert set(study.trials[0].distributions) == set(fixed)


# ----------------------------------------------------------------- headline rows


def _results(costs: list[float], passed: list[int]) -> list[Any]:
    return [SimpleNamespace(task_id=f"t{i}", ok=True, error=None, cost_cents=c, n_passed=p,
                            probes=(None, None)) for i, (c, p) in enumerate(zip(costs, passed, strict=True))]


def test_build_headline_pairs_tasks_and_leaves_out_what_it_cannot_compare():
    cheap, rich = _cand("cheap", (0.5, 1.5), train=(0.5, 1.5)), _cand("rich", (0.75, 3.0), train=(0.75, 3.0))
    fixed = _cand("expert:rolling_drop", (0.5, 2.0), expert=True, proposer="expert", train=(0.5, 2.0))
    tuned = _cand("expert:rolling_drop (tuned)", (0.75, 2.5), expert=True, proposer="expert-tuned",
                  train=(0.75, 2.5))
    unmeasured = _cand("expert:standard", None, expert=True, proposer="expert")
    per_task = {"cheap": _results([1, 2, 1.5], [1, 1, 1]), "rich": _results([3, 3, 3], [2, 1, 2]),
                "expert:rolling_drop": _results([2, 2, 2], [1, 1, 1]),
                "expert:rolling_drop (tuned)": _results([2, 3, 2.5], [2, 2, 0])}
    archive = Archive([fixed, tuned, unmeasured, cheap, rich])
    same_on_train = _results([1, 1, 1], [1, 1, 1])  # every pair matches on train when its pass rate does
    rows = build_headline(archive, lambda c: per_task.get(c.id), lambda c: same_on_train, samples=200, seed=0)
    assert [(r.policy, r.versus, r.matched_pass) for r in rows] == [
        ("cheap", "expert:rolling_drop", True), ("rich", "expert:rolling_drop (tuned)", True)]
    # by hand: 4.5 / 6 and 9 / 7.5 of the per-task costs; (1+1+1)/6 - (1+1+1)/6 and 5/6 - 4/6 of the probes
    assert rows[0].cost_delta_pct == pytest.approx(-25.0) and rows[0].pass_delta == pytest.approx(0.0)
    assert rows[1].cost_delta_pct == pytest.approx(20.0) and rows[1].pass_delta == pytest.approx(1 / 6)
    assert all(r.heldout_tasks == 3 and not r.significant for r in rows)  # 3 tasks: never significant
    assert "only 3 held-out tasks" in describe(rows[0])
    assert build_headline(Archive([fixed]), lambda c: per_task.get(c.id), lambda c: same_on_train, samples=200,
                          seed=0) == []


def test_the_headline_words_say_significant_or_nothing_beat_the_experts():
    row = HeadlineRow("g2-p1", "x", "expert:standard", "y", True, -12.0, (-20.0, -4.0), 0.01, (-0.03, 0.05), 40, True)
    lines = headline_lines([row], Archive())
    assert lines[0].startswith("Significant: an evolved policy is cheaper than expert:standard")
    assert "significantly cheaper" in lines[1] and "-12.0%" in lines[1] and "40 held-out tasks" in lines[1]
    loose = HeadlineRow("g2-p1", "x", "expert:standard", "y", True, -3.0, (-9.0, 2.0), 0.0, (-0.02, 0.02), 40,
                        False)
    assert headline_lines([loose], Archive())[0].startswith("Nothing beat the experts")
    assert "the cost interval includes 0" in describe(loose)
    assert "No headline comparison: no evolved policy has a held-out result" in headline_lines([], Archive())[0]


# ----------------------------------------------------------------- a tiny search


def test_a_search_tunes_its_experts_and_writes_the_headline(finished):
    archive = Archive.load(finished / "archive.json")
    fixed = next(c for c in archive.candidates if c.proposer == "expert" and c.spec == "rolling_drop")
    tuned = next(c for c in archive.candidates if c.proposer == "expert-tuned")
    assert tuned.label == "expert:rolling_drop (tuned)" and tuned.expert and tuned.heldout is not None
    assert not any(c.proposer == "expert-tuned" and c.spec == "full" for c in archive.candidates)  # not tunable
    # Against the stored study: the choice is its cheapest trial at the fixed setting's train pass rate.
    study = optuna.load_study(study_name="expert-tuned:rolling_drop-a1", storage=f"sqlite:///{finished / 'optuna.db'}")
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(study.trials) == tiny_config().optuna.trials and done[0].params == {"keep_tool_responses": 1}
    assert fixed.train is not None and tuned.train is not None
    want = min((t for t in done if t.values[1] >= fixed.train.pass_rate), key=lambda t: (t.values[0], t.number))
    assert tuned.train.cost_cents_mean == pytest.approx(want.values[0])
    assert tuned.params.get("keep_tool_responses", 1) == want.params["keep_tool_responses"]

    headline = json.loads((finished / "headline.json").read_text())
    assert set(headline) == {"comparisons", "headroom"} and headline["headroom"] is None  # (oracle.heldout off)
    rows = headline["comparisons"]
    assert rows and all(set(r) >= KEYS for r in rows)
    assert {r["versus"] for r in rows} == {c.label for c in archive.candidates if c.expert and c.heldout}
    for r in rows:
        assert r["cost_delta_ci95"][0] <= r["cost_delta_pct"] <= r["cost_delta_ci95"][1]
        assert r["heldout_tasks"] == 1 and r["significant"] is False
    html = (finished / "report.html").read_text()
    assert "not significant (only 1 held-out tasks" in html and "headline.json" in html


def test_the_same_config_gives_the_same_headline(tmp_path, tiny_plain):
    config = tiny_config(generations=0, experts=["rolling_drop:keep_tool_responses=1"],
                         data={"heldout_tasks": 3})  # 3 held-out tasks: a real resampling
    first, again = tmp_path / "first", tmp_path / "again"
    Search(config, first, engine=tiny_plain, tracker=Tracker()).run()
    Search(config, again, engine=tiny_plain, tracker=Tracker()).run()
    rows = read_headline(first)
    assert rows and all(r.heldout_tasks == 3 for r in rows)
    assert any(r.cost_delta_ci95[0] < r.cost_delta_ci95[1] for r in rows)  # not only point intervals
    assert (again / "headline.json").read_bytes() == (first / "headline.json").read_bytes()


def test_a_run_without_evolved_held_out_results_has_an_empty_headline_and_says_why(finished, tmp_path):
    run = tmp_path / "experts-only"
    run.mkdir()
    shutil.copy(finished / "config.json", run / "config.json")
    archive = Archive.load(finished / "archive.json")
    Archive([c for c in archive.candidates if c.expert], archive.hv_history).save(run / "archive.json")
    write_headline(run, build_headline(Archive.load(run / "archive.json"), lambda c: None, lambda c: None,
                                       samples=100, seed=0))
    assert json.loads((run / "headline.json").read_text()) == {"comparisons": [], "headroom": None}
    assert read_headline(run) == []
    (run / "headline.json").write_text("[]")  # a run from before the headroom wrote the list alone
    assert read_headline(run) == [] and read_headroom(run) is None
    write_report(run)
    assert "No headline comparison: no evolved policy has a held-out result" in (run / "report.html").read_text()


@pytest.mark.parametrize(("key", "value"), [("bootstrap_samples", 10), ("bootstrap_samples", True),
                                            ("tune_experts", "yes")])
def test_bad_headline_settings_are_refused_by_name(key, value):
    with pytest.raises(ConfigError) as err:
        tiny_config(**{key: value})
    assert err.value.field == key


# ----------------------------------------------------------------- akv compare


def test_compare_pairs_two_picks_from_the_store_by_hand(finished):
    """``akv compare`` on a finished run: the ratio of summed task costs and the difference of pass
    rates, recomputed here from the store's rows of the two candidates on train."""
    from engine.errors import AKVError
    from rsi.cache.export import load_archive, pick_spec
    from rsi.cache.headline import compare_picks
    from rsi.store import EvalStore

    a, b = "expert:rolling_drop(keep_tool_responses=1)", "expert:full"
    row = compare_picks(finished, a, b, split="train")
    rows = EvalStore(finished / "evaluations.jsonl").rows()

    def of(name: str) -> dict[str, dict[str, Any]]:
        key = pick_spec(finished, name).key
        return {r["task_id"]: r for r in rows if r["policy_key"] == key and r["split"] == "train"}

    ra, rb = of(a), of(b)
    assert row.heldout_tasks == len(ra) == len(rb) == TINY["data"]["train_tasks"]
    cost = 100 * (sum(r["cost_cents"] for r in ra.values()) / sum(r["cost_cents"] for r in rb.values()) - 1)
    rate = {k: sum(r["n_passed"] for r in rs.values()) / sum(r["n_probes"] for r in rs.values())
            for k, rs in (("a", ra), ("b", rb))}
    assert row.cost_delta_pct == pytest.approx(cost) and row.pass_delta == pytest.approx(rate["a"] - rate["b"])
    assert row.cost_delta_ci95[0] <= row.cost_delta_pct <= row.cost_delta_ci95[1]
    # an id works by its first characters; an unknown pick and a pick without results are one-line errors
    full_id = next(c.id for c in load_archive(finished).candidates if c.label == b)
    assert compare_picks(finished, a, full_id[:6], split="train") == row
    with pytest.raises(AKVError, match="no candidate 'nope'"):
        compare_picks(finished, "nope", b)
    failed = [c for c in load_archive(finished).candidates if c.heldout is None]
    if failed:
        with pytest.raises(AKVError, match="no stored heldout results"):
            compare_picks(finished, failed[0].id, b)
