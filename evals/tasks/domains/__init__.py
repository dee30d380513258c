"""Task domains by name: the worlds trajectories are written about (see :mod:`evals.tasks.domains.base`)."""

from __future__ import annotations

from evals.errors import TaskError
from evals.tasks.domains.base import REASON_POOL, STATUS_POOL, Domain, FieldDef, RecordType, StatusFlow
from evals.tasks.domains.itops import ITOPS
from evals.tasks.domains.logistics import LOGISTICS
from evals.tasks.domains.procurement import PROCUREMENT

DOMAINS: dict[str, Domain] = {d.name: d for d in (LOGISTICS, ITOPS, PROCUREMENT)}


def get_domain(name: str) -> Domain:
    """The domain called ``name``; the error lists the valid names."""
    try:
        return DOMAINS[name]
    except KeyError:
        raise TaskError(f"unknown task domain {name!r}; valid: {', '.join(DOMAINS)}", field="domain",
                        value=name) from None


__all__ = ["DOMAINS", "REASON_POOL", "STATUS_POOL", "Domain", "FieldDef", "RecordType", "StatusFlow", "get_domain"]
