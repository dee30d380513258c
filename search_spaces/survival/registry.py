"""The survival-policy registry: every built-in family by name, its seed, and policy specs.

``get_survival_policy(name, **params)`` is the one way to build a survival policy by name;
``"program"`` wraps program source. :func:`make_survival_policy` accepts what a CLI, a config or
the search loop holds: a name, ``{"name": ..., "params": {...}}`` or ``{"source": ..., "params":
{...}}``. Unknown names raise :class:`UnknownPolicyError` listing the valid ones; unknown
parameters raise :class:`ParameterError` naming the parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.errors import show
from engine.survival import SurvivalPolicy
from search_spaces.errors import ParameterError
from search_spaces.lookup import PROGRAM, Registry
from search_spaces.params import resolve
from search_spaces.sandbox import SandboxLimits
from search_spaces.survival import autellix, continuum, infercept, intent, lru, unison, weighted
from search_spaces.survival.builtin import BuiltinSurvival
from search_spaces.survival.common import SurvivalFamily
from search_spaces.survival.program import SurvivalProgram

SURVIVAL_FAMILIES: dict[str, SurvivalFamily] = {f.name: f for f in (
    lru.FAMILY, continuum.FAMILY, infercept.FAMILY, autellix.FAMILY, unison.FAMILY, intent.FAMILY, weighted.FAMILY,
)}

REGISTRY: Registry[SurvivalFamily] = Registry(("survival policy", "survival policies"), "survival",
                                                SURVIVAL_FAMILIES.values())


def survival_policy_names() -> tuple[str, ...]:
    """Every name :func:`get_survival_policy` accepts."""
    return REGISTRY.names()


def get_survival_family(name: str) -> SurvivalFamily:
    """The built-in family ``name``.

    Raises:
        UnknownPolicyError: listing the valid names.
    """
    return REGISTRY.get(name)


def get_survival_policy(name: str, *, limits: SandboxLimits | None = None, **params: Any) -> SurvivalPolicy:
    """Build survival policy ``name`` with ``params`` (``"program"`` takes ``source=``).

    Raises:
        UnknownPolicyError: an unknown name (the message lists the valid names).
        ParameterError: an unknown parameter (named) or a value out of range.
        ProgramFailure: a program the static check refuses.
    """
    def program(source: str, values: dict[str, Any]) -> SurvivalPolicy:
        return SurvivalProgram(source, values, limits=limits)

    def family(f: SurvivalFamily, values: dict[str, Any]) -> SurvivalPolicy:
        return BuiltinSurvival(f, resolve(f.params, values, name))

    return REGISTRY.build(name, params, program=program, family=family)


def make_survival_policy(spec: Any, limits: SandboxLimits | None = None) -> SurvivalPolicy:
    """A policy from a spec: ``"ttl"``, ``{"name": "ttl", "params": {...}}`` or ``{"source": src, "params": {...}}``.

    Raises:
        UnknownPolicyError, ParameterError, ProgramFailure: as :func:`get_survival_policy`.
    """
    if isinstance(spec, str):
        return get_survival_policy(spec, limits=limits)
    if not isinstance(spec, Mapping):
        raise ParameterError(f"a survival policy spec is a name or an object, got {show(spec)}", field="survival",
                             value=spec)
    extra = set(spec) - {"name", "params", "source"}
    if extra:
        raise ParameterError(f"survival policy spec: unknown field {sorted(extra)[0]!r}; valid fields: name, params, "
                             "source", field="survival", value=sorted(extra)[0])
    params = spec.get("params") or {}
    if not isinstance(params, Mapping):
        raise ParameterError(f"survival policy spec: params must be an object, got {show(params)}", field="params",
                             value=params)
    if "source" in spec:
        return get_survival_policy(PROGRAM, limits=limits, source=spec["source"], **params)
    return get_survival_policy(spec.get("name"), limits=limits, **params)  # type: ignore[arg-type]


def spec_name(spec: Any) -> str:
    """A short label for a spec (its name, or ``program:<sha prefix>``)."""
    if isinstance(spec, str):
        return spec
    if isinstance(spec, Mapping) and "source" in spec:
        import hashlib

        return "program:" + hashlib.sha256(str(spec["source"]).encode()).hexdigest()[:10]
    return str(spec.get("name")) if isinstance(spec, Mapping) else show(spec)
