"""Benchmarks: scripts that print tables and write JSON under ``bench/results/``, never timed tests.

Run each from the repository root as ``python -m bench.<name>`` (README.md lists them). They sit
above every package (they may import any of them; no package imports them). :func:`write_result`
is how each one writes its JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.files import atomic_write

RESULTS = Path(__file__).resolve().parent / "results"  # wherever the command is run from


def write_result(path: str | Path, data: Any, *, indent: int = 1) -> Path:
    """Write ``data`` as JSON to ``path`` atomically (a crash leaves the previous result whole),
    say where, and return the path."""
    out = Path(path)
    atomic_write(out, (json.dumps(data, indent=indent, default=str) + "\n").encode("utf-8"))
    print(f"wrote {out}")
    return out
