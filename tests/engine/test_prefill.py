"""Paths of the segment-batched prefill that the random histories of test_exactness reach only by
chance: keys read as views of the key source (no gather) and rotated on the fly.

Tolerance: as test_exactness (``tests.conftest.tolerances``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine import REPOSITION, Drop, replay
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
