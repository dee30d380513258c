"""Policy parameters: frozen dataclasses resolved from keyword arguments, with errors that name
the parameter.

Each family declares its parameters as a frozen dataclass of ``int``/``float``/``str``/``bool``
fields with defaults, and checks ranges in ``__post_init__`` with :func:`check_range` and
:func:`check_choice`. :func:`resolve` turns user keywords into that dataclass. Optuna spaces live
with each family, not here.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from engine.errors import show
from search_spaces.errors import ParameterError

T = TypeVar("T")


def unknown_parameter(owner: str, name: str, valid: Sequence[str], value: Any) -> ParameterError:
    """The error for a parameter ``owner`` does not take, listing the ones it does (or saying it takes none)."""
    takes = f"valid parameters: {', '.join(valid)}" if valid else f"{owner} takes no parameters"
    return ParameterError(f"{owner}: unknown parameter {name!r}; {takes}", field=name, value=value)


def resolve(cls: type[T], given: Mapping[str, Any], family: str) -> T:
    """Build ``cls`` from ``given``, checking names and types.

    Raises:
        ParameterError: an unknown name (the message lists the valid ones), a value of the wrong
            type, or a value the dataclass's ``__post_init__`` refuses.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for name, value in given.items():
        if name not in fields:
            raise unknown_parameter(family, name, list(fields), value)
        values[name] = _coerce(family, name, str(fields[name].type), value)
    return cls(**values)


def _coerce(family: str, name: str, kind: str, value: Any) -> Any:
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "str": isinstance(value, str),
        "bool": isinstance(value, bool),
    }.get(kind, True)
    if not ok:
        raise ParameterError(f"{family}: parameter {name!r} must be {kind}, got {show(value)}", field=name, value=value)
    return float(value) if kind == "float" else value


def check_range(family: str, name: str, value: float, low: float, high: float) -> None:
    """Raise :class:`ParameterError` unless ``low <= value <= high``."""
    if not low <= value <= high:
        raise ParameterError(f"{family}: parameter {name!r} must be in [{low}, {high}], got {show(value)}",
                             field=name, value=value)


def check_choice(family: str, name: str, value: Any, choices: Sequence[Any]) -> None:
    """Raise :class:`ParameterError` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ParameterError(f"{family}: parameter {name!r} must be one of {', '.join(map(str, choices))}, "
                             f"got {show(value)}", field=name, value=value)


def as_dict(params: Any) -> dict[str, Any]:
    """The resolved parameters as a plain dict (what ``Policy.params`` returns)."""
    return dataclasses.asdict(params)


def job_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A program's parameters as the sandbox receives them: a JSON round trip (a copy of plain values).

    Raises:
        ParameterError: a value that is not JSON.
    """
    try:
        return json.loads(json.dumps(dict(params)))
    except (TypeError, ValueError) as err:
        raise ParameterError(f"program parameters must be JSON values: {err}", field="params") from err
