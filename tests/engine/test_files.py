"""``engine.files``: a replaced file or directory is the old one or the new one, never torn."""

from __future__ import annotations

import pytest

from engine.errors import AKVError
from engine.files import atomic_dir, atomic_write, read_text


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


class _MyError(AKVError):
    pass


def test_read_text_names_the_file_whatever_is_wrong(tmp_path):
    good = tmp_path / "ok.txt"
    good.write_text("héllo\nwörld\n", encoding="utf-8")
    assert read_text(good, "trace") == "héllo\nwörld\n"
    (tmp_path / "bin.txt").write_bytes(b"line one\nline two\n\xb2\xff rest")  # bad bytes on line 3
    cases = [(tmp_path / "none.txt", "trace '.*none.txt' does not exist"),
             (tmp_path, "trace '.*' is a directory, not a file"),
             (tmp_path / "bin.txt", r"trace '.*bin.txt': line 3: not UTF-8 text \(invalid start byte\)")]
    for path, message in cases:
        with pytest.raises(_MyError, match=message) as err:
            read_text(path, "trace", _MyError)
        assert err.value.field == "trace" and err.value.value == str(path)
    with pytest.raises(AKVError, match="config file"):  # the default error class
        read_text(tmp_path / "none.yaml", "config file")


def test_atomic_write_refuses_a_directory_and_leaves_nothing_behind(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(AKVError, match=r"'.*out' is a directory, not a file"):
        atomic_write(tmp_path / "out", b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and not any((tmp_path / "out").iterdir())
