"""Evolution of survival programs on the simulator (rsi.survival.evolve): the loop end to end on
tiny traces, hostile proposals, reproducibility, the headline's intervals by hand, the export."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from engine.errors import AKVError
from evals.survival import load_trace, simulate
from rsi.archive import Status
from rsi.cli import main
from rsi.proposers.base import ParentView, Proposal, Proposer
from rsi.survival.archive import RECOMPUTE, TTFT, SurvivalArchive, paired_over_traces, pooled_over_traces
from rsi.survival.config import EvolveConfigError, config_from_dict, load_config
from rsi.survival.evolve import SurvivalEvolution
from rsi.survival.proposer import Recorder, SurvivalMutationProposer, record_requests
from search_spaces.survival import get_survival_policy, make_survival_policy, survival_seed_source
from tests.exported import load_exported

TINY = {"name": "sv-test", "seed": 0,
        "train": {"kinds": ["tool-heavy"], "seeds": [0, 1], "sessions": 3},
        "heldout": {"kinds": ["tool-heavy", "memory-tight"], "seeds": [100, 101, 102], "sessions": 3},
        "seeds": ["lru", "ttl"], "families": ["lru", "ttl"], "generations": 1,
        "proposer": {"per_generation": 2, "parents": 2}, "optuna": {"trials": 3},
        "bootstrap_samples": 200, "tracking": False}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("survival") / "run"
    evo = SurvivalEvolution(config_from_dict(TINY), run_dir)
    return evo, evo.run()


def test_the_loop_writes_archive_front_headline_and_report(tiny_run):
    evo, res = tiny_run
    run = res.run_dir
    for name in ("archive.json", "pareto.json", "headline.json", "report.html", "evaluations.jsonl",
                 "figures/survival_front_train.png", "figures/survival_front_heldout.png", "proposals/g1.json"):
        assert (run / name).is_file(), name
    archive = SurvivalArchive.load(run / "archive.json")
    assert {c.label for c in archive.candidates if c.expert} == {"tuned:lru", "tuned:ttl"}
    assert {c.proposer for c in archive.candidates if not c.expert} >= {"seed"}
    assert any(c.proposer.startswith("mutation:") for c in archive.candidates)
    assert [h["generation"] for h in archive.hv_history] == [0, 1]
    # The front is the non-dominated set of the evolved candidates (checked against a pairwise scan).
    scored = archive.scored()
    front = archive.front()
    for c in scored:
        t, r = c.train.resume_ttft_p95_s, c.train.recompute_tokens
        beaten = any(o.train.resume_ttft_p95_s <= t and o.train.recompute_tokens <= r
                     and (o.train.resume_ttft_p95_s < t or o.train.recompute_tokens < r) for o in scored)
        assert (c in front) == (not beaten and c.point not in [f.point for f in front if f is not c])
    # A candidate's train score is the mean of fresh simulations of its traces (independent rerun).
    best = archive.best()
    source = (run / "programs" / f"{best.program}.py").read_text()
    fresh = [simulate(load_trace(run / "traces" / f"train-tool-heavy-s{s}.jsonl"),
                      {"source": source, "params": best.params}, evo.sim) for s in (0, 1)]
    assert best.train.resume_ttft_p95_s == pytest.approx(sum(m[TTFT] for m in fresh) / 2, rel=1e-12)
    assert best.train.recompute_tokens == pytest.approx(sum(m[RECOMPUTE] for m in fresh) / 2, rel=1e-12)
    head = json.loads((run / "headline.json").read_text())
    assert head["unit"] == "trace" and len(head["heldout_traces"]) == 6 and head["versus"].startswith("tuned:")
    page = (run / "report.html").read_text()
    assert "p95 resume TTFT vs recompute tokens" in page and "data:image/png;base64" in page


def test_headline_intervals_recomputed_by_hand(tiny_run):
    evo, res = tiny_run
    head = json.loads((res.run_dir / "headline.json").read_text())
    archive = SurvivalArchive.load(res.run_dir / "archive.json")
    pol, ver = archive.get(head["policy_id"]), archive.get(head["versus_id"])
    traces = [load_trace(res.run_dir / "traces" / f"{tid}.jsonl") for tid in head["heldout_traces"]]

    def spec(c):
        if c.spec == "program":
            return {"source": (res.run_dir / "programs" / f"{c.program}.py").read_text(), "params": c.params}
        return {"name": c.spec, "params": c.params}

    for key in (TTFT, RECOMPUTE):
        a = [simulate(t, spec(pol), evo.sim)[key] for t in traces]  # fresh per-trace metrics
        b = [simulate(t, spec(ver), evo.sim)[key] for t in traces]
        got = head["metrics"][key]
        n, samples = len(a), head["bootstrap_samples"]
        assert got["mean_a"] == pytest.approx(sum(a) / n) and got["mean_b"] == pytest.approx(sum(b) / n)
        assert got["delta"] == pytest.approx(sum(a) / n - sum(b) / n, abs=1e-12)
        # The bootstrap by hand: the same resamples (numpy's generator with the run's seed), plain loops,
        # and the percentile by linear interpolation between order statistics.
        draws = np.random.default_rng(head["seed"]).integers(0, n, size=(samples, n)).tolist()
        deltas = sorted(sum(a[i] for i in row) / n - sum(b[i] for i in row) / n for row in draws)

        def pct(values, q):
            pos = q * (len(values) - 1)
            lo = math.floor(pos)
            hi = min(lo + 1, len(values) - 1)
            return values[lo] + (values[hi] - values[lo]) * (pos - lo)

        assert got["delta_ci95"][0] == pytest.approx(pct(deltas, 0.025), abs=1e-9)
        assert got["delta_ci95"][1] == pytest.approx(pct(deltas, 0.975), abs=1e-9)
        assert got["significant"] == ((got["delta_ci95"][0] > 0 or got["delta_ci95"][1] < 0) and n >= 5)


def test_paired_interval_on_a_known_difference():
    # b = a + 1 on every trace: the difference is exactly -1 in every resample.
    a = [1.0, 2.0, 5.0, 3.0, 4.0, 8.0]
    d = paired_over_traces(a, [x + 1 for x in a], samples=500, seed=1)
    assert d.delta == pytest.approx(-1) and d.delta_ci95 == pytest.approx((-1, -1)) and d.significant
    assert d.delta_pct == pytest.approx(100 * (23 / 29 - 1))
    with pytest.raises(AKVError, match="same non-zero number of traces"):
        paired_over_traces(a, a[:3], samples=500, seed=1)


class Hostile(Proposer):
    """Proposes one program the checker refuses and one that passes it but fails when it runs."""

    name = "hostile"

    def propose(self, parents: Sequence[ParentView], archive, n: int, rng: random.Random,
                seen: set[str]) -> list[Proposal]:
        space = "\n\ndef space(trial):\n    return {}\n"
        refused = ("import os\n\ndef decide(request, params):\n    os.system('touch /tmp/pwned')\n    return {}\n"
                   + space)
        crashes = ("DEFAULTS = {'k': 1}\n\ndef decide(request, params):\n    return {s.session: "
                   "request.decision('explode') for s in request.sessions}\n" + space)
        return [Proposal(refused, (), "hostile"), Proposal(crashes, (), "hostile")]


def test_hostile_proposals_are_recorded_failures_not_crashes(tmp_path):
    raw = {**TINY, "seeds": ["lru"], "families": ["lru"], "optuna": {"trials": 2}}
    res = SurvivalEvolution(config_from_dict(raw), tmp_path / "run", proposer=Hostile()).run()
    failures = {c.label: c for c in res.archive.failures()}
    assert failures["g1-p0"].status is Status.REFUSED and "os" in failures["g1-p0"].reason
    assert failures["g1-p1"].status is Status.FAILED and "explode" in failures["g1-p1"].reason
    assert res.headline["comparison"]  # the run finished and compared the surviving programs
    assert "explode" in (tmp_path / "run" / "report.html").read_text()


def test_same_seed_same_archive_and_a_rerun_simulates_nothing(tiny_run, tmp_path):
    _, first = tiny_run
    again = SurvivalEvolution(config_from_dict(TINY), tmp_path / "b").run()
    assert [c.to_dict() for c in again.archive.candidates] == [c.to_dict() for c in first.archive.candidates]
    rerun = SurvivalEvolution(config_from_dict(TINY), tmp_path / "b").run()  # same directory: from the store
    assert rerun.simulations == 0
    assert [c.to_dict() for c in rerun.archive.candidates] == [c.to_dict() for c in first.archive.candidates]
    with pytest.raises(AKVError, match="another config"):
        SurvivalEvolution(config_from_dict({**TINY, "seed": 1}), tmp_path / "b")


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[2] / "experiments").glob("survival-*.yaml")),
                         ids=lambda p: p.name)
def test_committed_survival_configs_load(path):
    cfg = load_config(path)
    assert cfg.name and cfg.trials >= 1 and set(cfg.heldout.kinds) - set(cfg.train.kinds)  # held-out: another kind


def test_config_errors_name_the_field():
    with pytest.raises(EvolveConfigError, match="unknown field 'trails'"):
        config_from_dict({**TINY, "trails": 3})
    with pytest.raises(EvolveConfigError, match="held-out trace tool-heavy/1 is also a train trace"):
        config_from_dict({**TINY, "heldout": {"kinds": ["tool-heavy"], "seeds": [1, 5], "sessions": 3}})
    with pytest.raises(EvolveConfigError, match=r"optuna\.trials must be an integer >= 1, got 0"):
        config_from_dict({**TINY, "optuna": {"trials": 0}})
    with pytest.raises(EvolveConfigError, match="it names the run directory"):  # runs/NAME: no path in it
        config_from_dict({**TINY, "name": "../outside"})


def test_mutation_proposer_only_proposes_programs_that_run(tiny_run):
    evo, _ = tiny_run
    requests = record_requests(evo.train[0][1], evo.sim, limit=8)
    assert requests
    proposer = SurvivalMutationProposer(requests, evo.ref)
    archive = SurvivalArchive.load(evo.run_dir / "archive.json")
    parents = [ParentView(c, (evo.run_dir / "programs" / f"{c.program}.py").read_text()) for c in archive.front()]
    out = proposer.propose(parents, archive, 3, random.Random(5), set())
    assert out and all(p.proposer.split(":")[1] in proposer.operators for p in out)
    assert "fragment" not in proposer.operators
    for p in out:  # each runs on the recorded decision points (an independent run of the program)
        policy = make_survival_policy({"source": p.source, "params": {}})
        try:
            for r in requests:
                assert set(policy.decide(r)) == {s.session for s in r.pending}
        finally:
            policy.close()


def test_export_round_trip_gives_the_sandbox_decisions(tiny_run, tmp_path, capsys):
    evo, res = tiny_run
    out = tmp_path / "best.py"
    assert main(["export", str(res.run_dir), "--pick", "best", "--out", str(out)]) == 0
    best = SurvivalArchive.load(res.run_dir / "archive.json").best()
    source = (res.run_dir / "programs" / f"{best.program}.py").read_text()
    # A recorded sequence of manager calls: the in-sandbox program's answers during a simulation.
    rec = Recorder(make_survival_policy({"source": source, "params": best.params}))
    simulate(evo.heldout[-1][1], rec, evo.sim)
    assert len(rec.requests) > 3
    module = load_exported(out)
    assert [module.decide(r.wire()) for r in rec.requests] == rec.answers
    # A tuned built-in family exports through its seed program and decides as the family does.
    fam = tmp_path / "ttl.py"
    assert main(["export", str(res.run_dir), "--pick", "tuned:ttl", "--out", str(fam)]) == 0
    ttl = SurvivalArchive.load(res.run_dir / "archive.json").get(
        next(c.id for c in res.archive.candidates if c.label == "tuned:ttl"))
    builtin = Recorder(get_survival_policy("ttl", **ttl.params))
    simulate(evo.heldout[0][1], builtin, evo.sim)
    assert [load_exported(fam).decide(r.wire()) for r in builtin.requests] == builtin.answers
    # Refusals are one line.
    assert main(["export", str(res.run_dir), "--pick", "best", "--out", str(tmp_path / "x.py"),
                 "--format", "akv-harness"]) != 0
    err = capsys.readouterr().err.strip()
    assert "exports only as --format module" in err and "\n" not in err
    assert survival_seed_source("ttl") in fam.read_text() or "PROGRAM_SOURCE" in fam.read_text()


def test_exported_module_refuses_a_tampered_program(tiny_run, tmp_path):
    _, res = tiny_run
    out = tmp_path / "best.py"
    assert main(["export", str(res.run_dir), "--pick", "best", "--out", str(out)]) == 0
    text = out.read_text()
    tampered = text.replace("def decide(request, params):", "import os\n\ndef decide(request, params):", 1)
    assert tampered != text
    (tmp_path / "bad.py").write_text(tampered)
    with pytest.raises(ImportError, match="refuses its program"):
        load_exported(tmp_path / "bad.py")


def test_confirm_replay_runs_the_top_candidates_on_the_real_engine(tiny, tmp_path):
    from rsi.survival.confirm import confirm_replay

    raw = {**TINY, "seeds": ["ttl"], "families": ["lru"], "generations": 0, "optuna": {"trials": 1},
           "train": {"kinds": ["tool-heavy"], "seeds": [0], "sessions": 2, "time_scale": 0.002, "token_scale": 0.1},
           "heldout": {"kinds": ["memory-tight"], "seeds": [7], "sessions": 2, "time_scale": 0.002,
                       "token_scale": 0.1}}
    res = SurvivalEvolution(config_from_dict(raw), tmp_path / "run").run()
    heard: list[str] = []
    rows = confirm_replay(res.run_dir, 2, "tiny-random", engine=tiny, say=heard.append)
    assert [h.split(":")[0] for h in heard] == ["replay 1/2", "replay 1/2", "replay 2/2", "replay 2/2"]
    assert heard[1].endswith(" s") and "on heldout-memory-tight-s7" in heard[0]  # a line before and after each
    held = sorted((c for c in res.archive.candidates if c.heldout is not None),
                  key=lambda c: (c.heldout.resume_ttft_p95_s, c.heldout.recompute_tokens, c.label))
    assert [r["label"] for r in rows] == [c.label for c in held[:2]]
    for r in rows:
        assert r["model"] == "tiny-random" and r["clock"] == "wall" and len(r["per_trace"]) == 1
        assert r["per_trace"][0]["ok"] and r["replayed"]["n_traces"] == 1 and r["replayed"]["failed"] == 0
    assert json.loads((res.run_dir / "confirm.json").read_text()) == rows


def test_command_line_needs_a_trace_or_a_config(capsys):
    assert main(["survival-search"]) != 0
    err = capsys.readouterr().err.strip()
    assert "needs a TRACE" in err and "--evolve CONFIG" in err and "\n" not in err
    assert main(["survival-search", "--evolve", "no-such.yaml"]) != 0
    assert "config 'no-such.yaml' does not exist" in capsys.readouterr().err


# ----------------------------------------------------------------- the LLM proposer on survival programs

SURVIVAL_GOOD = survival_seed_source("ttl").replace('"released_ttl_s": 2.0', '"released_ttl_s": 0.5')
SURVIVAL_BAD = ("import os\n\ndef decide(request, params):\n    os.system('echo pwned')\n    return {}\n\n"
                "def space(trial):\n    return {}\n")


def test_llm_config_is_checked_and_round_trips(tmp_path):
    from rsi.survival.config import config_from_dict_json

    llm = {**TINY, "proposer": {"kind": "llm", "base_url": "http://127.0.0.1:9/v1", "model": "m",
                                "per_generation": 2, "budget_tokens": 5000}}
    cfg = config_from_dict(llm)
    assert cfg.llm is not None and cfg.llm.budget_tokens == 5000 and cfg.per_generation == 2
    assert config_from_dict_json(cfg.to_dict()) == cfg
    assert "llm" not in config_from_dict(TINY).to_dict()  # a mutation run's config.json is as before
    with pytest.raises(EvolveConfigError, match=r"proposer\.kind: llm needs proposer\.model, got"):
        config_from_dict({**TINY, "proposer": {"kind": "llm", "base_url": "http://x/v1"}})
    with pytest.raises(EvolveConfigError, match=r"proposer\.kind must be mutation or llm, got 'gpt'"):
        config_from_dict({**TINY, "proposer": {"kind": "gpt"}})
    with pytest.raises(EvolveConfigError, match=r"proposer\.model is a setting of proposer\.kind: llm"):
        config_from_dict({**TINY, "proposer": {"model": "m"}})
    with pytest.raises(EvolveConfigError, match="unknown field 'modle'"):
        config_from_dict({**TINY, "proposer": {"kind": "llm", "modle": "m"}})


def test_llm_proposer_writes_survival_programs_through_the_loop(tmp_path):
    """A real HTTP endpoint (scripted replies): a valid edit is simulated and scored, a hostile
    program is refused (twice: the retry carries the reason) and recorded with its reason; the
    prompt carries the survival API, the parent's metrics and the tuned families'."""
    from engine.server import ServerThread
    from rsi.survival.proposer import SURVIVAL_VARIANTS
    from tests.rsi.scripted import scripted_app

    replies = iter([f"```python\n{SURVIVAL_GOOD}```", f"```python\n{SURVIVAL_BAD}```",
                    f"```python\n{SURVIVAL_BAD}# again\n```"])
    seen: list[dict] = []
    with ServerThread(scripted_app(replies, seen)) as srv:
        raw = {**TINY, "seeds": ["ttl"], "families": ["lru"], "optuna": {"trials": 2},
               "proposer": {"kind": "llm", "base_url": srv.base_url + "/v1", "model": "scripted",
                            "per_generation": 2, "parents": 1}}
        res = SurvivalEvolution(config_from_dict(raw), tmp_path / "llm").run()
    llm = [c for c in res.archive.candidates if c.proposer.startswith("llm:")]
    assert {c.proposer for c in llm} == {"llm:refine", "llm:rewrite"}  # the bandit tries untried variants in order
    good = next(c for c in llm if c.proposer == "llm:refine")
    assert good.status is Status.OK and good.train is not None and good.train.ok
    bad = next(c for c in llm if c.proposer == "llm:rewrite")
    assert bad.status is not Status.OK and "os" in bad.reason
    first = seen[0]["messages"][-1]["content"]
    assert "def decide(request, params)" in first and "Its metrics on the train traces" in first
    assert "tuned:lru" in first and SURVIVAL_VARIANTS["refine"] in first
    assert "refused" in seen[2]["messages"][-1]["content"]  # the retry of the hostile program
    assert len(seen) == 3 and (tmp_path / "llm" / "proposer" / "calls.jsonl").is_file()
    stats = json.loads((tmp_path / "llm" / "proposer_stats.json").read_text())
    assert stats["operators"] == {"refine": {"attempts": 1, "valid": 1}, "rewrite": {"attempts": 1, "valid": 0}}


@pytest.fixture(scope="module")
def ablation_runs(tmp_path_factory):
    """Two evolutions with the tuning-only arm, held out on distinct traces (the pool's input)."""
    root = tmp_path_factory.mktemp("survival-ablation")
    first = SurvivalEvolution(config_from_dict({**TINY, "ablation": True}), root / "a").run()
    other = {**TINY, "ablation": True, "seed": 1, "optuna": {"trials": 2},
             "heldout": {**TINY["heldout"], "seeds": [110, 111, 112]}}
    second = SurvivalEvolution(config_from_dict(other), root / "b").run()
    return first, second


def test_the_tuning_only_arm_spends_the_generations_simulations_and_is_compared(ablation_runs):
    res = ablation_runs[0]
    ablation = json.loads((res.run_dir / "ablation.json").read_text())
    assert ablation["budget"] > 0 and ablation["spent"] >= ablation["budget"]
    assert {c["proposer"] for c in ablation["candidates"]} <= {"seed", "tuning-only"}
    archive = SurvivalArchive.load(res.run_dir / "archive.json")
    arm = [c for c in archive.candidates if c.proposer == "tuning-only" and c.expert]
    assert len(arm) == 1 and arm[0].heldout is not None
    assert all(c.proposer != "tuning-only" for c in archive.front())
    head = res.headline
    assert head["versus"].startswith("tuned:")  # the family comparison leaves the arm out
    assert head["ablation"]["versus"] == "tuning-only" and head["ablation"]["budget"]["spent"] >= ablation["budget"]
    assert set(head["ablation"]["metrics"]) == {TTFT, RECOMPUTE}
    with pytest.raises(EvolveConfigError, match="ablation must be true or false"):
        config_from_dict({**TINY, "ablation": "yes"})


def test_pooled_traces_are_resampled_within_each_run():
    # Run 1's traces differ by -1 each, run 2's by -3: every stratified resample's mean difference is
    # exactly -2 (each run keeps its 3 traces); resampling the union would spread it from -3 to -1.
    a1, a2 = [1.0, 2.0, 3.0], [10.0, 20.0, 30.0]
    d = pooled_over_traces([(a1, [x + 1 for x in a1]), (a2, [x + 3 for x in a2])], samples=500, seed=3)
    assert d.delta == pytest.approx(-2) and d.delta_ci95 == pytest.approx((-2, -2)) and d.n_traces == 6
    assert d.delta_pct == pytest.approx(100 * (66 / 78 - 1))
    one = pooled_over_traces([(a1, a2)], samples=500, seed=3).to_dict()
    assert one == paired_over_traces(a1, a2, samples=500, seed=3).to_dict()
    with pytest.raises(AKVError, match="no comparisons to pool"):
        pooled_over_traces([], samples=500, seed=3)


def test_akv_pool_pools_survival_runs_over_their_traces(ablation_runs, tmp_path, capsys):
    a, b = (r.run_dir for r in ablation_runs)
    out = tmp_path / "pooled.json"
    assert main(["pool", str(a), str(b), "--samples", "300", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "vs the tuning-only arm's best (tuning-only)" in printed and "12 traces" in printed
    pooled = {c["versus"]: c for c in json.loads(out.read_text())["comparisons"]}
    assert set(pooled) == {"family", "tuning-only"}
    for versus, key in (("family", None), ("tuning-only", "ablation")):
        rows = [h if key is None else h[key] for h in (r.headline for r in ablation_runs)]
        policy = [x[RECOMPUTE] for row in rows for x in row["per_trace"]["policy"]]
        other = [x[RECOMPUTE] for row in rows for x in row["per_trace"]["versus"]]
        got = pooled[versus]["metrics"][RECOMPUTE]
        assert got["n_traces"] == 12 and got["delta"] == pytest.approx(np.mean(policy) - np.mean(other))
        if sum(other) > 0:
            assert got["delta_pct"] == pytest.approx(100 * (sum(policy) / sum(other) - 1))
        assert got["delta_ci95"][0] <= got["delta"] + 1e-9 <= got["delta_ci95"][1] + 2e-9
    assert main(["pool", str(a), str(b), "--versus", "family", "--samples", "300"]) == 0
    assert "tuning-only" not in capsys.readouterr().out


@pytest.mark.parametrize("case, words", [("twice", "given twice"), ("copy", "pooled traces must be distinct"),
                                         ("mixed", "pool runs of one track"), ("versus", "not 'expert:full'")])
def test_akv_pool_refuses_bad_survival_sets(ablation_runs, tmp_path, capsys, case, words):
    import shutil

    a = ablation_runs[0].run_dir
    args = {"twice": [str(a), str(a)], "mixed": [str(a), str(tmp_path)],
            "versus": [str(a), "--versus", "expert:full"]}.get(case)
    if case == "copy":
        shutil.copytree(a, tmp_path / "copy")
        args = [str(a), str(tmp_path / "copy")]
    assert main(["pool", *args, "--samples", "300"]) == 2
    assert words in capsys.readouterr().err


def test_spread_takes_a_seed_of_each_kind_in_turn():
    from rsi.survival.confirm import spread

    ids = [("a", 1), ("a", 2), ("a", 3), ("b", 7), ("b", 8)]
    assert spread(ids, 3) == [("a", 1), ("b", 7), ("a", 2)]
    assert spread(ids, 0) == ids and spread(ids, 9) == ids


def test_confirm_replay_on_some_traces_compares_them_with_their_own_simulation(tiny, tmp_path):
    from rsi.survival.confirm import confirm_replay
    from rsi.survival.evolve import SimStore, policy_key

    raw = {**TINY, "seeds": ["ttl"], "families": ["lru"], "generations": 0, "optuna": {"trials": 1},
           "train": {"kinds": ["tool-heavy"], "seeds": [0], "sessions": 2, "time_scale": 0.002, "token_scale": 0.1},
           "heldout": {"kinds": ["memory-tight", "tool-heavy"], "seeds": [7, 8], "sessions": 2,
                       "time_scale": 0.002, "token_scale": 0.1}}
    res = SurvivalEvolution(config_from_dict(raw), tmp_path / "run").run()
    with pytest.raises(ValueError, match="traces must be an integer >= 0"):
        confirm_replay(res.run_dir, 1, "tiny-random", engine=tiny, traces=-1)
    rows = confirm_replay(res.run_dir, 1, "tiny-random", engine=tiny, traces=2)
    (row,) = rows
    assert row["traces"] == ["heldout-memory-tight-s7", "heldout-tool-heavy-s7"]
    assert [p["trace"] for p in row["per_trace"]] == row["traces"]
    c = res.archive.get(row["id"])
    store = SimStore(res.run_dir / "evaluations.jsonl")
    sims = [store.get(f"{policy_key(c.spec, c.program, c.params)}/{t}") for t in row["traces"]]
    want = sum(s["recompute_tokens"] for s in sims) / 2
    assert row["simulated"]["recompute_tokens"] == pytest.approx(want)  # the same two traces, not all four
    assert row["simulated_all_heldout"]["n_traces"] == 4


def test_akv_report_writes_the_survival_report_of_a_survival_run(tiny_run, capsys):
    """``akv report`` reads the run's track (``RunDir``) and rebuilds that track's report."""
    _, res = tiny_run
    page = res.run_dir / "report.html"
    page.unlink()
    assert main(["report", str(res.run_dir)]) == 0
    out = capsys.readouterr().out
    assert "p95 resume TTFT vs recompute tokens" in page.read_text() and "held-out traces" in out
