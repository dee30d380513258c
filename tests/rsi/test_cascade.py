"""The evaluation cascade in ``tune``: many proxy trials, only the margin-non-dominated ones meet
the model, each carrying its prediction; selection checked against hand-worked fronts."""

from __future__ import annotations

import pytest

from evals.cache.cost import CostBreakdown
from evals.cache.evaluator import ProbeResult, RequestCost, TaskResult
from rsi.cache.metrics import aggregate
from rsi.cache.tuning import Screen, promoted, tune
from rsi.tuning import TrialOutcome

SOURCE = ("def decide(request, params):\n    return request.plan()\n\n\n"
          "def space(trial):\n    return {'k': trial.suggest_int('k', 0, 20)}\n")


def result(task: str, cost_usd: float, passed: list[bool], fidelity: str) -> TaskResult:
    probes = tuple(ProbeResult(i, "fact", 1, "a", "", False, False, "", False, False, (), p)
                   for i, p in enumerate(passed))
    usage = {"prompt_tokens": 1, "prefill_tokens": 1, "cached_tokens": 0, "drop_skipped_tokens": 0,
             "repos_tokens": 0, "completion_tokens": 0}
    return TaskResult(task, "fam", "train", "p", "key", {}, True, None, probes, (RequestCost(1, usage, cost_usd),),
                      CostBreakdown(input=cost_usd), 0.0, fidelity=fidelity)


def outcome(number: int, k: int, cost_cents: float, predicted: float) -> TrialOutcome:
    n = 100
    passed = [i < round(predicted * n) for i in range(n)]
    m = aggregate([result("t", cost_cents / 100, passed, "proxy")])
    return TrialOutcome(number, {"k": k}, "screened_out", "", None, m, {"k": k})


def test_promotion_is_the_front_widened_by_the_margin():
    f, g, h = outcome(0, 1, 1.0, 0.50), outcome(1, 2, 1.1, 0.52), outcome(2, 3, 1.2, 0.49)
    c = outcome(3, 4, 2.0, 0.90)
    dup = outcome(4, 1, 1.0, 0.50)  # the same parameters again: one candidate
    assert [o.number for o in promoted([f, g, h, c, dup], 9, 0.0)] == [0, 1, 3]  # h: dominated by f
    assert [o.number for o in promoted([f, g, h, c, dup], 9, 0.05)] == [0, 1, 2, 3]  # f beats h by < 0.05
    d = outcome(5, 5, 2.5, 0.60)
    assert 5 not in [o.number for o in promoted([f, c, d], 9, 0.2)]  # c: cheaper and 0.3 more pass
    # at most k, spread evenly along cost; k = 1 takes the best predicted pass
    line = [outcome(i, i, float(i), i / 10) for i in range(1, 10)]
    assert [o.params["k"] for o in promoted(line, 3, 0.0)] == [1, 5, 9]
    assert [o.params["k"] for o in promoted(line, 1, 0.0)] == [9]
    # anchors: the best, then the cheapest set reaching each expert's prediction, then spread
    assert [o.params["k"] for o in promoted(line, 3, 0.0, anchors=(0.35, 0.62))] == [4, 7, 9]
    assert [o.params["k"] for o in promoted(line, 4, 0.0, anchors=(0.62,))] == [1, 7, 8, 9]
    assert [o.params["k"] for o in promoted(line, 2, 0.0, anchors=(0.95,))] == [1, 9]  # nothing reaches 0.95


def test_tune_screens_every_trial_and_sends_only_promoted_sets_to_the_model():
    tasks = ["t1", "t2"]
    seen_by_model: list[int] = []

    def proxy(params, tasks_):
        k = params["k"]
        return [result(t, k / 100, [j < k for j in range(20)], "proxy") for t in tasks_]

    def model(params, tasks_):
        if tasks_:
            seen_by_model.append(params["k"])
        return [result(t, params["k"] / 100, [j < params["k"] - 1 for j in range(20)], "model") for t in tasks_]

    screen = Screen(proxy, trials=24, promote=3, margin=0.0)
    out = tune(SOURCE, "s", storage=None, sampler="tpe", seed=0, n_trials=99, tasks=tasks, fidelity_tasks=0,
               evaluate=model, reference=lambda t: [], screen=screen)
    assert len(out.screened) == 24
    chosen = [o for o in out.screened if o.state == "screened"]
    assert 1 <= len(chosen) <= 3 and all(o.state in ("screened", "screened_out") for o in out.screened)
    assert sorted(seen_by_model) == sorted(o.params["k"] for o in chosen)  # the model saw only promoted sets
    assert len(out.trials) == len(chosen) and all(t.proxy is not None for t in out.trials)
    for t in out.trials:  # the prediction rides along, beside (never instead of) the model's numbers
        assert t.proxy is not None and t.train is not None
        assert t.proxy.pass_rate == pytest.approx(t.params["k"] / 20)
        assert t.train.pass_rate == pytest.approx(max(0, t.params["k"] - 1) / 20)
    again = tune(SOURCE, "s", storage=None, sampler="tpe", seed=0, n_trials=99, tasks=tasks, fidelity_tasks=0,
                 evaluate=model, reference=lambda t: [], screen=screen)
    assert [o.params for o in again.screened] == [o.params for o in out.screened]  # seeded: a resume replays


