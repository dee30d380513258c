"""The engine on every available device and dtype, against the CPU float32 oracle.

Settings: CPU float32 and CPU bfloat16 always; CUDA float32 and bfloat16 when a GPU is present
(none is on the development machine: those cases are written for ``bench/gpu_check.py`` and were
not run there). Tolerances come from ``tests.conftest.tolerances`` (bf16: 5e-2). CPU bf16 is
slow (about 5x float32 on AVX2 without native bf16), so its cases are kept small.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine import REPOSITION, Drop, Engine, replay
from engine.cache.kvstore import TensorKV
from engine.cache.radix import KVState
from engine.oracle.reference import ReferenceExecutor
from engine.prefill import batched_prefill, history_jobs
from tests.conftest import get_engine, tolerances
from tests.engine.agent import trajectory
from tests.engine.test_engine import fresh, rolling

pytestmark = pytest.mark.usefixtures("one_thread")  # see tests/conftest.py

SETTINGS = [("cpu", "float32"), ("cpu", "bfloat16")]
if torch.cuda.is_available():
    SETTINGS += [("cuda", "float32"), ("cuda", "bfloat16")]
IDS = [f"{d}-{t}" for d, t in SETTINGS]
CANDIDATES = [" A", " B", " red"]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float().cpu(), b.float().cpu()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


@pytest.fixture(params=SETTINGS, ids=IDS)
def setting(request):
    device, dtype = request.param
    return device, dtype, tolerances(dtype)


def engine_on(name: str, device: str, dtype: str) -> Engine:
    if (device, dtype) == ("cpu", "float32"):
        return get_engine(name)
    return get_engine(name, device=device, dtype=getattr(torch, dtype))


def _history():
    gen = torch.Generator().manual_seed(5)
    a, b, c = (torch.randint(10, 5000, (n,), generator=gen).tolist() for n in (24, 18, 20))
    return [*a, Drop(((4, 12),)), *b, REPOSITION, *c, Drop(((30, 36),)), *a[:6]]


@pytest.mark.parametrize("name", ["tiny-random", "tiny-random-gemma3"])
def test_batched_prefill_on_device_matches_the_float32_oracle(setting, name):
    device, dtype, tol = setting
    eng, oracle = engine_on(name, device, dtype), get_engine(name)
    assert eng.model.device.type == device and str(eng.model.dtype) == f"torch.{dtype}"
    items = _history()
    h = replay(items)
    pre = batched_prefill(eng.model, h.token_ids, h.compute_pos, history_jobs(h, np.ones(h.n_tokens, dtype=bool)),
                          lambda t: (_ for _ in ()).throw(AssertionError(t)), [h.n_tokens - 1])
    ref = ReferenceExecutor(oracle.model).run(items)
    assert pre.logits is not None and pre.logits.device.type == device
    assert rel_err(pre.logits[0], ref.last_logits) <= tol.rtol
    assert rel_err(pre.values, ref.values) <= tol.rtol
    same = ReferenceExecutor(eng.model).run(items)  # the reference in the same dtype, on the same device
    assert rel_err(pre.logits[0], same.last_logits) <= tol.rtol


def test_engine_session_on_device_matches_the_oracle_and_accounts_exactly(setting):
    device, dtype, tol = setting
    eng, oracle = fresh(engine_on("tiny-random", device, dtype)), fresh(get_engine("tiny-random"))
    msgs = trajectory(3, words=4)
    for turn in (8,):
        sched = rolling(turn, 1)
        a, b = eng.score(msgs[:turn], CANDIDATES, sched), oracle.score(msgs[:turn], CANDIDATES, sched)
        assert np.allclose(a.logprobs, b.logprobs, atol=tol.logprob_atol), (a.logprobs, b.logprobs)
        assert a.usage == b.usage  # accounting does not depend on the device or dtype
        c1 = eng.chat(msgs[:turn], sched, max_tokens=4, stop=[])
        c2 = eng.chat(msgs[:turn], sched, max_tokens=4, stop=[])
        assert c1.token_ids == c2.token_ids and len(c1.token_ids) == 4  # greedy is deterministic
        if tol.exact_argmax:
            assert c1.token_ids == oracle.chat(msgs[:turn], sched, max_tokens=4, stop=[]).token_ids
    eng.check_integrity()


def test_host_tier_swaps_out_and_back_and_stays_exact(setting):
    """A pool too small for the session: KV moves to the host tier (CPU memory) and back."""
    device, dtype, tol = setting
    if device == "cpu":
        pytest.skip("on CPU the host tier is the same memory (to_host is a no-op): test_engine's small-pool "
                    "test covers it; this one checks where swapped KV lives on a GPU")
    base = engine_on("tiny-random", device, dtype)
    bpt = base.geometry.bytes_per_token
    small, big = fresh(base, pool_bytes=300 * bpt, host_bytes=2000 * bpt), fresh(base)
    msgs = trajectory(8, words=3)
    for turn in (10, 14):
        for keep in (1, 3):
            sched = rolling(turn, keep)
            a, b = small.score(msgs[:turn], CANDIDATES, sched), big.score(msgs[:turn], CANDIDATES, sched)
            assert np.allclose(a.logprobs, b.logprobs, atol=tol.logprob_atol)
            small.check_integrity()
    assert small.tree.stats.swap_outs > 0
    hosted = [n.payload for n in small.tree.nodes() if n.state is KVState.HOST]
    for p in hosted:
        assert isinstance(p, TensorKV) and p.keys.device.type == "cpu"
    resident = [n.payload for n in small.tree.nodes() if n.state is KVState.RESIDENT and n.payload is not None]
    assert resident and all(isinstance(p, TensorKV) and p.keys.device.type == device for p in resident)


def test_greedy_head_picks_the_argmax_of_the_logits(setting):
    device, dtype, _ = setting
    m = engine_on("tiny-random", device, dtype).model
    hidden = torch.randn(5, m.config.hidden_size, generator=torch.Generator().manual_seed(0)).to(m.device, m.dtype)
    assert m.greedy_batch(hidden) == torch.argmax(m.logits(hidden), dim=-1).tolist()
