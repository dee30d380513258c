"""Batch scoring (``Engine.score_many``) against ``Engine.score`` called on each request in order.

Two engines share the model: one scores the batch, the other the same requests one at a time.
Scores must agree within 1e-5 (float32 log-probabilities), and so must the best candidates, every
usage report, the engines' counters and the radix trees afterwards (structure, states, locks,
stored KV and hidden states).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import engine.batch_score as batch_score
from engine import AKVError, Engine
from engine.batch_score import PendingHidden, PendingKV
from engine.cache.kvstore import TensorKV
from engine.cache.radix import Node
from tests.conftest import tolerances
from tests.engine.agent import trajectory

ATOL = 1e-5 if tolerances().exact_argmax else tolerances().logprob_atol
CANDIDATES = [" A", " B", " C", " red", " order"]
LONG = [" Warehouse B ships it.", " the hold was a customs check", " red"]


def fresh(eng: Engine, **kw) -> Engine:
    return Engine(eng.model, eng.tokenizer, eng.renderer.template.name, name=eng.name, **kw)


def rolling(n_msgs: int, keep: int, reposition: bool = True) -> dict:
    """Rolling drop of tool responses (odd ids >= 3) keeping the last ``keep``; reposition on drops."""
    tools = list(range(3, n_msgs, 2))
    drops = {str(t): [tools[j - keep]] for j, t in enumerate(tools) if j >= keep}
    return {"drop_message": drops, "reposition": list(map(int, drops)) if reposition else []}


def tree_state(eng: Engine) -> list[tuple]:
    """The tree as comparable rows, children in a canonical order: (depth, items, token range, state,
    lock, KV, end hidden)."""
    rows: list[tuple] = []

    def walk(node: Node, depth: int) -> None:
        for key in sorted(node.children, key=repr):
            child = node.children[key]
            assert not isinstance(child.payload, PendingKV) and not isinstance(child.end_hidden, PendingHidden)
            kv = None
            if isinstance(child.payload, TensorKV):
                kv = (child.payload.keys.float().cpu(), child.payload.values.float().cpu())
            hidden = child.end_hidden.float().cpu() if child.end_hidden is not None else None
            rows.append((depth, repr(child.items), child.token_start, child.n_tokens, child.state, child.lock,
                         kv, hidden))
            walk(child, depth + 1)

    walk(eng.tree.root, 0)
    return rows


def assert_same_tree(a: Engine, b: Engine) -> None:
    sa, sb = tree_state(a), tree_state(b)
    assert [r[:6] for r in sa] == [r[:6] for r in sb]
    for ra, rb in zip(sa, sb):
        if ra[6] is None or rb[6] is None:
            assert ra[6] is rb[6] is None
        else:
            for x, y in zip(ra[6], rb[6]):
                assert torch.allclose(x, y, atol=1e-4, rtol=1e-4)
        assert (ra[7] is None) == (rb[7] is None)
        if ra[7] is not None:
            assert torch.allclose(ra[7], rb[7], atol=1e-4, rtol=1e-4)
    assert a.tree.pool_used == b.tree.pool_used and a.tree.host_used == b.tree.host_used


def check_batch(base: Engine, requests: list[tuple], warm: list[tuple] = ()) -> None:
    """``score_many`` on a fresh engine equals ``score`` per request on another (both warmed first)."""
    batched, sequential = fresh(base), fresh(base)
    for eng in (batched, sequential):
        for msgs, cands, sched in warm:
            eng.score(msgs, cands, sched)
    prepared = [batched.prepare(m, s, candidates=c) for m, c, s in requests]
    got = batched.score_many(prepared)
    want = [sequential.score(m, c, s) for m, c, s in requests]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.candidates == w.candidates and g.n_tokens == w.n_tokens
        assert np.allclose(g.logprobs, w.logprobs, atol=ATOL, rtol=0), (i, g.logprobs, w.logprobs)
        assert g.best == w.best and g.best_norm == w.best_norm, i
        assert g.usage == w.usage, (i, g.usage, w.usage)
    assert batched.stats.requests == sequential.stats.requests
    assert batched.stats.prefill_tokens == sequential.stats.prefill_tokens
    batched.check_integrity()
    assert_same_tree(batched, sequential)


def test_shared_prefixes_drops_and_repositions(tiny):
    msgs = trajectory(6)
    reqs = [(msgs[:turn], CANDIDATES, rolling(turn, keep)) for turn in (6, 10, 14) for keep in (1, 2, 9)]
    reqs.append((msgs[:12], LONG, {"drop_message": {"5": [3], "9": [5, 7]}}))  # drops without reposition
    reqs.append((msgs[:12], LONG, None))
    check_batch(tiny, reqs)
    check_batch(tiny, reqs, warm=[(msgs[:8], CANDIDATES, rolling(8, 1))])  # reading stored KV too


def test_identical_requests_and_one_history_with_other_candidates(tiny):
    msgs = trajectory(5)
    sched = rolling(10, 1)
    reqs = [(msgs[:10], CANDIDATES, sched), (msgs[:10], CANDIDATES, sched), (msgs[:10], LONG, sched),
            (msgs[:10], CANDIDATES, sched), (msgs[:8], CANDIDATES, None), (msgs[:8], CANDIDATES, None)]
    check_batch(tiny, reqs)


def test_a_warm_tree_whose_stored_hidden_states_end_the_histories(tiny):
    """Requests already scored before: nothing left to compute but single-token candidates."""
    msgs = trajectory(5)
    reqs = [(msgs[:10], CANDIDATES, rolling(10, 1)), (msgs[:8], CANDIDATES, None), (msgs[:10], LONG, None)]
    check_batch(tiny, reqs, warm=reqs)
    check_batch(tiny, reqs[:1], warm=reqs[:1])


@pytest.mark.parametrize("name", ["tiny_gemma"])
def test_sliding_window_model(name, request):
    msgs = trajectory(6)
    reqs = [(msgs[:turn], CANDIDATES, rolling(turn, keep)) for turn in (8, 14) for keep in (1, 3)]
    check_batch(request.getfixturevalue(name), reqs)


def test_more_candidate_tokens_than_one_pass_takes(tiny, monkeypatch):
    """A batch beyond ``BATCH_SCORE_TOKENS`` goes in several passes (the bound is lowered here: at
    the real 2048 tokens the vocabulary-sized logits of the tiny model take tens of seconds)."""
    msgs = trajectory(4)
    reqs = [(msgs[:turn], LONG, rolling(turn, keep)) for turn in (6, 8, 10) for keep in (1, 2)]
    n_tokens = sum(p.scored_tokens for p in (tiny.prepare(m, s, candidates=c) for m, c, s in reqs))
    passes = []
    real = batch_score.batched_prefill
    monkeypatch.setattr(batch_score, "batched_prefill", lambda *a, **k: passes.append(1) or real(*a, **k))
    monkeypatch.setattr(batch_score, "BATCH_SCORE_TOKENS", n_tokens // 3)
    check_batch(tiny, reqs)
    assert len(passes) >= 3


def test_a_request_without_candidates_is_refused_before_anything_is_planned(tiny):
    eng = fresh(tiny)
    msgs = trajectory(3)
    eng.score(msgs[:6], CANDIDATES)
    before = tree_state(eng)
    good = eng.prepare(msgs[:8], candidates=CANDIDATES)
    bad = eng.prepare(msgs[:8])  # a chat request: no candidates
    with pytest.raises(AKVError, match="request 1 has no candidates") as err:
        eng.score_many([good, bad])
    assert err.value.field == "candidates"
    after = tree_state(eng)
    assert [r[:6] for r in after] == [r[:6] for r in before] and eng.stats.requests == 1
    assert eng.score_many([]) == []


def test_a_failed_pass_leaves_no_pending_kv_and_the_next_batch_is_exact(tiny, monkeypatch):
    eng, ref = fresh(tiny), fresh(tiny)
    msgs = trajectory(4)
    reqs = [(msgs[:turn], CANDIDATES, rolling(turn, 1)) for turn in (6, 8, 10)]
    eng.score(*reqs[0]) and ref.score(*reqs[0])

    def boom(*a, **k):
        raise MemoryError("out of memory")

    monkeypatch.setattr(batch_score, "batched_prefill", boom)
    with pytest.raises(MemoryError):
        eng.score_many([eng.prepare(m, s, candidates=c) for m, c, s in reqs])
    eng.check_integrity()
    assert all(n.lock == 0 for n in eng.tree.nodes())
    assert not any(isinstance(n.payload, PendingKV) or isinstance(n.end_hidden, PendingHidden)
                   for n in eng.tree.nodes())
    monkeypatch.undo()
    got = eng.score_many([eng.prepare(m, s, candidates=c) for m, c, s in reqs])
    want = [ref.score(m, c, s) for m, c, s in reqs]
    for g, w in zip(got, want):
        assert np.allclose(g.logprobs, w.logprobs, atol=ATOL, rtol=0)
    eng.check_integrity()
