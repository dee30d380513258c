"""Memory per request: Engine.score in candidate groups (exact, flat peak), a token-bounded render cache."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import torch

import engine.scoring as scoring
from engine.layout import Renderer
from engine.oracle.reference import ReferenceExecutor
from tests.conftest import tolerances
from tests.engine.agent import trajectory
from tests.engine.test_engine import fresh, rolling

TOL = tolerances()
CANDIDATES = [" A", " Warehouse B", " Falkirk", " the red order ships from Perth on Monday", " 4821", " no", " yes"]


def reference_score(eng, items, cont) -> float:
    """Sum of log p(token | everything before), each prefix recomputed from scratch, step by step."""
    ref = ReferenceExecutor(eng.model)
    return sum(float(torch.log_softmax(ref.run([*items, *cont[:j]]).last_logits.float(), dim=-1)[tok])
               for j, tok in enumerate(cont))


def test_candidates_scored_in_many_groups_match_the_reference(tiny, monkeypatch):
    monkeypatch.setattr(scoring, "SCORE_GROUP_SIZE", 3)
    monkeypatch.setattr(scoring, "SCORE_GROUP_TOKENS", 6)  # the longest candidate is a group of its own
    monkeypatch.setattr(scoring, "SCORE_LOGIT_BYTES", 2 * 4 * tiny.model.vocab_size)  # two rows a chunk
    eng = fresh(tiny)
    msgs = trajectory(3)
    sched = rolling(len(msgs), 1)  # drops and repositions: every candidate sees a rotated view
    prepared = eng.prepare(msgs, sched, prefix="It ships from", candidates=CANDIDATES)
    lens = [len(c) for c in prepared.continuations]
    assert max(lens) > 6 and len(scoring._groups_of(lens)) >= 3
    cold = eng.score(msgs, CANDIDATES, sched, prefix="It ships from")
    warm = eng.score(msgs, CANDIDATES, sched, prefix="It ships from")  # the history's last state is cached now
    assert cold.usage.prefill_tokens > 0 and warm.usage.prefill_tokens == 0
    # one candidate per call (one group, as existing tests check against the reference) ...
    alone = [eng.score(msgs, [c], sched, prefix="It ships from").logprobs[0] for c in CANDIDATES]
    # ... and the step-by-step reference for a one-token and a two-token candidate
    for i in (0, 1):
        assert abs(alone[i] - reference_score(eng, prepared.items, prepared.continuations[i])) < TOL.logprob_atol
    for got in (cold, warm):
        assert np.allclose(got.logprobs, alone, atol=TOL.logprob_atol), (got.logprobs, alone)
        assert got.n_tokens == lens
    eng.check_integrity()


def test_groups_respect_both_bounds():
    groups = scoring._groups_of([1] * 40 + [300, 2, 2])
    assert [len(g) for g in groups] == [16, 16, 8, 1, 2]
    assert [i for g in groups for i in g] == list(range(43))


PEAK_SCRIPT = textwrap.dedent("""
    import resource
    from engine import Engine
    eng = Engine.from_pretrained("tiny-random")
    msgs = [{"role": "user", "content": "Which warehouse ships order 4821?"}]
    peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB (Linux: KiB)
    eng.score(msgs, [" Falkirk", " Perth"], prefix="It ships from")
    before = peak()
    r = eng.score(msgs, [f" warehouse number {i} in Falkirk, Scotland" for i in range({n})], prefix="It ships from")
    print(sum(r.n_tokens), peak() - before)
""")


def test_scoring_many_candidates_keeps_peak_memory_flat():
    # Before: the logits of every candidate token (1 MiB each at a 262k vocabulary), and their
    # log-softmax, were alive at once: 128 candidates x 6 tokens grew the process by ~1.3 GB.
    out = subprocess.run([sys.executable, "-c", PEAK_SCRIPT.replace("{n}", "96")], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                                           "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    tokens, grew_mib = out.stdout.split()
    assert int(tokens) >= 96 * 6
    assert float(grew_mib) < 64, f"scoring {tokens} candidate tokens grew the peak RSS by {grew_mib} MiB"


def test_render_cache_is_bounded_in_tokens_and_skips_huge_messages(tiny):
    r = Renderer(tiny.tokenizer, "gemma", cache_tokens=400)
    small = [{"role": "user", "content": f"question {i}: which warehouse?"} for i in range(60)]
    for m in small:
        r.render([m])
    assert 0 < r.cached_tokens <= 400  # before: every distinct message was kept (up to 50,000 of any size)
    kept = r.cached_tokens
    huge = {"role": "user", "content": "a hostile one-off message " * 40}  # > 400 / 4 tokens
    first = r.render([huge]).token_ids
    assert r.cached_tokens == kept  # tokenized, not kept, nothing evicted
    assert r.render([huge]).token_ids == first == Renderer(tiny.tokenizer, "gemma").render([huge]).token_ids
