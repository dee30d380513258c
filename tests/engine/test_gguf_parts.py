"""A GGUF split over packages: assembled from the installed pieces, every byte checked, and one
error naming the package to (re)install when a piece is missing or damaged.

The packages are real distributions made here (a ``.dist-info`` with METADATA and RECORD on
``sys.path``), found by ``importlib.metadata`` as pip-installed ones are."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from engine.errors import ModelLoadError
from engine.models import gguf_parts
from engine.models.catalog import MODELS, QWEN_CODER, GGUFPart, ModelSpec, default_template, find_spec

PIECES = [b"GGUF" + bytes(range(256)) * 3, bytes(range(255, -1, -1)) * 2, b"tail-bytes"]


def _install(site: Path, index: int, data: bytes) -> None:
    """A distribution ``akvtest-part<index>`` 0.2.0 holding ``data/part<index>.bin``."""
    dist = site / f"akvtest_part{index}-0.2.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: akvtest-part{index}\nVersion: 0.2.0\n")
    pkg = site / f"akvtest_part{index}" / "data"
    pkg.mkdir(parents=True)
    (pkg / f"part{index}.bin").write_bytes(data)
    (dist / "RECORD").write_text(f"akvtest_part{index}/data/part{index}.bin,,\n{dist.name}/METADATA,,\n")


def _spec(pieces: list[bytes] = PIECES) -> ModelSpec:
    whole = b"".join(pieces)
    return ModelSpec(
        name="akvtest", aliases=(), title="test", gguf_name="akvtest.gguf", install="pip install akvtest-parts",
        template=None, params=0, license="-", gguf_size=len(whole), gguf_sha256=hashlib.sha256(whole).hexdigest(),
        parts=tuple(GGUFPart(f"akvtest-part{i + 1}", "0.2.0", f"part{i + 1}.bin", len(p), hashlib.sha256(p).hexdigest())
                    for i, p in enumerate(pieces)))


@pytest.fixture
def site(tmp_path, monkeypatch):
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    return root


def test_assembles_the_pieces_in_order_and_reports_progress(site, tmp_path):
    for i, piece in enumerate(PIECES):
        _install(site, i + 1, piece)
    seen: list[int] = []
    target = gguf_parts.assemble(_spec(), tmp_path / "out" / "m.gguf", progress=seen.append)
    assert target.read_bytes() == b"".join(PIECES)
    assert sum(seen) == len(b"".join(PIECES))
    assert [p.name for p in target.parent.iterdir()] == ["m.gguf"]  # no temporary file left


def test_a_missing_package_names_what_to_install(site, tmp_path):
    _install(site, 1, PIECES[0])
    _install(site, 3, PIECES[2])
    with pytest.raises(ModelLoadError, match=r"akvtest-part2 is not installed: pip install akvtest-parts"):
        gguf_parts.assemble(_spec(), tmp_path / "m.gguf")
    assert not (tmp_path / "m.gguf").exists()


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_a_damaged_piece_is_named_and_nothing_is_written(site, tmp_path, damage):
    bad = bytearray(PIECES[1])
    if damage == "truncated":
        del bad[-1]
    else:
        bad[7] ^= 0x01  # same size, one bit: only the SHA-256 sees it
    for i, piece in enumerate([PIECES[0], bytes(bad), PIECES[2]]):
        _install(site, i + 1, piece)
    what = r"511 bytes, expected 512" if damage == "truncated" else "SHA-256"
    expected = rf"akvtest-part2 is damaged \({what}.*--force-reinstall akvtest-part2==0.2.0"
    with pytest.raises(ModelLoadError, match=expected):
        gguf_parts.assemble(_spec(), tmp_path / "m.gguf")
    assert list(tmp_path.glob("*.gguf*")) == []


def test_a_package_without_its_file_is_named(site, tmp_path):
    for i, piece in enumerate(PIECES):
        _install(site, i + 1, piece)
    (site / "akvtest_part3" / "data" / "part3.bin").unlink()
    with pytest.raises(ModelLoadError, match=r"akvtest-part3 0.2.0 does not hold part3.bin"):
        gguf_parts.check_installed(_spec())


def test_the_whole_file_is_checked_too(site, tmp_path):
    """Pieces that are each right but whose whole is not what the spec says (a spec error)."""
    for i, piece in enumerate(PIECES):
        _install(site, i + 1, piece)
    spec = _spec()
    wrong = ModelSpec(**{**spec.__dict__, "gguf_sha256": "0" * 64})
    with pytest.raises(ModelLoadError, match=r"the assembled GGUF is .* expected"):
        gguf_parts.assemble(wrong, tmp_path / "m.gguf")
    assert list(tmp_path.glob("*.gguf*")) == []


def test_the_catalog_is_consistent():
    assert QWEN_CODER.gguf_size == 1_117_320_768 and len(QWEN_CODER.parts) == 22
    assert QWEN_CODER.gguf_sha256 is not None and QWEN_CODER.gguf_sha256.startswith("cc324af070c2ecbf")
    assert find_spec("Qwen/Qwen2.5-Coder-1.5B-Instruct") is QWEN_CODER and find_spec("nope") is None
    assert default_template("qwen2.5-coder-1.5b", "plain") == "chatml"
    assert default_template("gemma-3-270m", "plain") == "plain"  # the first model keeps each command's default
    assert default_template("/some/checkpoint", "gemma") == "gemma"
    assert all(m.install for m in MODELS.values())
    with pytest.raises(ValueError, match="do not add up"):
        ModelSpec(**{**_spec().__dict__, "gguf_size": 1})
