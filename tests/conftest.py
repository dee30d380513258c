"""Shared fixtures: engines are loaded once per session and checked for integrity after every test.

``AKV_TEST_DEVICE`` (``cpu`` | ``cuda``) and ``AKV_TEST_DTYPE`` (``float32`` | ``bfloat16``) put the
``tiny`` and ``tiny_gemma`` engines on another device or dtype, so that the exactness tests run
there unchanged (``bench/gpu_check.py`` does this on a GPU machine); :func:`tolerances` gives the
tolerances those tests use. The default is CPU float32, the only setting the CPU machine runs.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from dataclasses import dataclass

import pytest

import engine  # noqa: F401  (settings switch hub access off)

_ENGINES: dict[str, object] = {}
TEST_DEVICE = os.environ.get("AKV_TEST_DEVICE", "cpu")
TEST_DTYPE = os.environ.get("AKV_TEST_DTYPE", "float32")


@dataclass(frozen=True)
class Tolerances:
    """Tolerances of the exactness tests for one dtype.

    Attributes:
        rtol: max |a - b| / max |b| for logits, keys and values (relative to the largest magnitude).
        logprob_atol: absolute tolerance on candidate log-probabilities.
        exact_argmax: whether greedy tokens may be compared across batch shapes (near-ties of a
            random model flip under bf16 rounding, so token identity is only asserted in float32).
    """

    rtol: float
    logprob_atol: float
    exact_argmax: bool


def tolerances(dtype: str = TEST_DTYPE) -> Tolerances:
    """float32: 1e-4 relative (rounding of different summation orders). bfloat16 keeps 8 bits of
    mantissa (unit roundoff 2**-8 = 3.9e-3): measured on CPU, the batched prefill vs the bf16
    reference differs by up to 1.7e-2 relative on the tiny Gemma-3 model's logits (lean forward vs
    transformers in bf16: 1.9e-2; vs the float32 oracle: 2.2e-2), so bf16 allows 5e-2 relative
    on logits, keys and values and 5e-2 absolute on log-probabilities."""
    if dtype == "float32":
        return Tolerances(1e-4, 1e-4, True)
    if dtype in ("bfloat16", "float16"):
        return Tolerances(5e-2, 5e-2, False)
    raise ValueError(f"AKV_TEST_DTYPE must be float32, bfloat16 or float16, got {dtype!r}")


def device_kwargs() -> dict[str, object]:
    """``Engine.from_pretrained`` keyword arguments for the test device and dtype ({} for the default)."""
    if (TEST_DEVICE, TEST_DTYPE) == ("cpu", "float32"):
        return {}
    import torch

    return {"device": TEST_DEVICE, "dtype": getattr(torch, TEST_DTYPE)}


def get_engine(name: str, **kwargs):
    """A shared engine per (name, options); its tree persists across tests, like a server's. Its
    transformers model stays runnable (``keep_source``) as the reference the exactness tests use."""
    from engine import Engine

    key = name + repr(sorted(kwargs.items()))
    if key not in _ENGINES:
        _ENGINES[key] = Engine.from_pretrained(name, keep_source=True, **kwargs)
    return _ENGINES[key]


@pytest.fixture(autouse=True)
def _engines_stay_consistent():
    yield
    for eng in _ENGINES.values():
        eng.check_integrity()  # type: ignore[attr-defined]
        assert all(n.lock == 0 for n in eng.tree.nodes()), "a request left a lock behind"  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def tiny():
    return get_engine("tiny-random", **device_kwargs())


@pytest.fixture(scope="session")
def tiny_gemma():
    return get_engine("tiny-random-gemma3", **device_kwargs())


@pytest.fixture(scope="session")
def tiny_qwen():
    """The Qwen2 shape at toy size: QKV bias, 6 query / 2 KV heads, untied head, rope base 1e6."""
    return get_engine("tiny-random-qwen2", **device_kwargs())


@pytest.fixture(scope="session")
def gemma():
    return get_engine("gemma-3-270m")


@pytest.fixture
def one_thread():
    """Run the test with one torch intra-op thread (restored after). On the shared 2-core machine
    two threads spin against other processes and make small-model work several times slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
