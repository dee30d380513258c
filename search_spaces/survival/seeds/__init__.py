"""Seed survival programs: every built-in survival family as program source, for the search to mutate.

Each ``<name>.py`` here passes ``check_program``, has the family's parameters as ``DEFAULTS``
and gives the same decisions as the built-in family of the same name (tests/search_spaces/
test_survival.py). The files are read as text, never imported by the framework.
"""

from __future__ import annotations

from pathlib import Path

from search_spaces.errors import UnknownPolicyError

SEED_DIR = Path(__file__).resolve().parent
SURVIVAL_SEEDS = ("lru", "ttl", "min_waste", "program_priority", "next_ref", "intent", "weighted")


def survival_seed_source(name: str) -> str:
    """The source of survival seed ``name``.

    Raises:
        UnknownPolicyError: listing the seed names.
    """
    if name not in SURVIVAL_SEEDS:
        raise UnknownPolicyError(f"unknown survival seed {name!r}; valid seeds: {', '.join(SURVIVAL_SEEDS)}",
                                 field="seed", value=name)
    return (SEED_DIR / f"{name}.py").read_text(encoding="utf-8")
