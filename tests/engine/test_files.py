"""``engine.files``: a replaced file or directory is the old one or the new one, never torn."""

from __future__ import annotations

import pytest

from engine.files import atomic_dir, atomic_write


def test_atomic_dir_replaces_only_when_the_body_completes(tmp_path):
    dest = tmp_path / "suite"
    with atomic_dir(dest) as tmp:
        (tmp / "a.txt").write_text("one")
    assert (dest / "a.txt").read_text() == "one"

    with pytest.raises(RuntimeError), atomic_dir(dest) as tmp:
        (tmp / "a.txt").write_text("half")
        raise RuntimeError("crash mid-build")
    assert (dest / "a.txt").read_text() == "one"  # the old directory, untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite"]  # no temporary left behind

    with atomic_dir(dest) as tmp:
        (tmp / "b.txt").write_text("two")
    assert sorted(p.name for p in dest.iterdir()) == ["b.txt"]  # replaced whole, not merged


def test_atomic_write_leaves_no_temporary_and_replaces(tmp_path):
    p = tmp_path / "deep" / "x.json"
    atomic_write(p, b"1")
    atomic_write(p, b"2")
    assert p.read_bytes() == b"2" and sorted(q.name for q in p.parent.iterdir()) == ["x.json"]
