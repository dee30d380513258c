"""Seed programs: every built-in cache family as policy-program source, for the search to mutate.

Each ``<name>.py`` here is a program in the restricted language of ``program_api`` (it passes
``check_program``) and gives the same decisions as the built-in family of the same name. The files
are read as text, never imported as modules by the framework.
"""

from __future__ import annotations

from pathlib import Path

from search_spaces.errors import UnknownPolicyError

SEED_DIR = Path(__file__).resolve().parent
SEEDS = ("full", "rolling_drop", "thinking_drop", "scored_drop", "read_drop")


def seed_source(name: str) -> str:
    """The source of seed ``name``.

    Raises:
        UnknownPolicyError: listing the seed names.
    """
    if name not in SEEDS:
        raise UnknownPolicyError(f"unknown seed {name!r}; valid seeds: {', '.join(SEEDS)}", field="seed", value=name)
    return (SEED_DIR / f"{name}.py").read_text(encoding="utf-8")
