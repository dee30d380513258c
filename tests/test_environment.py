"""SGLang stays out of this project's environment: no package imports it, nothing depends on it.

It pins its own CUDA build of torch and cannot share this virtual environment (docs/gpu.md):
SGLang servers are launched as external processes from their own environment.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "search_spaces", "evals", "rsi", "bench")
IMPORT = re.compile(r"^\s*(import\s+sglang\b|from\s+sglang(\.|\s))", re.MULTILINE)


def test_no_package_imports_sglang():
    offenders = [str(p.relative_to(ROOT)) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
                 if IMPORT.search(p.read_text(errors="replace"))]
    assert offenders == [], f"these files import sglang: {offenders}"


def test_the_pattern_would_catch_an_import():
    assert IMPORT.search("import sglang\n") and IMPORT.search("    from sglang.srt import x\n")
    assert not IMPORT.search("# python -m sglang.launch_server\n") and not IMPORT.search("import sglang_like\n")


def test_sglang_is_not_a_dependency():
    text = (ROOT / "pyproject.toml").read_text().lower()
    assert "sglang" not in text
