"""Reading the result files under ``bench/results/`` for the rendered blocks, and the markdown every block shares.

:class:`Results` reads each file once and names a missing file or field (:class:`ResultsError`); a
:class:`Block` is the files one block reads and the function that renders it. The blocks themselves
are in ``bench.result_blocks`` (README.md, docs/results.md) and ``bench.doc_blocks`` (the other docs).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsi.provenance import Provenance, Staleness, is_ancestor, stale


class ResultsError(ValueError):
    """A result file a block reads is missing, not JSON, or lacks a field the block needs."""


class Results:
    """The result files of one folder, read once each; remembers which files the blocks read."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._cache: dict[str, dict[str, Any]] = {}

    def __call__(self, name: str) -> dict[str, Any]:
        if name not in self._cache:
            path = self.folder / name
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                raise ResultsError(f"{path}: missing (a rendered figure reads it; rerun the benchmark that "
                                   "writes it, or remove the figure)") from None
            except (OSError, ValueError) as err:
                raise ResultsError(f"{path}: not a readable JSON result ({err})") from None
            if not isinstance(data, dict):
                raise ResultsError(f"{path}: a result is a JSON object, not {type(data).__name__}")
            self._cache[name] = data
        return self._cache[name]

    def provenance(self, name: str) -> Provenance:
        data = self(name)
        try:
            return Provenance.from_dict(data["provenance"])
        except (KeyError, TypeError, ValueError) as err:
            raise ResultsError(f"{self.folder / name}: no valid provenance ({err})") from None

    def staleness(self, name: str) -> tuple[Staleness, str | None]:
        """Whether ``name`` is stale, and the same-result file that cleared it up to its own commit."""
        prov = self.provenance(name)
        clearing = f"same-result-{name}"
        cleared_at = None
        if (self.folder / clearing).is_file() and self(clearing).get("same") is True:
            at = self.provenance(clearing).since
            if at and (prov.since is None or is_ancestor(prov.since, at)):
                cleared_at = at
        return stale(prov, cleared_at=cleared_at), (clearing if cleared_at else None)

    def stale_files(self) -> list[str]:
        return [n for n in sorted(self._cache) if not n.startswith("same-result-") and self.staleness(n)[0].stale]


@dataclass(frozen=True)
class Block:
    sources: tuple[str, ...]
    render: Callable[[Results], str]


def need(d: Mapping[str, Any], *keys: str) -> Any:
    """``d[k1][k2]...``, or a :class:`ResultsError` naming the path that is missing."""
    value: Any = d
    for k in keys:
        if not isinstance(value, Mapping) or k not in value:
            raise ResultsError(f"a result lacks {'.'.join(keys)}")
        value = value[k]
    return value


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def source(*names: str) -> str:
    return "Source: " + ", ".join(f"`bench/results/{n}`" for n in names) + "."
