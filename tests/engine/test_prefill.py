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


@pytest.mark.parametrize("name", ["tiny", "tiny_gemma"])
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


@pytest.mark.parametrize("name", ["tiny", "tiny_gemma"])
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
