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


# ---------------------------------------------------------------------- hostile files (issue 12)

def _forge(src, dst, edit):
    """What someone with write access to the snapshot dir can do: edit the metadata and recompute
    the SHA-256 checksum (it is not a secret), keeping the tensors."""
    from engine.snapshot import _checksum

    def change(meta):
        edit(meta)
        meta["checksum"] = _checksum(load_file(str(src)))

    _rewrite(src, dst, meta_change=change)


@pytest.mark.parametrize("token", [-1, 10**9, 2**64], ids=["negative", "beyond-vocab", "beyond-int64"])
def test_token_ids_outside_the_vocabulary_are_refused(tiny, tmp_path, token):
    # Before: negative and beyond-vocabulary ids were accepted into the tree, and one beyond int64
    # escaped as an OverflowError (a 500 from the server); all are now a SnapshotError that
    # changes nothing.
    good, bad = tmp_path / "good.safetensors", tmp_path / "bad.safetensors"
    fresh(tiny).save_session(trajectory(3), None, good)

    def edit(meta):
        meta["items"][3] = token

    _forge(good, bad, edit)
    eng = fresh(tiny)
    before = _fingerprint(eng)
    with pytest.raises(SnapshotError) as err:
        eng.load_session(bad)
    assert err.value.field == "items" and err.value.value == token
    assert _fingerprint(eng) == before


def test_negative_drop_range_is_refused(tiny, tmp_path):
    good, bad = tmp_path / "good.safetensors", tmp_path / "bad.safetensors"
    fresh(tiny).save_session(trajectory(3), {"drop_message": {"5": [3]}}, good)

    def edit(meta):
        at = next(i for i, it in enumerate(meta["items"]) if isinstance(it, dict) and "drop" in it)
        meta["items"][at] = {"drop": [[-1, 2]]}

    _forge(good, bad, edit)
    with pytest.raises(SnapshotError) as err:
        fresh(tiny).load_session(bad)
    assert err.value.field == "items"


def test_secret_refuses_an_edit_with_a_recomputed_checksum(tiny, tmp_path):
    # The checksum alone catches accidents only: an edited file with a recomputed checksum loads
    # without a secret (the library's local use) and is refused with one (the server's use).
    secret = b"s" * 32
    msgs = trajectory(3)
    good, bad = tmp_path / "good.safetensors", tmp_path / "bad.safetensors"
    fresh(tiny).save_session(msgs, None, good, secret=secret)

    def edit(meta):
        meta["items"][3] = (meta["items"][3] + 1) % 100  # a different prompt under the same KV: poison

    _forge(good, bad, edit)
    fresh(tiny).load_session(bad)  # no secret: only the checksum, which the forger recomputed
    eng = fresh(tiny)
    before = _fingerprint(eng)
    with pytest.raises(SnapshotError) as err:
        eng.load_session(bad, secret=secret)
    assert err.value.field == "mac" and "not authentic" in str(err.value)
    assert _fingerprint(eng) == before
    with pytest.raises(SnapshotError):
        eng.load_session(good, secret=b"another server's secret")
    with pytest.raises(SnapshotError):  # a file saved without a MAC is not accepted by a secret holder
        plain = tmp_path / "plain.safetensors"
        fresh(tiny).save_session(msgs, None, plain)
        eng.load_session(plain, secret=secret)
    eng.load_session(good, secret=secret)  # the authentic file loads
    eng.check_integrity()


def test_salted_load_lands_in_its_namespace_only(tiny, tmp_path):
    msgs = trajectory(3)
    path = tmp_path / "s.safetensors"
    fresh(tiny).save_session(msgs, None, path, salt="alice")
    eng = fresh(tiny)
    eng.load_session(path, salt="bob")
    assert eng.chat(msgs, max_tokens=1, salt="alice").usage.cached_tokens == 0
    assert eng.chat(msgs, max_tokens=1, salt="bob").usage.prefill_tokens <= 1
    eng.check_integrity()


def test_symlinks_are_never_followed(tiny, tmp_path):
    msgs = trajectory(2)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "s.safetensors"
    link.symlink_to(victim)
    # Save: the link itself is replaced by the snapshot; the file it pointed to is untouched.
    fresh(tiny).save_session(msgs, None, link)
    assert victim.read_text() == "keep me" and not link.is_symlink()
    # Load: a link planted at the name is refused, even when it points to a valid snapshot.
    real = tmp_path / "real.safetensors"
    link.rename(real)
    link.symlink_to(real)
    with pytest.raises(SnapshotError) as err:
        fresh(tiny).load_session(link)
    assert "symbolic link" in str(err.value)
    fifo = tmp_path / "fifo.safetensors"
    import os

    os.mkfifo(fifo)
    with pytest.raises(SnapshotError, match="not a regular file"):
        fresh(tiny).load_session(fifo)
