"""The one registry helper both tracks use: built-in families by name, plus ``"program"``.

A :class:`Registry` answers :meth:`~Registry.names` and :meth:`~Registry.get` (an unknown name
raises :class:`UnknownPolicyError` listing the valid ones) and :meth:`~Registry.build`, which
routes ``"program"`` (with its required ``source``) to the track's program wrapper and any other
name to the track's family builder. ``search_spaces.cache.registry`` (cache policies) and
``search_spaces.survival.registry`` (survival policies) each hold one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar

from engine.errors import show
from search_spaces.errors import ParameterError, UnknownPolicyError

PROGRAM = "program"


class Named(Protocol):
    @property
    def name(self) -> str: ...


F = TypeVar("F", bound=Named)
P = TypeVar("P")


class Registry(Generic[F]):
    """Families of one track by name.

    Args:
        what: the kind in messages, singular and plural (``("policy", "policies")``).
        field: the error field an unknown name is reported under.
        families: the built-in families (each with a ``name``).
    """

    def __init__(self, what: tuple[str, str], field: str, families: Iterable[F]) -> None:
        self.what, self.field = what, field
        self.families: dict[str, F] = {f.name: f for f in families}

    def names(self) -> tuple[str, ...]:
        """Every name :meth:`build` accepts (the families, then ``"program"``)."""
        return (*self.families, PROGRAM)

    def get(self, name: Any) -> F:
        """The built-in family ``name``.

        Raises:
            UnknownPolicyError: naming ``name`` and listing the valid names.
        """
        try:
            return self.families[name]
        except (KeyError, TypeError):
            one, many = self.what
            hint = ""
            if isinstance(name, str) and ":" in name and name.split(":", 1)[0] in ("seed", "expert"):
                hint = (f" ({name!r} reads as a search candidate's label: evaluate it with akv eval --run RUN_DIR "
                        f"--pick {name}; akv list candidates RUN_DIR lists them)")
            raise UnknownPolicyError(f"unknown {one} {show(name)}; valid {many}: {', '.join(self.names())}{hint}",
                                     field=self.field, value=name) from None

    def build(self, name: Any, params: dict[str, Any], *, program: Callable[[str, dict[str, Any]], P],
              family: Callable[[F, dict[str, Any]], P]) -> P:
        """``program(source, params)`` for ``"program"`` (``source`` popped from ``params``), else
        ``family(self.get(name), params)``.

        Raises:
            ParameterError: ``"program"`` without a ``source`` string.
            UnknownPolicyError: an unknown name.
        """
        if name == PROGRAM:
            source = params.pop("source", None)
            if not isinstance(source, str):
                raise ParameterError("program: the parameter 'source' (program text) is required", field="source")
            return program(source, params)
        return family(self.get(name), params)


def parse_params(items: Iterable[str]) -> dict[str, Any]:
    """Policy parameters from the command line, the one syntax of every ``--params``: ``k=v`` items
    (values read as YAML scalars: ``keep=4``, ``target=tool``, ``supersede=false``), or one JSON
    object as a single item (``'{"ttl_s": 2}'``, as ``akv workload`` took before).

    Raises:
        ParameterError: an item that is not ``k=v``, a value that is not YAML, or JSON that is not an object.
    """
    import json

    import yaml

    items = list(items)
    if len(items) == 1 and items[0].lstrip().startswith("{"):
        try:
            value = json.loads(items[0])
        except json.JSONDecodeError as err:
            raise ParameterError(f"--params: not a JSON object ({err.msg} at column {err.colno})", field="params",
                                 value=items[0]) from None
        if not isinstance(value, dict):
            raise ParameterError(f"--params: not a JSON object: {show(items[0])}", field="params", value=items[0])
        return value
    out = {}
    for kv in items:
        k, sep, v = kv.partition("=")
        if not sep or not k.strip():
            raise ParameterError(f"--params expects key=value, got {kv!r}", field="params", value=kv)
        try:
            out[k.strip()] = yaml.safe_load(v)
        except yaml.YAMLError as err:
            problem = getattr(err, "problem", None) or " ".join(str(err).split())
            raise ParameterError(f"--params {kv!r}: the value is not YAML ({problem})", field="params",
                                 value=kv) from None
    return out
