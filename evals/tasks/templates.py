"""Probe wording: the data table ``evals/data/probe_templates.yaml`` (or a file of the same shape).

The table is the knob the probe-format calibration turns: each probe has an open ``question`` and
a ``cloze`` lead-in per split, kind and domain. This module loads and checks it; it does not
choose which facts are asked (that is :mod:`evals.tasks.families`).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evals.errors import TaskError
from evals.tasks.domains import DOMAINS, get_domain

DATA_DIR = Path(__file__).resolve().parents[1] / "data"  # packaged with evals (pyproject package-data)
SECTIONS = {"fact": "fact", "multi_hop": "multi_hop", "status_before": "status", "status_now": "status",
            "original_reason": "original_reason"}


@dataclass(frozen=True)
class Wording:
    """One probe's wording with ``{key}`` filled in."""

    question: str
    cloze: str


@dataclass(frozen=True)
class ProbeTemplates:
    """A loaded wording table and the SHA-256 of its text (recorded with every suite)."""

    table: Mapping[str, Any]
    digest: str
    source: str

    def wording(self, split: str, kind: str, domain: str, template: str, key: str) -> Wording:
        """The wording of a probe; raises :class:`TaskError` naming the missing entry."""
        section = SECTIONS.get(kind)
        if section is None:
            raise TaskError(f"unknown probe kind {kind!r}; valid: {', '.join(SECTIONS)}", field="kind", value=kind)
        path = [split, section, domain] + ([template] if section in ("fact", "multi_hop") else [])
        node: Any = self.table
        for i, part in enumerate(path):
            if not isinstance(node, Mapping) or part not in node:
                have = ", ".join(sorted(node)) if isinstance(node, Mapping) else "nothing"
                raise TaskError(f"{self.source}: no probe wording at {'.'.join(path[:i + 1])}; have: {have}",
                                field="probe_templates", value=".".join(path))
            node = node[part]
        try:
            return Wording(node["question"].format(key=key), node["cloze"].format(key=key))
        except (KeyError, TypeError) as err:
            raise TaskError(f"{self.source}: entry {'.'.join(path)} needs 'question' and 'cloze' strings",
                            field="probe_templates", value=".".join(path)) from err

    def check(self, domains: tuple[str, ...] | None = None, splits: tuple[str, ...] = ("train", "heldout")) -> None:
        """Raise :class:`TaskError` unless every domain's probes (``domains``; default the three
        train domains) have wording in ``splits``."""
        for split in splits:
            for name, domain in ((d, get_domain(d)) for d in (domains or tuple(DOMAINS))):
                for t, f in domain.facts:
                    self.wording(split, "fact", name, f"{t}.{f}", "X")
                self.wording(split, "multi_hop", name, ".".join(domain.hop), "X")
                for kind in ("status_now", "original_reason"):
                    self.wording(split, kind, name, "", "X")


@functools.lru_cache(maxsize=8)
def load_probe_templates(path: str = "", domains: tuple[str, ...] | None = None,
                         splits: tuple[str, ...] = ("train", "heldout")) -> ProbeTemplates:
    """The packaged table (``path`` empty) or the YAML file at ``path``, checked for completeness
    (:meth:`ProbeTemplates.check` over ``domains`` and ``splits``)."""
    if path:
        file = Path(path).expanduser()
        if not file.is_file():
            raise TaskError(f"probe template file {str(file)!r} does not exist", field="probe_templates", value=path)
        text, source = file.read_text(encoding="utf-8"), str(file)
    else:
        text = (DATA_DIR / "probe_templates.yaml").read_text(encoding="utf-8")
        source = "evals/data/probe_templates.yaml"
    table = yaml.safe_load(text)
    if not isinstance(table, Mapping):
        raise TaskError(f"{source}: expected a mapping of splits, got {type(table).__name__}",
                        field="probe_templates", value=source)
    templates = ProbeTemplates(table, hashlib.sha256(text.encode()).hexdigest()[:16], source)
    templates.check(domains, splits)
    return templates
