"""Task domains by name: the worlds trajectories are written about (see :mod:`evals.tasks.domains.base`)."""

from __future__ import annotations

from evals.errors import TaskError
from evals.tasks.domains.base import REASON_POOL, STATUS_POOL, Domain, FieldDef, RecordType, StatusFlow
from evals.tasks.domains.itops import ITOPS
from evals.tasks.domains.logistics import LOGISTICS
from evals.tasks.domains.procurement import PROCUREMENT
from evals.tasks.domains.support import SUPPORT

DOMAINS: dict[str, Domain] = {d.name: d for d in (LOGISTICS, ITOPS, PROCUREMENT)}
SURFACE_DOMAINS: dict[str, Domain] = {SUPPORT.name: SUPPORT}
"""Held-out surface domains: held-out phrasing only, tool formats of their own (the ``horizon`` suites)."""


def get_domain(name: str) -> Domain:
    """The domain called ``name`` (a surface domain too); the error lists the valid names."""
    try:
        return DOMAINS[name] if name in DOMAINS else SURFACE_DOMAINS[name]
    except KeyError:
        raise TaskError(f"unknown task domain {name!r}; valid: {', '.join([*DOMAINS, *SURFACE_DOMAINS])}",
                        field="domain", value=name) from None


__all__ = ["DOMAINS", "REASON_POOL", "STATUS_POOL", "SURFACE_DOMAINS", "Domain", "FieldDef", "RecordType",
           "StatusFlow", "get_domain"]
