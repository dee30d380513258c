"""Survival policies: each rule against hand-computed values, built-ins against their seed programs,
the registry's errors, and hostile survival programs in the sandbox."""

from __future__ import annotations

import math
import random

import optuna
import pytest

from engine.survival import Action, CostModel, LogStats, SessionInfo, SurvivalDecision, SurvivalRequest, SystemInfo
from search_spaces import ParameterError, ProgramFailure, SandboxLimits, Status
from search_spaces.errors import UnknownPolicyError
from search_spaces.survival import (
    SURVIVAL_FAMILIES,
    SURVIVAL_SEEDS,
    autellix,
    check_program,
    get_survival_policy,
    infercept,
    make_survival_policy,
    run_survival_program,
    suggest_survival_params,
    survival_policy_names,
    survival_seed_source,
    unison,
)
from search_spaces.survival.api import SurvivalView

M = 100  # bytes per token
COST = CostModel(prefill=(0.01, 0.001, 0.0), decode=(0.05, 0.01), swap_bytes_per_s=1e6, bytes_per_token=M)


def session(sid: str = "s", **kw) -> SessionInfo:
    base = dict(session=sid, program=sid, turn=1, context_tokens=1000, kv_bytes=1000 * M, resident_tokens=1000,
                host_tokens=0, absent_tokens=0, tool="search", expected_gap_s=None, waited_s=0.0, paused_at=0.0,
                arrival_s=0.0, service_s=1.0, program_service_s=1.0, critical_s=1.0, queue_wait_s=0.0,
                relevance=None, side_effect=False, previous=None)
    base.update(kw)
    return SessionInfo(**base)  # type: ignore[arg-type]


def request(*sessions: SessionInfo, running_tokens: int = 500, running: int = 1, host_bytes: int = 10**9,
            durations: dict | None = None, all_durations: tuple = (), n_returns: int = 0, eta=None,
            queue_delay=None, pool_used: int = 50_000) -> SurvivalRequest:
    system = SystemInfo(100_000, pool_used, host_bytes, 0, running_tokens, running, len(sessions), 0)
    log = LogStats(durations or {}, all_durations, n_returns, eta, queue_delay, ())
    return SurvivalRequest(10.0, tuple(sessions), system, log, COST)


def decide(name: str, req: SurvivalRequest, **params) -> dict[str, SurvivalDecision]:
    return dict(get_survival_policy(name, **params).decide(req))


# ---------------------------------------------------------------- InferCept (min_waste)

def test_infercept_wastes_match_the_hand_computed_values():
    # C=1000, M=100, T_gap=2, T_fwd(1000)=0.01+0.001*1000=1.01, C_other=500, T_swap(1e5 B)=0.1
    req = request(session(expected_gap_s=2.0))
    view = SurvivalView(req.wire())
    w = infercept.wastes(view, view.sessions[0], infercept.InferCeptParams(gap_estimate="expected"))
    assert w.preserve == pytest.approx(2 * 1000 * 100)  # 200,000
    assert w.discard == pytest.approx(1.01 * 1000 * 100 + 1.01 * 500 * 100)  # 151,500
    assert w.swap == pytest.approx(2 * 0.1 * 500 * 100)  # 10,000
    chunked = infercept.wastes(view, view.sessions[0], infercept.InferCeptParams(gap_estimate="expected", chunked=True))
    assert chunked.discard == pytest.approx(0.5 * 101_000 + 50_500)


def test_infercept_chooses_the_least_waste():
    req = request(session(expected_gap_s=2.0), running_tokens=500)
    assert decide("min_waste", req, gap_estimate="expected", swap_budget_steps=0.0)["s"].action is Action.DISCARD
    short = request(session(expected_gap_s=1.0))  # preserve 100,000 < discard 151,500
    d = decide("min_waste", short, gap_estimate="expected", swap_budget_steps=0.0, recheck_s=0.25)["s"]
    assert (d.action, d.ttl_s, d.score) == (Action.PIN, 0.25, pytest.approx(1.01))
    # budget: one decode step of the running batch (0.06 s) hides 60,000 bytes: too few for 100,000
    assert decide("min_waste", req, gap_estimate="expected")["s"].action is Action.DISCARD
    # 2 steps' worth (120,000 bytes) suffices, and swap (10,000) beats min(200,000, 151,500)
    assert decide("min_waste", req, gap_estimate="expected", swap_budget_steps=2.0)["s"].action is Action.SWAP


