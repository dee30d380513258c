"""The simulator against the real engine (tiny-random): same histories, same tree decisions, same numbers.

The reference is the real replay: the engine with real tensors, its renderer and tokenizer, its
model generating every token. On the model clock (``ReplayConfig(clock="model")``) it sees events
in the simulator's order, so every token metric, every decision and every time must be equal --
for both trace kinds and all seven survival families, with parameters that make each family pin,
swap, discard or re-decide on expiry where it can.
"""

from __future__ import annotations

import pytest

from engine.survival import CostModel
from evals.survival import (
    METRIC_KEYS,
    TOKEN_KEYS,
    Calibration,
    ChatTokens,
    ReplayConfig,
    SimConfig,
    generate_trace,
    replay,
    simulate,
)
from evals.survival.chat import SessionTokens
from evals.survival.real import Conversation
from evals.survival.text import vocabulary
from search_spaces.survival import SURVIVAL_FAMILIES

PARAMS = {  # parameters under which each family acts, not only keeps
    "lru": {},
    "ttl": {},
    "min_waste": {"gap_estimate": "thresholds", "preserve_below_s": 0.3, "swap_below_s": 1.0, "recheck_s": 0.25},
    "program_priority": {"swap_level": 1, "discard_level": 2},
    "next_ref": {"rescore_s": 0.5, "swap_above": 0.5, "discard_above": 0.7},
    "intent": {"swap_below": 0.6, "discard_below": 0.3},
    "weighted": {"rescore_s": 0.5, "pin_above": 1.0, "swap_below": 0.0, "discard_below": -0.5},
}
TRACES = {"tool-heavy": generate_trace("tool-heavy", 2, seed=1, token_scale=0.25),
          "memory-tight": generate_trace("memory-tight", 3, seed=1, token_scale=0.25)}


@pytest.fixture(scope="module")
def cal(tiny) -> Calibration:
    """Slow assumed speeds (a prefill costs what a bigger model's would), tiny-random's template ids:
    on the model clock the replay stays fast while the policies see reloads worth avoiding."""
    cost = CostModel((0.05, 0.002, 0.0), (0.03, 0.01), 2e6, tiny.geometry.bytes_per_token, "assumed: test")
    return Calibration.assumed("tiny-random", cost, 0.001, ChatTokens.from_renderer(tiny.renderer,
                                                                                     vocabulary(tiny.tokenizer)))


def test_the_simulator_builds_the_engines_histories(tiny, cal):
    for trace in TRACES.values():
        for spec in trace.sessions:
            conv = Conversation(trace, spec, vocabulary(tiny.tokenizer))
            toks = SessionTokens(cal.chat, trace.header, spec)
            for k in range(len(spec.turns)):
                assert toks.at(k) == tiny.layout(conv.at(k)).items, (spec.session, k)
    assert ChatTokens.from_wire(cal.chat.wire()) == cal.chat
    assert Calibration.from_wire(cal.wire()) == cal


@pytest.fixture(scope="module")
def runs(tiny, cal) -> dict[tuple[str, str], tuple[dict, dict]]:
    out = {}
    for kind, trace in TRACES.items():
        for family in SURVIVAL_FAMILIES:
            spec = {"name": family, "params": PARAMS[family]}
            real = replay(trace, spec, ReplayConfig(model="tiny-random", calibration=cal, clock="model"), engine=tiny)
            out[kind, family] = (real, simulate(trace, spec, SimConfig(calibration=cal)))
    return out


@pytest.mark.parametrize("family", sorted(PARAMS))
@pytest.mark.parametrize("kind", sorted(TRACES))
def test_replay_and_simulate_agree_token_for_token(runs, kind, family):
    real, sim = runs[kind, family]
    assert real["ok"] and sim["ok"] and real["clock"] == "model"
    assert real["overlap_tokens"] == 0 and real["short_turns"] == 0  # nothing the simulator cannot know
    for key in (*TOKEN_KEYS, *METRIC_KEYS, "actions", "policy_calls", "makespan_s", "hol_wait_p95_s"):
        assert real[key] == sim[key], (key, real[key], sim[key])


def test_the_conformance_runs_exercise_every_decision(runs):
    """The equality above covers pins, swaps, discards, re-decisions, eviction and host discards."""
    actions = {a: sum(r["actions"][a] for r, _ in runs.values()) for a in ("keep", "pin", "swap", "discard")}
    assert all(n > 0 for n in actions.values()), actions
    assert any(r["policy_calls"] > r["turns"] for r, _ in runs.values())  # TTL expiries asked again
    for key in ("evicted_tokens", "host_discarded_tokens", "discarded_tokens", "swap_in_bytes", "recompute_tokens"):
        assert sum(r[key] for r, _ in runs.values()) > 0, key


def test_the_model_clock_is_the_calibrations(cal):
    """An independent check of the clock: with one session and no pressure, a turn's end is its
    ready time plus the modelled start, steps and finish (the trace's gaps in between)."""
    trace = TRACES["memory-tight"].head(1)
    r = simulate(trace, "lru", SimConfig(calibration=cal, pool_tokens=10**6))
    t, spec = cal.timing, trace.sessions[0]
    toks, clock, prev_end = SessionTokens(cal.chat, trace.header, spec), spec.arrival_s, 0
    for k, turn in enumerate(spec.turns):
        items = toks.at(k)
        computed = len(items) - prev_end  # the previous prompt is stored, nothing evicted
        clock += t.t_start(computed, len(items))
        n = turn.output_tokens  # the last step picks a token only
        clock += sum(t.t_step(1, 1, len(items) + i) for i in range(n - 1)) + t.t_step(1, 0, 0) + t.finish_s
        clock += turn.gap_s if k < len(spec.turns) - 1 else 0.0
        prev_end = len(items)
    assert r["jct_mean_s"] == pytest.approx(clock - spec.arrival_s, rel=1e-9)
