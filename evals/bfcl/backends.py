"""BFCL's multi-turn backends, instantiated and called by the project (no ``eval``, no globals).

:class:`Backends` holds one instance of each class a task involves, loaded from the task's
``initial_config`` as BFCL's own helper loads them, and runs a parsed :class:`evals.bfcl.calls.Call`
by looking its name up among the declared functions and calling the bound method with the call's
literal arguments. Each output is the text BFCL's helper (``multi_turn_utils.execute_multi_turn_func_call``)
would give for the same call: a string as it is, a dict as JSON (``str`` when it is not
serializable), anything else by ``str``, and an exception as ``"Error during execution: ..."``.

Backends are plain objects: :meth:`Backends.copy` is an independent copy (``copy.deepcopy``), so a
model's calls run on a copy of the state the gold history left. The instances are what BFCL's
state checker compares (:attr:`Backends.instances`).

Not for: parsing model text (:mod:`evals.bfcl.calls`), or loading tasks (:mod:`evals.bfcl.data`).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from evals.bfcl.calls import Call
from evals.errors import TaskError

ERROR_PREFIX = "Error during execution: "


def _class_modules() -> tuple[Mapping[str, str], Collection[str]]:
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING, STATELESS_CLASSES

    return CLASS_FILE_PATH_MAPPING, STATELESS_CLASSES


def output_text(result: Any) -> str:
    """A method's return value as BFCL's helper writes it into the conversation."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


@dataclass(frozen=True)
class Executed:
    """One call run on the backends: the rebuilt call, its output text, and whether it raised."""

    call: str
    output: str
    raised: bool


class Backends:
    """The instances of one task's involved classes (see the module docstring).

    Args:
        involved_classes: BFCL class names (``GorillaFileSystem``, ``MathAPI``, ...), in the task's order.
        initial_config: class name -> its scenario (deep-copied before loading).
        long_context: load the long-context extensions (BFCL's ``long_context`` category).
        declared: the function names the model was offered; a call of another name is refused
            (``None``: every public method).

    Raises:
        TaskError: an unknown class name.
    """

    def __init__(self, involved_classes: Iterable[str], initial_config: Mapping[str, Any], *, long_context: bool,
                 declared: Collection[str] | None = None):
        modules, stateless = _class_modules()
        self.instances: dict[str, Any] = {}
        self._methods: dict[str, Any] = {}
        for name in involved_classes:
            if name not in modules:
                raise TaskError(f"unknown BFCL backend class {name!r}; known: {', '.join(modules)}",
                                field="involved_classes", value=name)
            instance = getattr(importlib.import_module(modules[name]), name)()
            if name not in stateless:
                scenario = copy.deepcopy(dict(initial_config.get(name, {})))
                instance._load_scenario(scenario, long_context=long_context)  # noqa: SLF001 -- BFCL's loader, as its helper calls it
            self.instances[name] = instance
            for method_name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not method_name.startswith("_"):  # a later class wins a shared name, as in BFCL's helper
                    self._methods[method_name] = method
        self._declared = frozenset(self._methods if declared is None else declared)

    def copy(self) -> Backends:
        """An independent copy of every instance's state."""
        return copy.deepcopy(self)

    def method(self, name: str) -> Any:
        """The bound method a declared function name runs (raises ``KeyError`` for any other name)."""
        if name not in self._declared:
            raise KeyError(name)
        return self._methods[name]

    def named_arguments(self, call: Call) -> dict[str, Any] | None:
        """``call``'s arguments by name, positional ones named by its method's signature; ``None``
        when the call does not fit the method (or names no declared function)."""
        try:
            return dict(inspect.signature(self.method(call.name)).bind(*call.args, **call.kwargs).arguments)
        except (TypeError, KeyError):
            return None

    def execute(self, call: Call) -> Executed:
        """Run ``call`` (a declared name with literal arguments) on these instances. A name that is not
        declared, or that no involved class has, is an execution error as BFCL reports one."""
        try:
            method = self.method(call.name)
        except KeyError:
            return Executed(call.source, f"{ERROR_PREFIX}name '{call.name}' is not defined", True)
        try:
            result = method(*call.args, **dict(call.kwargs))
        except Exception as err:  # noqa: BLE001 -- a backend's failure is its output, as in BFCL's helper
            return Executed(call.source, f"{ERROR_PREFIX}{err}", True)
        return Executed(call.source, output_text(result), False)

    def run(self, calls: Iterable[Call]) -> list[Executed]:
        """Every call in order (each sees the state the ones before it left)."""
        return [self.execute(c) for c in calls]