def test_infercept_gives_swap_to_the_largest_waste_first():
    big = session("big", expected_gap_s=50.0)  # min waste = discard 151,500
    small = session("small", context_tokens=200, kv_bytes=20_000, resident_tokens=200, expected_gap_s=50.0)
    req = request(small, big)  # budget of 2 steps: 120,000 bytes -> big (100,000) fits, then small (20,000) too
    out = decide("min_waste", req, gap_estimate="expected", swap_budget_steps=2.0)
    assert out["big"].action is Action.SWAP and out["small"].action is Action.SWAP
    out = decide("min_waste", req, gap_estimate="expected", swap_budget_steps=1.5)  # 90,000: only small fits
    assert out["big"].action is Action.DISCARD and out["small"].action is Action.SWAP


def test_infercept_waited_estimate_and_thresholds():
    fresh = request(session(waited_s=0.0))  # nothing waited yet: preserving wastes nothing
    assert decide("min_waste", fresh)["s"].action is Action.PIN
    chain = [decide("min_waste", request(session(waited_s=w)), gap_estimate="thresholds")["s"] for w in (0, 5, 8)]
    assert [(d.action, d.ttl_s) for d in chain] == [(Action.PIN, 4.0), (Action.SWAP, 2.0), (Action.DISCARD, None)]
    known = decide("min_waste", request(session(expected_gap_s=5.0)), gap_estimate="thresholds")["s"]
    assert (known.action, known.ttl_s) == (Action.SWAP, None)


# ---------------------------------------------------------------- Continuum (ttl)

def test_continuum_picks_the_ttl_on_a_tiny_cdf():
    # durations 0.5, 1, 3, 10: F = .25, .5, .75, 1. Value V = reload (prefill 1.01 s) + queue 2.99 * eta 1 = 4.0
    cdf = {"search": (0.5, 1.0, 3.0, 10.0)}
    req = request(session(), host_bytes=0, durations=cdf, all_durations=cdf["search"], n_returns=4, eta=1.0,
                  queue_delay=2.99)
    # gains: tau=0: 0; 0.5: 1.0-0.5=0.5; 1: 2.0-1=1.0; 3: 3.0-3=0; 10: 4-10 -> tau = 1
    d = decide("ttl", req, min_observations=1)["s"]
    assert (d.action, d.ttl_s, d.score) == (Action.PIN, 1.0, -0.0)
    # V = 1.01 (no queueing): gains .5*.25... all <= 0.01 -> 0.2525-0.5 < 0, so no pin
    lean = request(session(), host_bytes=0, durations=cdf, all_durations=cdf["search"], n_returns=4, eta=1.0)
    assert decide("ttl", lean, min_observations=1)["s"].action is Action.KEEP


def test_continuum_cold_start_and_released_variant_and_expiry():
    req = request(session(), host_bytes=0, queue_delay=0.99, eta=0.5)  # cold: eta = 1, V = 0.99 + 1.01 = 2.0
    d = decide("ttl", req)["s"]
    assert d.action is Action.PIN and d.ttl_s == pytest.approx(math.log(2.0))  # m ln(V/m), m = 1
    fast = request(session(), durations={"search": (0.5, 1.5)})
    assert decide("ttl", fast, variant="released")["s"] == SurvivalDecision(Action.PIN, 2.0, -0.0)
    slow = request(session(), durations={"search": (3.0, 5.0)})
    assert decide("ttl", slow, variant="released")["s"].action is Action.KEEP
    expired = request(session(arrival_s=7.0, previous=SurvivalDecision(Action.PIN, 1.0)))
    assert decide("ttl", expired)["s"] == SurvivalDecision(Action.KEEP, None, -7.0)


# ---------------------------------------------------------------- Autellix, UNISON, intent, weighted

def test_autellix_queues_double_and_starving_programs_are_promoted():
    p = autellix.AutellixParams()
    assert [autellix.queue_of(s, p) for s in (0.0, 0.99, 1.0, 2.9, 3.0, 7.0, 100.0)] == [0, 0, 1, 1, 2, 3, 3]
    req = request(session("busy", program_service_s=5.0), session("new", program_service_s=0.2),
                  session("starved", program_service_s=5.0, queue_wait_s=10.0))
    out = decide("program_priority", req)
    assert (out["busy"].score, out["new"].score, out["starved"].score) == (-2.0, 0.0, 0.0)
    atlas = decide("program_priority", request(session(program_service_s=5.0, critical_s=0.5)), mode="atlas")
    assert atlas["s"].score == 0.0


