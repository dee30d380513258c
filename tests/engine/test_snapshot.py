"""Session save/load: identical logits after loading; corrupt or foreign files change nothing."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file, save_file

from engine import Engine, SnapshotError
from tests.engine.agent import trajectory
from tests.engine.test_engine import CANDIDATES, fresh, rolling


def _fingerprint(eng: Engine):
    return sorted((n.token_start, n.n_tokens, n.state.name) for n in eng.tree.nodes()), eng.tree.pool_used


def test_round_trip_gives_identical_logits(tiny, tmp_path):
    msgs = trajectory(5)
    sched = rolling(len(msgs), 2)
    a = fresh(tiny)
    info = a.save_session(msgs, sched, tmp_path / "s.safetensors")
    assert info.tokens == len(a.render(msgs).token_ids) and info.kv_tokens > 0
    want = a.score(msgs, CANDIDATES, sched)
    b = fresh(tiny)
    b.load_session(tmp_path / "s.safetensors")
    b.check_integrity()
    got = b.score(msgs, CANDIDATES, sched)
    assert got.logprobs == want.logprobs  # the same KV bytes and hidden state: bitwise equal
    assert got.usage.prefill_tokens == 0 and got.usage.cached_tokens == want.usage.cached_tokens
    # Loading twice is harmless.
    b.load_session(tmp_path / "s.safetensors")
    b.check_integrity()


def _rewrite(src, dst, meta_change=None, tensor_change=None):
    from safetensors import safe_open

    with safe_open(str(src), framework="pt") as fh:
        meta = json.loads(fh.metadata()["akv"])
    tensors = load_file(str(src))
    if meta_change:
        meta_change(meta)
    if tensor_change:
        tensor_change(tensors)
    save_file(tensors, str(dst), metadata={"akv": json.dumps(meta)})


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("model", "model"),
        ("tokenizer", "tokenizer"),
        ("geometry", "geometry"),
        ("checksum", "checksum"),
        ("truncated", "path"),
        ("garbage", "path"),
        ("missing", "path"),
        ("ranges", "kv_ranges"),
    ],
)
def test_bad_files_are_refused_and_change_nothing(tiny, tmp_path, kind, field):
    msgs = trajectory(3)
    good = tmp_path / "good.safetensors"
    fresh(tiny).save_session(msgs, None, good)
    bad = tmp_path / "bad.safetensors"
    if kind == "model":
        _rewrite(good, bad, meta_change=lambda m: m.update(model="other-model"))
    elif kind == "tokenizer":
        _rewrite(good, bad, meta_change=lambda m: m.update(tokenizer="0" * 64))
    elif kind == "geometry":
        _rewrite(good, bad, meta_change=lambda m: m.update(geometry=[1, 1, 1, 4]))
    elif kind == "checksum":
        def flip(t):
            t["values"][0, 0, 0, 0] += 1.0
        _rewrite(good, bad, tensor_change=flip)
    elif kind == "truncated":
        bad.write_bytes(good.read_bytes()[:-100])
    elif kind == "garbage":
        bad.write_bytes(b"\x00not a safetensors file" * 10)
    elif kind == "ranges":
        _rewrite(good, bad, meta_change=lambda m: m.update(kv_ranges=[[0, 10**6]]))
    eng = fresh(tiny)
    eng.chat(trajectory(2), max_tokens=2)
    before = _fingerprint(eng)
    with pytest.raises(SnapshotError) as err:
        eng.load_session(bad)
    assert err.value.field == field
    assert _fingerprint(eng) == before
    eng.check_integrity()
