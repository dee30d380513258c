"""Paths of the segment-batched prefill that the random histories of test_exactness reach only by
chance: keys read as views of the key source (no gather) and rotated on the fly; the last layer
computed for the requested rows only; and the FLOP count the benchmarks divide by.

Tolerance: as test_exactness (``tests.conftest.tolerances``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine import REPOSITION, Drop, replay
from engine.attention import attend
from engine.models.flops import DecoderShape, forward_flops
from engine.oracle.reference import ReferenceExecutor
from engine.prefill import batched_prefill, history_jobs
from tests.conftest import tolerances

RTOL = tolerances().rtol


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


def _no_store(tokens):
    raise AssertionError(f"nothing is stored, yet {tokens} were requested")


@pytest.mark.parametrize("name", ["tiny", "tiny_gemma", "tiny_qwen"])
def test_rotated_view_of_stored_keys_leaves_the_store_alone(name, request):
    """Stored keys that a reposition moves are one run of columns (a view, not a gather): the pass
    rotates a copy, the stored KV it hands back is untouched, and the result equals the reference."""
    m = request.getfixturevalue(name).model
    gen = torch.Generator().manual_seed(5)
    a, b, c = (torch.randint(10, 5000, (n,), generator=gen).tolist() for n in (30, 12, 20))
    items = [*a, Drop(((4, 16),)), REPOSITION, *b, Drop(((30, 36),)), *c]
    history = replay(items)
    n = history.n_tokens
    full = batched_prefill(m, history.token_ids, history.compute_pos,
                           history_jobs(history, np.ones(n, dtype=bool)), _no_store, [n - 1])
    compute = np.zeros(n, dtype=bool)
    compute[30:] = True  # the first run is stored, the rest recomputed over it in two jobs
    stored_k, stored_v = full.keys.clone(), full.values.clone()

    def gather(tokens):
        return stored_k[:, :, tokens].clone(), stored_v[:, :, tokens].clone()

    part = batched_prefill(m, history.token_ids, history.compute_pos, history_jobs(history, compute), gather, [n - 1])
    assert len(history_jobs(history, compute)) == 2
    assert torch.equal(part.ext_keys, stored_k[:, :, part.ext_idx])  # never rotated in place
    assert torch.equal(part.ext_values, stored_v[:, :, part.ext_idx])
    ref = ReferenceExecutor(m).run(items)
    assert rel_err(part.logits[0], ref.last_logits) <= RTOL
    assert rel_err(part.logits[0], full.logits[0]) <= RTOL


@pytest.mark.parametrize("name", ["tiny", "tiny_gemma", "tiny_qwen"])
def test_last_layer_runs_for_the_requested_rows_only(name, request):
    """Asking for some rows (in any order) or none changes no K/V and no requested hidden state."""
    m = request.getfixturevalue(name).model
    ids = torch.randint(10, 5000, (40,), generator=torch.Generator().manual_seed(8)).numpy()
    pos = np.arange(40)

    def causal(li, q, k, v, rows):
        return attend(q, k, v, pos if rows is None else pos[rows], pos, m.scaling, m.windows[li])

    every = m.forward(ids, pos, causal, logit_rows=np.arange(40))
    some = m.forward(ids, pos, causal, logit_rows=[31, 3, 39, 3])
    none = m.forward(ids, pos, causal)
    for out in (some, none):
        assert torch.equal(out.keys, every.keys) and torch.equal(out.values, every.values)
    assert none.hidden is None and none.logits is None
    assert rel_err(some.hidden, every.hidden[[31, 3, 39, 3]]) <= RTOL
    assert rel_err(some.logits, every.logits[[31, 3, 39, 3]]) <= RTOL


def test_flop_count_of_gemma_shapes():
    cfg = type("Cfg", (), dict(hidden_size=640, intermediate_size=2048, num_hidden_layers=3, num_attention_heads=4,
                               num_key_value_heads=1, head_dim=256, vocab_size=1000, sliding_window=4,
                               layer_types=["sliding_attention", "sliding_attention", "full_attention"]))()
    shape = DecoderShape.from_config(cfg)
    assert shape.windows == (4, 4, None)
    per_token = 2 * 3 * (640 * 1536 + 1024 * 640 + 3 * 640 * 2048)
    f = forward_flops(shape, 10)
    assert f.projections == 10 * per_token
    assert f.lm_head == 2 * 640 * 1000  # the last position only
    per_key = 4 * 4 * 256
    seen = 2 * sum(min(p + 1, 4) for p in range(10)) + sum(p + 1 for p in range(10))
    assert f.attention == per_key * seen
    step = forward_flops(shape, 1, context=10)  # a decode step after 10 tokens
    assert step.attention == per_key * (2 * 4 + 11)
    with pytest.raises(ValueError):
        forward_flops(shape, 0)


@pytest.mark.parametrize("name", ["tiny", "tiny_gemma", "tiny_qwen"])
def test_restore_with_drops_attends_as_one_job(name, request, monkeypatch):
    """A history rebuilt with drops (one job per segment, no rotation) attends as one merged job
    over all its tokens, the keys a segment does not see masked out: the logits and every K/V equal
    the job-by-job pass and the step-by-step reference. With a reposition the jobs rotate keys, so
    they are not merged (and still equal the reference)."""
    import engine.prefill as prefill

    m = request.getfixturevalue(name).model
    gen = torch.Generator().manual_seed(11)
    runs = [torch.randint(10, 5000, (n,), generator=gen).tolist() for n in (25, 14, 30, 9, 22)]
    items = [*runs[0], Drop(((3, 9),)), *runs[1], Drop(((20, 31),)), *runs[2], Drop(((40, 52), (60, 61))),
             *runs[3], *runs[4]]
    merged: list[bool] = []
    real = prefill._merged_plan

    def spy(*args):
        plan = real(*args)
        merged.append(plan is not None)
        return plan

    monkeypatch.setattr(prefill, "_merged_plan", spy)

    def run(items, merge_keys):
        monkeypatch.setattr(prefill, "MERGE_KEYS", merge_keys)
        h = replay(items)
        return batched_prefill(m, h.token_ids, h.compute_pos, history_jobs(h, np.ones(h.n_tokens, dtype=bool)),
                               _no_store, [h.n_tokens - 1, 5, 40])

    one, apart = run(items, 1.5), run(items, 0.0)
    assert merged == [True, False] and len(history_jobs(replay(items), np.ones(100, dtype=bool))) == 4
    ref = ReferenceExecutor(m).run(items)
    assert rel_err(one.logits[0], ref.last_logits) <= RTOL
    assert rel_err(one.logits, apart.logits) <= RTOL
    assert rel_err(one.keys, apart.keys) <= RTOL and rel_err(one.values, apart.values) <= RTOL
    moved = [*items[:40], REPOSITION, *items[40:]]
    rotated = run(moved, 1.5)
    assert merged[-1] is False
    assert rel_err(rotated.logits[0], ReferenceExecutor(m).run(moved).last_logits) <= RTOL
