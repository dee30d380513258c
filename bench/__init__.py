"""Benchmarks: scripts that print tables and write JSON under ``bench/results/``, never timed tests.

Run each from the repository root as ``python -m bench.<name>`` (README.md lists them). They sit
above every package (they may import any of them; no package imports them). :func:`write_result`
is how each one writes its JSON, with the result's provenance (``rsi.provenance``): the command, the
commit, the model, the machine's load at start, the date and the modules the result measures.
``python -m bench.render_results`` renders the documented figures from these files.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.files import atomic_write
from rsi.provenance import Provenance, capture

RESULTS = Path(__file__).resolve().parent / "results"  # wherever the command is run from


def write_result(path: str | Path, data: Any, *, measures: Sequence[str], model: str | None = None,
                 dtype: str | None = None, judge: str | None = None, configs: Sequence[str | Path] = (),
                 provenance: Provenance | None = None, indent: int = 1) -> Path:
    """Write ``data`` as JSON to ``path`` atomically (a crash leaves the previous result whole), with its
    provenance under the key ``provenance``, say where, and return the path.

    Args:
        measures: the repository paths whose change makes this result stale (the running benchmark's own
            file is added); ``model``, ``dtype`` and ``judge`` default to ``data``'s keys of those names.
        provenance: given whole instead (a result about a run that recorded its own).

    Raises:
        ValueError: ``data`` is not a JSON object, or ``measures`` is empty.
    """
    if not isinstance(data, dict):
        raise ValueError(f"a result is a JSON object, not {type(data).__name__}")
    if provenance is None:
        script = _running_script()
        provenance = capture(measures=[*measures, *([script] if script else [])],
                             model=model or _str(data.get("model")), dtype=dtype or _str(data.get("dtype")),
                             judge=judge or _str(data.get("judge")), configs=configs)
    out = Path(path)
    payload = {**data, "provenance": provenance.as_dict()}
    atomic_write(out, (json.dumps(payload, indent=indent, default=str) + "\n").encode("utf-8"))
    print(f"wrote {out}")
    return out


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _running_script() -> str | None:
    """``bench/<name>.py`` when a benchmark runs as ``python -m bench.<name>``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", "") or ""
    return f"bench/{name.split('.', 1)[1]}.py" if name.startswith("bench.") else None
