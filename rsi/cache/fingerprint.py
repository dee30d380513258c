"""Behaviour fingerprints: two programs that decide alike are one candidate, evaluated once.

A program's fingerprint is the hash of its decisions on fixed episodes (the search's smoke
episode) under its ``DEFAULTS`` and under :data:`DRAWS` parameter sets drawn from its own
``space`` by a seeded random sampler, so that two programs whose ``decide`` agree at the defaults
but whose spaces differ (a mutated bound) still differ. The search refuses a new program whose
fingerprint equals one it has already tuned (``Status.DUPLICATE``, counted in ``state.json``);
the synthesis proposer discards such candidates before it proposes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import optuna

from search_spaces import Episode, run_program, suggest_params

DRAWS = 2
SAMPLER_SEED = 20261203


def behaviour(source: str, defaults: Mapping[str, Any], episodes: Sequence[Episode]) -> str | None:
    """The fingerprint of ``source`` on ``episodes`` (``None`` when it cannot run: tuning records why)."""
    runs = [run_program(source, dict(defaults), list(episodes))]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=SAMPLER_SEED))
    for _ in range(DRAWS):
        drawn = suggest_params(source, study.ask())
        if not drawn.ok:
            return None
        runs.append(run_program(source, {**dict(defaults), **dict(drawn.params or {})}, list(episodes)))
    if not all(r.ok for r in runs):
        return None
    blob = json.dumps([[[d.wire for d in ep] for ep in r.decisions] for r in runs], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
