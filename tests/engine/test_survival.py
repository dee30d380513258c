"""The survival layer on a dry-run radix tree: default unchanged, eviction order, pins, swap/discard,
TTL expiry, the event log, hostile inputs."""

from __future__ import annotations

import math
import random

import pytest

from engine import Accountant
from engine.survival import (
    Action,
    CostModel,
    EventLog,
    LRUSurvival,
    SurvivalDecision,
    SurvivalError,
    SurvivalManager,
    ToolGap,
    TreeBackend,
    tool_call_name,
)

BPT = 10
SYSTEM = [1, 2, 3, 4]


def items(k: int, n: int = 20, turn: int = 0) -> list[int]:
    """Session k's history: the shared system prompt, then its own tokens (longer each turn)."""
    return SYSTEM + [1000 * (k + 1) + i for i in range(n * (turn + 1))]


class Fixed:
    """A policy that answers each session with a given decision and records what it was asked."""

    name = "fixed"

    def __init__(self, by_session: dict[str, SurvivalDecision]) -> None:
        self.by_session = by_session
        self.asked: list = []

    def decide(self, request):
        self.asked.append(request)
        return {s.session: self.by_session[s.session] for s in request.pending}

    def close(self) -> None:
        pass


def setup(pool_tokens: int, host_tokens: int = 0, policy=None):
    acc = Accountant(None, BPT, pool_tokens * BPT, host_tokens * BPT)
    backend = TreeBackend(acc.tree, BPT)
    mgr = SurvivalManager(backend, policy, CostModel(bytes_per_token=BPT))
    return acc, backend, mgr


def run_and_pause(acc, backend, mgr, k: int, now: float, **kw) -> None:
    its = items(k)
    acc.request_items(its)
    mgr.pause(f"s{k}", backend.handle_for(its), now=now, turn=0, context_tokens=len(its), **kw)


