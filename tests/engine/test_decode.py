"""Decode steps equal the step-by-step reference: after drops and a reposition, past the sliding
window, every generated token's next-token logits are the reference's over the history plus the
tokens generated so far.

Tolerance: as test_exactness (``tests.conftest.tolerances``).
"""

from __future__ import annotations

import pytest
import torch

from engine import Engine
from engine.oracle.reference import ReferenceExecutor
from tests.conftest import tolerances
from tests.engine.agent import trajectory

RTOL = tolerances().rtol


@pytest.mark.parametrize("name", ["tiny", "tiny_gemma", "tiny_qwen"])
def test_decode_steps_equal_the_reference(name, request):
    base = request.getfixturevalue(name)
    eng = Engine(base.model, base.tokenizer, base.renderer.template.name, name=base.name)
    msgs = trajectory(6)
    schedule = {"drop_message": {"7": [3, 5]}, "reposition": [7]}
    items = eng.layout(msgs, schedule).items
    assert len([t for t in items if isinstance(t, int)]) > 16  # beyond tiny-random-gemma3's window
    g = eng.start(msgs, schedule, max_tokens=6, stop=[], ignore_eos=True)
    ref = ReferenceExecutor(eng.model)
    try:
        while not g.done:
            logits = eng.model.logits(g.hidden[None])[0]
            expected = ref.run([*items, *g.tokens]).last_logits
            assert float((logits - expected).abs().max() / expected.abs().max()) <= RTOL, len(g.tokens)
            eng.step([g])
    finally:
        eng.finish(g)
    assert len(g.tokens) == 6
    eng.check_integrity()
    assert torch.isfinite(logits).all()
