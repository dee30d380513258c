"""Numerical exactness: lean forward vs transformers, reference vs history masks, batched vs reference.

Tolerances (fp32): logits and KV agree within 1e-4 relative to the largest magnitude involved;
under ``AKV_TEST_DTYPE=bfloat16`` within 5e-2 (``tests.conftest.tolerances``). The engines run on
``AKV_TEST_DEVICE`` (default cpu).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import REPOSITION, Drop, replay
from engine.attention import attend
from engine.cache.plan import needed_closure
from engine.oracle.reference import ReferenceExecutor
from engine.prefill import batched_prefill, history_jobs
from engine.rope import rotate_keys
from tests.conftest import tolerances

RTOL = tolerances().rtol


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


def _causal(m, pos):
    """Plain causal attention of one run over itself (the forward may ask for a subset of rows)."""
    return lambda li, q, k, v, rows: attend(q, k, v, pos if rows is None else pos[rows], pos, m.scaling, m.windows[li])


@pytest.mark.parametrize("name", ["tiny", "tiny_gemma", "tiny_qwen"])
def test_lean_forward_matches_transformers(name, request):
    eng = request.getfixturevalue(name)
    m = eng.model
    ids = torch.randint(10, 5000, (48,), generator=torch.Generator().manual_seed(1))
    pos = np.arange(48)
    out = m.forward(ids.numpy(), pos, _causal(m, pos),
                    logit_rows=np.arange(48))
    with torch.no_grad():
        ref = m.hf(ids[None].to(m.device)).logits[0].float()
    assert rel_err(out.logits, ref) <= RTOL


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", ["tiny", "tiny_gemma", "tiny_qwen"])
def test_packed_projections_equal_the_dense_ones(name, dtype, request, monkeypatch):
    """On CPU in float32 and bfloat16 the projections are packed for oneDNN (in bfloat16 the LM
    head too); with ``AKV_PACKED_WEIGHTS=0`` they are the dense ``F.linear`` ones. Both forwards
    agree on every hidden state, K, V and logit within the dtype's rounding (``tolerances``), for a
    many-row input and a one-row one (a decode step)."""
    import copy

    from engine.models.lean import LeanModel

    eng = request.getfixturevalue(name)
    if eng.model.device.type != "cpu" or not torch.backends.mkldnn.is_available():
        pytest.skip("oneDNN packing is for CPU only")
    target = getattr(torch, dtype)
    hf = eng.model.hf if eng.model.dtype == target else copy.deepcopy(eng.model.hf).to(target)
    packed = LeanModel(hf, eng.model.name)
    monkeypatch.setenv("AKV_PACKED_WEIGHTS", "0")
    dense = LeanModel(hf, eng.model.name)
    assert all(w.qkv.packed and w.o.packed and w.gate_up.packed and w.down.packed for w in packed._layers)
    assert not any(w.qkv.packed or w.down.packed for w in dense._layers)
    rtol = tolerances(dtype).rtol
    ids = torch.randint(10, 5000, (40,), generator=torch.Generator().manual_seed(4)).numpy()
    for n in (40, 1):
        pos = np.arange(n)
        a = packed.forward(ids[:n], pos, _causal(packed, pos), logit_rows=np.arange(n))
        b = dense.forward(ids[:n], pos, _causal(dense, pos), logit_rows=np.arange(n))
        for x, y in ((a.hidden, b.hidden), (a.keys, b.keys), (a.values, b.values), (a.logits, b.logits)):
            assert rel_err(x.float(), y.float()) <= rtol
    assert packed._logit_head is not None and packed._logit_head.packed is (dtype == "bfloat16")
    assert dense._logit_head is not None and not dense._logit_head.packed
    # greedy decoding picks from the same head as logits() in bfloat16
    if dtype == "bfloat16":
        h = a.hidden
        assert packed.greedy_batch(h) == torch.argmax(packed.logits(h), dim=-1).tolist()


@pytest.mark.parametrize("raw", ["maybe", "2", "-1"])
def test_packed_weights_flag_refuses_a_value_it_does_not_know(raw, tiny, monkeypatch):
    """A typo in ``AKV_PACKED_WEIGHTS`` is a one-line error naming the variable and the value, not
    a silent choice; "off" and "0" both turn packing off."""
    from engine.models.lean import LeanModel

    monkeypatch.setenv("AKV_PACKED_WEIGHTS", raw)
    with pytest.raises(ValueError, match=rf"AKV_PACKED_WEIGHTS must be 1 or 0 .*got '{raw}'"):
        LeanModel(tiny.model.hf, tiny.model.name)
    for off in ("off", "0"):
        monkeypatch.setenv("AKV_PACKED_WEIGHTS", off)
        assert not LeanModel(tiny.model.hf, tiny.model.name)._layers[0].qkv.packed


@pytest.mark.slow
def test_lean_forward_matches_transformers_on_gemma(gemma):
    m = gemma.model
    ids = torch.randint(10, 50_000, (700,), generator=torch.Generator().manual_seed(2))  # past the 512 window
    pos = np.arange(700)
    out = m.forward(ids.numpy(), pos, _causal(m, pos),
                    logit_rows=[0, 350, 699])
    with torch.no_grad():
        ref = m.hf(ids[None].to(m.device)).logits[0, [0, 350, 699]].float()
    assert rel_err(out.logits, ref) <= RTOL


def test_reference_drop_equals_transformers_history_mask(tiny):
    """Dropping a span and continuing equals one transformers forward with a history mask."""
    m = tiny.model
    gen = torch.Generator().manual_seed(3)
    a, b, c = (torch.randint(10, 5000, (n,), generator=gen).tolist() for n in (20, 15, 25))
    items = [*a, Drop(((5, 12),)), *b, Drop(((22, 30),)), *c]
    ref = ReferenceExecutor(m).run(items)
    n = 60
    allowed = torch.tril(torch.ones(n, n, dtype=torch.bool))
    allowed[20:, 5:12] = False  # tokens after the first drop cannot see 5..11
    allowed[35:, 22:30] = False
    mask = torch.zeros(1, 1, n, n, dtype=m.dtype).masked_fill(~allowed, torch.finfo(m.dtype).min).to(m.device)
    with torch.no_grad():
        logits = m.hf(torch.tensor([a + b + c], device=m.device), attention_mask=mask).logits[0, -1].float()
    assert rel_err(ref.last_logits, logits) <= RTOL


@st.composite
def histories(draw, max_tokens=160):
    """Random event histories: token runs separated by drops of earlier ranges and repositions."""
    items: list = []
    n = 0
    alive: list[int] = []
    runs = draw(st.integers(1, 7))
    for r in range(runs):
        length = draw(st.integers(1, max(1, max_tokens // runs)))
        items.extend(draw(st.lists(st.integers(10, 5000), min_size=length, max_size=length)))
        alive.extend(range(n, n + length))
        n += length
        if r == runs - 1:
            break
        if alive and draw(st.booleans()):
            s = draw(st.integers(0, n - 1))
            e = draw(st.integers(s + 1, min(n, s + 40)))
            items.append(Drop(((s, e),)))
            alive = [t for t in alive if not s <= t < e]
        if draw(st.booleans()):
            items.append(REPOSITION)
    if not alive or not isinstance(items[-1], int):
        items.append(draw(st.integers(10, 5000)))
    return items


def _stored_keys_at_final(keys: torch.Tensor, model, history) -> torch.Tensor:
    """Keys stored at compute positions, rotated to the final positions of the alive tokens."""
    alive = history.alive
    out = keys[:, :, alive].clone()
    delta = history.alive_pos - history.compute_pos[alive]
    for li in range(out.shape[0]):
        out[li] = rotate_keys(out[li], model.rope(li), delta)
    return out


def _no_store(tokens):
    raise AssertionError(f"nothing is stored, yet {tokens} were requested")


@pytest.mark.parametrize("name", ["tiny", "tiny_gemma", "tiny_qwen"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=histories())
def test_batched_prefill_equals_reference(name, request, items):
    m = request.getfixturevalue(name).model
    history = replay(items)
    ref = ReferenceExecutor(m).run(items)
    compute = np.ones(history.n_tokens, dtype=bool)
    pre = batched_prefill(m, history.token_ids, history.compute_pos, history_jobs(history, compute),
                          _no_store, [history.n_tokens - 1])
    assert pre.logits is not None
    assert rel_err(pre.logits[0], ref.last_logits) <= RTOL
    mine = _stored_keys_at_final(pre.keys, m, history)
    assert rel_err(mine, ref.keys[:, :, history.alive]) <= RTOL
    assert rel_err(pre.values, ref.values) <= RTOL


@pytest.mark.parametrize("name", ["tiny", "tiny_gemma", "tiny_qwen"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=histories(), data=st.data())
def test_restore_of_missing_spans_equals_full_compute(name, request, items, data):
    """Recompute a random subset (closed under what it needs) from the rest of the stored KV."""
    m = request.getfixturevalue(name).model
    history = replay(items)
    n = history.n_tokens
    full = batched_prefill(m, history.token_ids, history.compute_pos,
                           history_jobs(history, np.ones(n, dtype=bool)), _no_store, [n - 1])
    avail = np.asarray(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    compute = needed_closure(history, avail)

    def gather(tokens):
        assert avail[tokens].all()
        return full.keys[:, :, tokens], full.values[:, :, tokens]

    part = batched_prefill(m, history.token_ids, history.compute_pos, history_jobs(history, compute), gather, [n - 1])
    idx = part.compute_idx
    assert rel_err(part.keys, full.keys[:, :, idx]) <= RTOL
    assert rel_err(part.values, full.values[:, :, idx]) <= RTOL
    assert rel_err(part.logits[0], full.logits[0]) <= RTOL


@pytest.mark.parametrize("model", ["tiny-random-qwen2", "tiny-random"])
def test_released_source_weights_leave_the_forward_unchanged(model, tiny, tiny_qwen):
    """``keep_source=False`` (every engine but the tests' reference ones) frees the transformers
    copies of the projections the engine packed or fused, and an untied head once it is packed;
    logits are bit-for-bit those of the engine that kept them."""
    from engine import Engine

    kept = (tiny_qwen if model == "tiny-random-qwen2" else tiny).model
    lean = Engine.from_pretrained(model, **_device()).model
    assert lean.hf is None
    ids = torch.randint(10, 5000, (24,), generator=torch.Generator().manual_seed(3))
    pos = np.arange(24)
    out = lean.forward(ids.numpy(), pos, _causal(lean, pos), logit_rows=np.arange(24)).logits
    ref = kept.forward(ids.numpy(), pos, _causal(kept, pos), logit_rows=np.arange(24)).logits
    assert torch.equal(out, ref)
    def source(m):
        return sum(p.numel() for layer in m.layers for p in layer.parameters())

    assert source(lean) < 0.5 * source(kept)


def _device():
    from tests.conftest import device_kwargs

    return device_kwargs()