def test_lru_policy_changes_nothing():
    """With the lru policy installed, every request costs what it costs without a survival layer."""
    plain = Accountant(None, BPT, 70 * BPT, 20 * BPT)
    acc, backend, mgr = setup(70, 20, LRUSurvival())
    script = [(k % 4, t) for t, k in enumerate([0, 1, 2, 0, 3, 1, 2, 0, 3, 3, 1])]
    for k, t in script:
        its = items(k, 12, t // 4)
        mgr.resume(f"s{k}", float(t))
        a, b = plain.request_items(its, [7, 8]), acc.request_items(its, [7, 8])
        assert a == b
        mgr.pause(f"s{k}", backend.handle_for(its), now=float(t), turn=t, context_tokens=len(its))
        assert (plain.tree.pool_used, plain.tree.host_used) == (acc.tree.pool_used, acc.tree.host_used)
        backend.check_integrity()
    assert plain.tree.stats == acc.tree.stats
    assert plain.tree.stats.swap_outs > 0 and plain.tree.stats.host_discarded_tokens > 0  # there was pressure


def test_pressure_evicts_the_lowest_score_first():
    pol = Fixed({"s0": SurvivalDecision(Action.KEEP, score=5.0), "s1": SurvivalDecision(Action.KEEP, score=1.0),
                 "s2": SurvivalDecision(Action.KEEP, score=3.0)})
    acc, backend, mgr = setup(70, policy=pol)
    for k in range(3):
        run_and_pause(acc, backend, mgr, k, float(k))
    acc.request_items(items(9))  # needs 20 more tokens: s1 (lowest score) goes, though s0 is older
    fp = {s: backend.footprint(p.handle).resident_tokens for s, p in mgr.paused.items()}
    assert fp == {"s0": 24, "s1": 4, "s2": 24}  # s1 keeps only the shared system prompt
    backend.check_integrity()


def test_pins_are_evicted_last_and_shared_prefix_survives():
    pol = Fixed({"s0": SurvivalDecision(Action.PIN, ttl_s=10.0, score=0.0),
                 "s1": SurvivalDecision(Action.KEEP, score=100.0)})
    acc, backend, mgr = setup(50, policy=pol)
    run_and_pause(acc, backend, mgr, 0, 0.0)
    run_and_pause(acc, backend, mgr, 1, 1.0)
    acc.request_items(items(5))
    assert backend.footprint(mgr.paused["s0"].handle).resident_tokens == 24  # pinned: kept whole
    assert backend.footprint(mgr.paused["s1"].handle).resident_tokens == 4  # only the shared prefix is left
    acc.request_items(items(6, 40))  # needs everything: the pin goes too, the tree never crashes
    assert backend.footprint(mgr.paused["s0"].handle).resident_tokens < 24
    backend.check_integrity()


def test_swap_and_discard_act_on_the_session_only():
    pol = Fixed({"s0": SurvivalDecision(Action.SWAP), "s1": SurvivalDecision(Action.DISCARD),
                 "s2": SurvivalDecision(Action.KEEP)})
    acc, backend, mgr = setup(1000, 100, policy=pol)
    for k in (2, 0, 1):
        run_and_pause(acc, backend, mgr, k, float(k))
    fp = {s: backend.footprint(p.handle) for s, p in mgr.paused.items()}
    assert (fp["s0"].resident_tokens, fp["s0"].host_tokens) == (4, 20)  # the shared prefix stays in the pool
    assert (fp["s1"].resident_tokens, fp["s1"].host_tokens) == (4, 0)
    assert (fp["s2"].resident_tokens, fp["s2"].host_tokens) == (24, 0)
    assert mgr.counters.swap_out_bytes == 20 * BPT and mgr.counters.discarded_tokens == 20
    info = mgr.resume("s1", 5.0)
    assert info is not None and (info.resident_tokens, info.absent_tokens, info.waited_s) == (4, 20, 4.0)
    u = acc.request_items(items(1))  # the discarded session recomputes its own tokens only
    assert (u.prefill_tokens, u.cached_tokens) == (20, 4)
    u = acc.request_items(items(0))  # the swapped one reads it back from the host tier
    assert u.prefill_tokens == 0 and acc.tree.stats.swap_in_bytes == 20 * BPT
    backend.check_integrity()


def test_ttl_expiry_asks_the_policy_again():
    class Chain:
        name = "chain"

        def __init__(self) -> None:
            self.previous: list = []

        def decide(self, request):
            out = {}
            for s in request.pending:
                self.previous.append((s.previous, s.waited_s))
                out[s.session] = (SurvivalDecision(Action.PIN, ttl_s=2.0) if s.previous is None
                                  else SurvivalDecision(Action.DISCARD))
            return out

        def close(self) -> None:
            pass

    pol = Chain()
    acc, backend, mgr = setup(1000, policy=pol)
    run_and_pause(acc, backend, mgr, 0, 10.0)
    assert mgr.next_expiry() == 12.0
    assert mgr.tick(11.9) == 0
    assert mgr.tick(12.0) == 1
    assert pol.previous == [(None, 0.0), (SurvivalDecision(Action.PIN, ttl_s=2.0), 2.0)]
    assert backend.footprint(mgr.paused["s0"].handle).resident_tokens == 0 and mgr.next_expiry() is None


def test_ready_sessions_outrank_paused_ones_under_a_scored_policy():
    pol = Fixed({"s0": SurvivalDecision(Action.KEEP, score=0.0), "s1": SurvivalDecision(Action.PIN, score=9.0)})
    acc, backend, mgr = setup(1000, policy=pol)
    run_and_pause(acc, backend, mgr, 0, 0.0)
    run_and_pause(acc, backend, mgr, 1, 0.0)
    mgr.resume("s0", 1.0)
    assert mgr.order("s0") == (3, 0.0) and mgr.order("s1") == (2, 9.0)
    mgr.admitted("s0", 0.5)
    assert mgr.order("s0") == (0, 0.0)
    _, _, lru = setup(1000)
    assert lru.order("nobody") == (0, 0.0)


class RandomPolicy:
    """Seeded random decisions of every kind, some with TTLs (to drive the tree's order hard)."""

    name = "random"

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def decide(self, request):
        out = {}
        for s in request.pending:
            action = self.rng.choice(list(Action))
            score = self.rng.choice([None, round(self.rng.uniform(-1, 1), 2)])
            ttl = self.rng.choice([None, 0.5, 2.0])
            out[s.session] = SurvivalDecision(action, ttl, score)
        return out

    def close(self) -> None:
        pass


@pytest.mark.parametrize("seed", range(6))
def test_survival_order_matches_a_full_scan(seed):
    """Sessions take turns under random decisions on two trees: the queued one and one that scans
    every node for each victim (the reference); both must evolve identically, and the backend's
    incremental ranks must equal a recount (``check_integrity``)."""
    from tests.engine.test_radix import ScanTree, shape

    runs = []
    for scan in (False, True):
        rng = random.Random(seed)
        acc = Accountant(None, BPT, 90 * BPT, 40 * BPT)
        if scan:
            acc.tree = ScanTree(90 * BPT, 40 * BPT)
        backend = TreeBackend(acc.tree, BPT)
        mgr = SurvivalManager(backend, RandomPolicy(seed), CostModel(bytes_per_token=BPT))
        turn = dict.fromkeys(range(5), 0)
        paused: dict[int, float] = {}
        trail = []
        for step in range(60):
            now = step * 0.25
            mgr.tick(now)
            k = rng.randrange(5)
            if k in paused:
                mgr.resume(f"s{k}", now)
                mgr.admitted(f"s{k}", 0.0)
                del paused[k]
            turn[k] += 1
            its = items(k, 6, turn[k])
            acc.request_items(its, [-k - 1, -k - 2])
            mgr.pause(f"s{k}", backend.handle_for(its), now=now, turn=turn[k], context_tokens=len(its))
            paused[k] = now
            backend.check_integrity()
            trail.append((shape(acc.tree), acc.tree.stats.evicted_tokens, acc.tree.stats.swap_out_bytes,
                          acc.tree.pool_used, acc.tree.host_used))
        runs.append(trail)
        assert acc.tree.stats.evicted_tokens and acc.tree.stats.swap_out_bytes  # under pressure
    assert runs[0] == runs[1]


def test_event_log_eta_and_durations():
    log = EventLog(per_tool=2)
    for d in (1.0, 2.0, 3.0):
        log.record_return("search", d)
    assert log.durations("search") == (2.0, 3.0) and log.stats(["search"]).all_durations == (1.0, 2.0, 3.0)
    assert log.eta is None
    log.record_finish(2)  # pairs (turn index, turns remaining): (0, 1), (1, 0)
    log.record_finish(3)  # (0, 2), (1, 1), (2, 0)
    xs, ys = [0, 1, 0, 1, 2], [1, 0, 2, 1, 0]
    mx, my = sum(xs) / 5, sum(ys) / 5
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / 5
    corr = cov / math.sqrt(sum((x - mx) ** 2 for x in xs) / 5 * sum((y - my) ** 2 for y in ys) / 5)
    assert log.eta == pytest.approx(-corr)
    with pytest.raises(SurvivalError, match="duration"):
        log.record_return("search", -1.0)


@pytest.mark.parametrize("raw, field", [
    ({"expected_s": -3.0}, "tool_gap.expected_s"),
    ({"expected_s": "soon"}, "tool_gap.expected_s"),
    ({"expected_s": float("nan")}, "tool_gap.expected_s"),
    ({"tool": ""}, "tool_gap.tool"),
    ({"tool": "x", "when": 1}, "tool_gap"),
    ([1, 2], "tool_gap"),
])
def test_bad_tool_gaps_are_refused(raw, field):
    with pytest.raises(SurvivalError) as err:
        ToolGap.from_wire(raw)
    assert err.value.field == field


@pytest.mark.parametrize("raw, match", [
    ({"action": "evict"}, "action must be one of keep, pin, swap, discard"),
    ({"action": "pin", "ttl_s": -1}, "ttl_s must be >= 0"),
    ({"action": "keep", "score": float("inf")}, "score must be a finite number"),
    ({"action": "keep", "extra": 1}, "unknown field 'extra'"),
    ("keep", "must be an object"),
])
def test_bad_decisions_are_refused(raw, match):
    with pytest.raises(SurvivalError, match=match):
        SurvivalDecision.from_wire(raw)


def test_policy_errors_raise_or_fall_back():
    class Forgetful:
        name = "forgetful"

        def decide(self, request):
            return {}

        def close(self) -> None:
            pass

    acc, backend, mgr = setup(1000, policy=Forgetful())
    with pytest.raises(SurvivalError, match="no decision for session 's0'"):
        run_and_pause(acc, backend, mgr, 0, 0.0)
    lenient = SurvivalManager(TreeBackend(acc.tree, BPT), Forgetful(), strict=False)
    its = items(1)
    acc.request_items(its)
    d = lenient.pause("s1", lenient.backend.handle_for(its), now=0.0, turn=0, context_tokens=24)  # type: ignore[attr-defined]
    assert d.action is Action.KEEP and lenient.counters.policy_errors == 1
    with pytest.raises(SurvivalError, match="already paused"):
        lenient.pause("s1", None, now=0.0, turn=0, context_tokens=1)
    with pytest.raises(SurvivalError, match="context_tokens must be >= 0"):
        lenient.pause("s2", None, now=0.0, turn=0, context_tokens=-1)


def test_tool_calls_are_detected_in_replies():
    assert tool_call_name('Let me look.\n<tool_call>\n{"name": "search", "arguments": {}}\n</tool_call>') == "search"
    assert tool_call_name("<tool_call>not json</tool_call>") == "unknown"
    assert tool_call_name("The answer is 4.") is None