def test_the_screen_is_timed_whole_space_and_sampling_included():
    import time

    spent: list[float] = []
    evaluated: list[float] = []

    def proxy(params, tasks_):
        t = time.perf_counter()
        out = [result(x, params["k"] / 100, [True] * 4, "proxy") for x in tasks_]
        evaluated.append(time.perf_counter() - t)
        return out

    start = time.perf_counter()
    tune(SOURCE, "s", storage=None, sampler="tpe", seed=0, n_trials=0, tasks=["t1"], fidelity_tasks=0,
         evaluate=lambda p, t: [], reference=lambda t: [], screen=Screen(proxy, 8, 1, 0.0, timed=spent.append))
    whole = time.perf_counter() - start
    assert len(spent) == 1 and len(evaluated) == 8
    # the study's time holds the 8 evaluations and the 8 sandboxed space() calls, within the call's
    assert sum(evaluated) < spent[0] <= whole


def test_the_proxy_study_is_written_whole_to_the_screen_storage_when_it_ends(tmp_path):
    """The proxy study runs in memory and lands in the screen's storage (a journal in a search)
    when it ends: every trial, its parameters and its predicted (cost, pass); the model study
    stays in the search's storage."""
    import optuna

    from rsi.tuning import make_storage

    def proxy(params, tasks_):
        return [result(t, params["k"] / 100, [j < params["k"] for j in range(10)], "proxy") for t in tasks_]

    def model(params, tasks_):
        return [result(t, params["k"] / 100, [True] * 10, "model") for t in tasks_]

    models, screens = make_storage("sqlite", tmp_path), make_storage("journal", tmp_path, "optuna-proxy")
    out = tune(SOURCE, "s", storage=models, sampler="tpe", seed=0, n_trials=0, tasks=["t1", "t2"], fidelity_tasks=0,
               evaluate=model, reference=lambda t: [], screen=Screen(proxy, 12, 2, 0.0, storage=screens))
    written = optuna.load_study(study_name="s-proxy", storage=make_storage("journal", tmp_path, "optuna-proxy"))
    assert [t.params for t in written.trials] == [o.suggested for o in out.screened]
    for t, o in zip(written.trials, out.screened):
        assert o.proxy is not None and t.values == [o.proxy.cost_cents_mean, o.proxy.pass_rate]
        assert t.user_attrs["fidelity"] == "proxy"
    assert {s.study_name for s in optuna.get_all_study_summaries(models)} == {"s"}
    assert len(optuna.load_study(study_name="s", storage=models).trials) == len(out.trials) > 0


def test_screen_settings_are_checked():
    with pytest.raises(ValueError, match="margin"):
        Screen(lambda p, t: [], trials=0, promote=1, margin=0.0)
    with pytest.raises(ValueError, match="margin"):
        Screen(lambda p, t: [], trials=4, promote=1, margin=1.5)