def test_next_ref_score_matches_the_published_form():
    # empirical CDF of 4 durations, waited 1.0, horizon 5: F(1)=.5, F(6)=.75 -> P = .25/.5 = .5
    cdf = (0.5, 1.0, 3.0, 10.0)
    req = request(session(waited_s=1.0, context_tokens=16384), all_durations=cdf)
    d = decide("next_ref", req, min_observations=4)["s"]
    assert d.score == pytest.approx(-(0.4 * (1.0 / 30.0) + 0.4 * 0.5 + 0.2 * 0.5))
    hinted = request(session(waited_s=1.0, expected_gap_s=3.0))  # remaining 2 s: P = 1 - exp(-5/2)
    view = SurvivalView(hinted.wire())
    pe = unison.p_evict(view, view.sessions[0], unison.UnisonParams())
    assert pe == pytest.approx(0.4 / 30 + 0.4 * math.exp(-2.5) + 0.2 * 1000 / 32768)


def test_intent_ranks_by_relevance_and_thresholds():
    req = request(session("on", relevance=0.9), session("off", relevance=0.1), session("unknown"))
    out = decide("intent", req)
    assert out["off"].score < out["unknown"].score < out["on"].score
    out = decide("intent", req, discard_below=0.2)
    assert out["off"].action is Action.DISCARD and out["on"].action is Action.KEEP


def test_weighted_score_matches_the_hand_computed_value():
    req = request(session(expected_gap_s=7.0, waited_s=2.0, relevance=0.8), pool_used=50_000)
    # cost = 1.01/(1.01+1); gap: R = 5 -> 5/10; ref = 1 - P, P = 1 - exp(-5/5); intent .8
    # weights with pressure .5: w_cost = 1 + 2*.5 = 2
    d = decide("weighted", req, m_cost_pressure=2.0)["s"]
    want = 2 * 1.01 / 2.01 - 0.5 - math.exp(-1.0) + 0.5 * 0.8
    assert d.score == pytest.approx(want) and d.action is Action.KEEP
    pinned = decide("weighted", req, pin_above=-1.0)["s"]
    assert (pinned.action, pinned.ttl_s) == (Action.PIN, 5.0)


# ---------------------------------------------------------------- seeds, registry

def _corpus() -> list[SurvivalRequest]:
    rng = random.Random(3)
    out = []
    for k in range(10):
        sessions = []
        for j in range(1 + k % 3):
            ctx = rng.randint(50, 5000)
            res = rng.randint(0, ctx)
            sessions.append(session(
                f"s{j}", program=f"p{j % 2}", context_tokens=ctx, kv_bytes=ctx * M, resident_tokens=res,
                host_tokens=rng.randint(0, ctx - res), tool=rng.choice(["search", "python"]),
                expected_gap_s=rng.choice([None, rng.uniform(0.1, 20)]), waited_s=rng.uniform(0, 10),
                arrival_s=rng.uniform(0, 100), service_s=rng.uniform(0, 20), program_service_s=rng.uniform(0, 40),
                critical_s=rng.uniform(0, 20), queue_wait_s=rng.uniform(0, 30),
                relevance=rng.choice([None, rng.random()]),
                previous=rng.choice([None, SurvivalDecision(Action.PIN, 1.0, 0.5)])))
        durations = tuple(round(rng.expovariate(0.5), 3) for _ in range(rng.choice([0, 5, 30, 150])))
        out.append(request(*sessions, running_tokens=rng.randint(0, 4000), running=rng.randint(0, 4),
                           host_bytes=rng.choice([0, 10**6, 10**8]), durations={"search": durations[:20]},
                           all_durations=durations, n_returns=len(durations),
                           eta=rng.choice([None, 0.3]), queue_delay=rng.choice([None, 1.5]),
                           pool_used=rng.randint(0, 100_000)))
    return out


CORPUS = _corpus()


def _params(name: str, n: int) -> list[dict]:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=5))
    out = [{}]
    for _ in range(n):
        trial = study.ask()
        params = SURVIVAL_FAMILIES[name].space(trial)
        seed = suggest_survival_params(survival_seed_source(name), optuna.trial.FixedTrial(trial.params))
        assert seed.ok, seed.reason
        assert dict(seed.params or {}) == params  # the seed's space draws the same parameters
        study.tell(trial, 0.0)
        out.append(params)
    return out


@pytest.mark.parametrize("name", SURVIVAL_SEEDS)
def test_builtin_and_seed_program_give_the_same_decisions(name):
    assert set(SURVIVAL_SEEDS) == set(SURVIVAL_FAMILIES)
    check = check_program(survival_seed_source(name))
    assert check.ok, check.reason
    assert dict(check.defaults or {}) == get_survival_policy(name).params
    for params in _params(name, 2):
        res = run_survival_program(survival_seed_source(name), params, CORPUS)
        assert res.ok, res.reason
        built = get_survival_policy(name, **params)
        for r, got in zip(CORPUS, res.decisions):
            assert dict(got) == dict(built.decide(r)), (name, params)


