"""Rate tables: USD per million input, cached-input and output tokens, by named price point.

The packaged table is ``evals/data/rates.yaml`` (the reference study's models plus ``custom``);
any YAML file of the same shape can be passed instead. Each entry records its source, the date it
refers to and whether it was confirmed. This module only loads prices; :mod:`evals.cache.cost` applies them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evals.errors import CostError

RATES_FILE = Path(__file__).resolve().parent / "data" / "rates.yaml"
_KEYS = ("input", "cached_input", "output")


@dataclass(frozen=True)
class Rates:
    """Prices in USD per million tokens.

    Attributes:
        name: the price point's name.
        input: newly prefilled input tokens.
        cached_input: input tokens read from cache (and repositioned tokens, see :mod:`evals.cache.cost`).
        output: generated tokens.
        model, source, as_of, confirmed, note: where the numbers come from.
    """

    name: str
    input: float
    cached_input: float
    output: float
    model: str = ""
    source: str = ""
    as_of: str = ""
    confirmed: bool = False
    note: str = ""

    def __post_init__(self) -> None:
        for key in _KEYS:
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise CostError(f"rate {self.name}.{key} must be a non-negative number, got {value!r}",
                                field=f"rates.{key}", value=value)


def _table(path: str | Path | None) -> tuple[dict[str, Any], str]:
    file = Path(path).expanduser() if path is not None else RATES_FILE
    if not file.is_file():
        raise CostError(f"rate table {str(file)!r} does not exist", field="rates", value=str(file))
    table = yaml.safe_load(file.read_text(encoding="utf-8"))
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise CostError(f"{file}: expected a mapping of name -> {{input, cached_input, output, ...}}",
                        field="rates", value=str(file))
    return table, str(file)


def available_rates(path: str | Path | None = None) -> tuple[str, ...]:
    """The price point names in the packaged table (or in ``path``)."""
    return tuple(_table(path)[0])


def load_rates(name: str, path: str | Path | None = None) -> Rates:
    """The price point ``name`` from the packaged table (or from the YAML file ``path``).

    Raises:
        CostError: unknown name (the message lists the valid ones), or a malformed entry.
    """
    table, source = _table(path)
    if name not in table:
        raise CostError(f"unknown rates {name!r}; valid: {', '.join(table)} (in {source})", field="rates", value=name)
    entry = table[name]
    missing = [k for k in _KEYS if k not in entry]
    if missing:
        raise CostError(f"{source}: rates {name!r} lacks {missing}", field="rates", value=name)
    extra = {k: entry[k] for k in ("model", "source", "as_of", "note") if k in entry}
    return Rates(name, entry["input"], entry["cached_input"], entry["output"],
                 confirmed=bool(entry.get("confirmed", False)), **{k: str(v) for k, v in extra.items()})