def test_a_search_with_the_cascade_screens_many_and_evaluates_few(tmp_path, tiny_plain):
    """End to end on tiny-random: every program is screened at the proxy fidelity, at most
    ``promote`` parameter sets per program reach the model, the fidelity check is written, and every
    number in pareto.json is the model's."""
    import json

    from rsi.cache.search import Search
    from rsi.store import EvalStore
    from tests.rsi.conftest import tiny_config

    config = tiny_config(generations=1, cascade={"enabled": True, "trials": 6, "promote": 1, "margin": 0.0},
                         tune_experts=False)
    run = tmp_path / "run"
    Search(config, run, engine=tiny_plain).run()
    fid = json.loads((run / "fidelity.json").read_text())
    programs = 1 + config.proposer.per_generation  # one seed + the generation's proposals
    assert 0 < fid["screened_trials"] <= programs * 6
    assert fid["policies"] == len(fid["pairs"]) >= 1
    experts = {c["id"]: c["spec"] for c in json.loads((run / "archive.json").read_text())["candidates"]
               if c["expert"]}
    assert {experts[k] for k in fid["pairs"] if k in experts} == {"rolling_drop"}  # full: exact by construction
    assert all(0 <= v["predicted_pass"] <= 1 and 0 <= v["model_pass"] <= 1 for v in fid["pairs"].values())
    rows = [json.loads(line)["row"] for line in (run / "evaluations.jsonl").read_text().splitlines()]
    assert all(r.get("fidelity") == "model" for r in rows)  # proxy results are never stored as evaluations
    program_rows = [r for r in rows if r["policy"].startswith(("seed:", "g1-"))]
    per_program: dict[str, set[str]] = {}
    for r in program_rows:
        per_program.setdefault(r["policy"], set()).add(r["params"])
    assert per_program and all(len(v) <= 1 for v in per_program.values())  # promote=1: one set per program
    assert all(row["fidelity"] == "model" for row in json.loads((run / "pareto.json").read_text()))
    report = (run / "report.html").read_text()
    assert "Evaluation cascade" in report
    assert len(EvalStore(run / "evaluations.jsonl")) == len(rows)
    # the run measures both fidelities' speed: every computed model evaluation, every screened policy-task
    speed = fid["speed"]
    assert speed["counts"]["model"] == len(rows)
    assert speed["counts"]["proxy"] == fid["screened_trials"] * config.data.train_tasks
    assert speed["ratio"] == pytest.approx(speed["per_minute"]["proxy"] / speed["per_minute"]["model"])
    assert "faster" in report
    import mlflow  # the same figures on the MLflow parent run, apart from the model's metrics

    mlflow.set_tracking_uri(f"sqlite:///{run / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=[config.name])
    parent = runs[runs["tags.akv.kind"] == "search"].iloc[0]
    assert parent["metrics.proxy.speed_ratio"] == pytest.approx(speed["ratio"])
    assert parent["metrics.proxy.screened_trials"] == fid["screened_trials"]
    children = runs[runs["tags.akv.kind"].isin(["candidate", "expert"])]
    assert (children["tags.akv.fidelity"] == "model").all()


def test_fidelity_speed_is_evaluations_per_minute_per_fidelity():
    from evals.cache.fidelity import FidelitySpeed

    s = FidelitySpeed()
    assert s.per_minute("model") is None and s.ratio is None
    s.add("model", [6.0, 6.0])  # 2 in 12 s: 10 a minute
    s.add("proxy", [0.01] * 30)  # 30 in 0.3 s: 6,000 a minute
    assert s.per_minute("model") == pytest.approx(10.0) and s.per_minute("proxy") == pytest.approx(6000.0)
    assert s.ratio == pytest.approx(600.0)
    assert s.to_dict()["counts"] == {"model": 2, "proxy": 30}


def test_the_fidelity_check_also_pairs_every_setting_the_experts_tuning_ran(tmp_path, tiny_plain):
    """Each expert-tuning trial is a distinct policy the model already evaluated on train: its
    prediction joins the Spearman check beside the pass rate recomputed here from the stored rows."""
    import json

    import optuna

    from evals.cache.evaluator import PolicySpec, result_from_row
    from rsi.archive import candidate_id
    from rsi.cache.expert_tuning import space
    from rsi.cache.metrics import aggregate
    from rsi.cache.search import Search
    from rsi.store import EvalStore
    from tests.rsi.conftest import tiny_config

    config = tiny_config(generations=0, optuna={"trials": 3},
                         cascade={"enabled": True, "trials": 2, "promote": 1, "margin": 0.0})
    run = tmp_path / "run"
    Search(config, run, engine=tiny_plain).run()
    pairs = json.loads((run / "fidelity.json").read_text())["pairs"]
    rows = EvalStore(run / "evaluations.jsonl").rows()
    study = optuna.load_study(study_name="expert-tuned:rolling_drop-a1", storage=f"sqlite:///{run / 'optuna.db'}")
    fixed = PolicySpec("rolling_drop", {"keep_tool_responses": 1})
    settings = {json.dumps(space(fixed)(optuna.trial.FixedTrial(t.params)), sort_keys=True)
                for t in study.trials if t.state is optuna.trial.TrialState.COMPLETE}
    assert settings
    for text in settings:
        params = json.loads(text)
        spec = PolicySpec("rolling_drop", params)
        stored = [result_from_row(r) for r in rows if r["policy_key"] == spec.key and r["split"] == "train"]
        assert len(stored) == config.data.train_tasks
        pair = pairs[candidate_id("rolling_drop", params)]
        assert pair["model_pass"] == pytest.approx(aggregate(stored).pass_rate)
        assert 0 <= pair["predicted_pass"] <= 1
    # The benchmark that re-scores finished runs reproduces the run's own predictions from its store.
    from bench.fidelity_runs import rescore
    from evals.cache.fidelity import DryEngine

    again = rescore(run, DryEngine.of(tiny_plain))
    rescored = {(round(m, 9), round(p, 9)) for m, p in zip(again["model"], again["predicted"]["current"],
                                                           strict=True)}
    in_run = {(round(v["model_pass"], 9), round(v["predicted_pass"], 9)) for v in pairs.values()}
    assert again["policies"] >= len(settings) and in_run <= rescored, (in_run, rescored)


def test_the_fidelity_sample_adds_unpromoted_sets_spread_over_the_predictions(tmp_path, tiny_plain):
    """cascade.check: after the generations the model evaluates screened sets it had not, at evenly
    spaced ranks of their prediction; each pair's model pass is recomputed here from the stored
    rows and its prediction from the run's proxy study; none of them becomes a candidate."""
    import json

    from evals.cache.evaluator import PolicySpec, result_from_row
    from rsi.cache.metrics import aggregate
    from rsi.cache.search import Search
    from rsi.store import EvalStore
    from tests.rsi.conftest import tiny_config

    config = tiny_config(generations=0, tune_experts=False,
                         cascade={"enabled": True, "trials": 8, "promote": 1, "margin": 0.0, "check": 3})
    run = tmp_path / "run"
    search = Search(config, run, engine=tiny_plain)
    search.run()
    fid = json.loads((run / "fidelity.json").read_text())
    sampled = fid["sampled"]
    pool = sorted((pred, cid) for cid, (_, _, pred) in search.cascade.screen_pool.items())
    assert 1 <= len(sampled) <= 3 and set(sampled) <= {cid for _, cid in pool}
    promoted_pairs = set(fid["pairs"]) - set(sampled)
    spare = [(pred, cid) for pred, cid in pool if cid not in promoted_pairs]
    assert spare[0][1] in sampled and spare[-1][1] in sampled  # both ends of the predicted range
    rows = EvalStore(run / "evaluations.jsonl").rows()
    archive_ids = {c.id for c in search.archive.candidates}
    for cid in sampled:
        sha, params, pred = search.cascade.screen_pool[cid]
        spec = PolicySpec("program", params, source=(run / "programs" / f"{sha}.py").read_text())
        stored = [result_from_row(r) for r in rows if r["policy_key"] == spec.key and r["split"] == "train"]
        assert len(stored) == config.data.train_tasks
        assert fid["pairs"][cid] == {"predicted_pass": pred, "model_pass": pytest.approx(aggregate(stored).pass_rate)}
        assert cid not in archive_ids


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_a_bad_fidelity_sample_size_is_refused_naming_the_field(bad):
    from engine.errors import AKVError
    from tests.rsi.conftest import tiny_config

    with pytest.raises(AKVError, match=r"cascade\.check"):
        tiny_config(cascade={"enabled": True, "check": bad})


def test_the_dashboard_shows_the_proxy_screens_beside_the_model_studies(tmp_path):
    import optuna

    from rsi.dashboard import dashboard_commands
    from rsi.tuning import make_storage

    assert dashboard_commands(tmp_path, 0, 0) == []
    optuna.create_study(study_name="m", storage=make_storage("sqlite", tmp_path))
    optuna.create_study(study_name="m-proxy", storage=make_storage("journal", tmp_path, "optuna-proxy"))
    commands = dashboard_commands(tmp_path, 0, 7001)
    assert [name for name, _, _ in commands] == ["optuna-dashboard", "optuna-dashboard (proxy screens)"]
    assert commands[0][1][1] == f"sqlite:///{(tmp_path / 'optuna.db').resolve()}" and "7001" in commands[0][1]
    assert commands[1][1][1] == str((tmp_path / "optuna-proxy.journal").resolve())
    assert commands[0][2] != commands[1][2]  # two ports