def test_registry_names_and_errors():
    assert survival_policy_names() == ("lru", "ttl", "min_waste", "program_priority", "next_ref", "intent",
                                       "weighted", "program")
    with pytest.raises(UnknownPolicyError, match="valid survival policies: lru, ttl, min_waste"):
        get_survival_policy("belady")
    with pytest.raises(ParameterError, match="unknown parameter 'ttl'; valid parameters: variant"):
        get_survival_policy("ttl", ttl=3)
    with pytest.raises(ParameterError, match="gap_estimate"):
        get_survival_policy("min_waste", gap_estimate="psychic")
    with pytest.raises(ParameterError, match="unknown field 'weights'"):
        make_survival_policy({"name": "ttl", "weights": 1})
    with pytest.raises(ParameterError, match="params must be an object"):
        make_survival_policy({"name": "ttl", "params": [1]})
    assert make_survival_policy({"name": "ttl", "params": {"variant": "released"}}).params["variant"] == "released"


# ---------------------------------------------------------------- hostile programs

LIMITS = SandboxLimits(cpu_seconds=2, wall_seconds=5, memory_mb=256, max_output_bytes=100_000)


def prog(body: str) -> str:
    return f"def decide(request, params):\n{body}\n\n\ndef space(trial):\n    return {{}}\n"


@pytest.mark.parametrize("body, status, reason", [
    ("    return {}", Status.INVALID, "no decision for session 's'"),
    ("    return {s.session: {'action': 'evict'} for s in request.sessions}", Status.INVALID, "action must be one of"),
    ("    return {s.session: {'action': 'pin', 'ttl_s': -1} for s in request.sessions}", Status.INVALID, "ttl_s"),
    ("    return {'ghost': {'action': 'keep'}, 's': {'action': 'keep'}}", Status.INVALID, "not pending"),
    ("    return 'keep'", Status.ERROR, "return a dict"),
    ("    return 1 / 0", Status.ERROR, "ZeroDivisionError"),
    ("    while True:\n        pass", Status.TIMEOUT, "limit"),
    ("    import os\n    return {}", Status.REFUSED, "import of 'os' is not allowed"),
    ("    return request._cost", Status.REFUSED, "'_cost' is not allowed"),
])
def test_hostile_survival_programs_fail_with_a_reason(body, status, reason):
    res = run_survival_program(prog(body), {}, [request(session())], LIMITS)
    assert res.status is status and reason in res.reason and not res.decisions
    assert res.ok is False and res.record()["ok"] is False


def test_a_live_survival_program_answers_many_calls_and_fails_cleanly():
    policy = make_survival_policy({"source": survival_seed_source("next_ref"), "params": {"rescore_s": 1.0}})
    builtin = get_survival_policy("next_ref", rescore_s=1.0)
    for r in CORPUS * 3:
        assert dict(policy.decide(r)) == dict(builtin.decide(r))
    policy.close()
    policy.close()  # harmless twice
    bad = make_survival_policy({"source": prog("    return 1 / 0")}, LIMITS)
    with pytest.raises(ProgramFailure, match="ZeroDivisionError") as err:
        bad.decide(request(session()))
    assert err.value.result.status is Status.ERROR
    with pytest.raises(ProgramFailure, match="ZeroDivisionError"):
        bad.decide(request(session()))  # the session is dead: the same failure, no new process
    bad.close()
    with pytest.raises(ParameterError, match="unknown parameter 'x'"):
        make_survival_policy({"source": survival_seed_source("lru"), "params": {"x": 1}})
    with pytest.raises(ProgramFailure, match="refused"):
        make_survival_policy({"source": "import os\n"})


def test_survival_api_doc_matches_the_code():
    import re
    from pathlib import Path

    from search_spaces.survival import survival_api_doc
    from search_spaces.survival.api import SessionView

    doc = Path(__file__).resolve().parents[2] / "docs" / "survival-api.md"
    assert doc.read_text() == survival_api_doc()
    for name in set(re.findall(r"`request\.(\w+)", survival_api_doc())):
        assert name in dir(SurvivalView), name
    for name in set(re.findall(r"`s\.(\w+)", survival_api_doc())):
        assert name in dir(SessionView), name
    example = re.search(r"```python\n(.*?)```", survival_api_doc(), re.S)
    assert example is not None and check_program(example.group(1)).ok
    res = run_survival_program(example.group(1), {}, [request(session())])
    assert res.ok and res.decisions[0]["s"] == SurvivalDecision(Action.PIN, 2.0, -0.0)
