"""``program_priority`` -- Autellix: program-level priority by attained service.

Paper rule (SURVIVAL.md, "Autellix"): PLAS ranks a program by the total service time of its
earlier calls (more service, lower priority); ATLAS by its longest critical path of service
(for one thread that is the same; over parallel sessions of one program, the largest). Priorities
map to ``levels`` queues by range, with quanta doubling from ``quantum_s``: a program is in
queue i once its service reaches ``quantum_s * (2**i - 1)`` (boundaries 1, 3, 7, ... for 1 s).
Anti-starvation: a program whose waiting (queue wait of its calls) over service reaches ``beta``
is promoted to queue 0 (``beta = 0`` disables it).

Here the priority orders survival: score = -queue, so under memory pressure the KV of the most
served programs goes first (ties: least recently used). Optionally, programs from queue
``swap_level`` on are swapped out at once and from ``discard_level`` on discarded (``levels``
disables either). The scheduler itself stays first-come-first-served, so that policies are
compared on survival alone (docs/survival.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from search_spaces.params import check_choice, check_range
from search_spaces.survival.api import SurvivalView
from search_spaces.survival.common import SurvivalFamily, resident_bytes

NAME = "program_priority"


@dataclass(frozen=True)
class AutellixParams:
    mode: str = "plas"
    levels: int = 4
    quantum_s: float = 1.0
    beta: float = 2.0
    swap_level: int = 4
    discard_level: int = 4

    def __post_init__(self) -> None:
        check_choice(NAME, "mode", self.mode, ("plas", "atlas"))
        check_range(NAME, "levels", self.levels, 1, 64)
        check_range(NAME, "quantum_s", self.quantum_s, 1e-6, 1e6)
        check_range(NAME, "beta", self.beta, 0.0, 1e6)
        check_range(NAME, "swap_level", self.swap_level, 0, 64)
        check_range(NAME, "discard_level", self.discard_level, 0, 64)


def queue_of(service_s: float, p: AutellixParams) -> int:
    """The queue (0 = highest priority) of a program that attained ``service_s`` seconds."""
    level = 0
    for i in range(1, p.levels):
        if service_s >= p.quantum_s * (2 ** i - 1):
            level = i
    return level


def decide(view: SurvivalView, p: AutellixParams) -> dict[str, dict[str, Any]]:
    out = {}
    host = view.host_free()
    for s in view.sessions:
        service = s.program_service_s if p.mode == "plas" else s.critical_s
        level = queue_of(service, p)
        if p.beta > 0 and s.queue_wait_s / max(service, 1e-9) >= p.beta:
            level = 0
        score = float(-level)
        size = resident_bytes(view, s)
        if level >= p.discard_level:
            out[s.session] = view.decision("discard", None, score)
        elif level >= p.swap_level and 0 < size <= host:
            out[s.session] = view.decision("swap", None, score)
            host -= size
        else:
            out[s.session] = view.decision("keep", None, score)
    return out


def space(trial: Any) -> dict[str, Any]:
    levels = trial.suggest_int("levels", 2, 8)
    return {
        "mode": trial.suggest_categorical("mode", ["plas", "atlas"]),
        "levels": levels,
        "quantum_s": trial.suggest_float("quantum_s", 0.05, 30.0, log=True),
        "beta": trial.suggest_float("beta", 0.0, 10.0),
        "swap_level": trial.suggest_int("swap_level", 1, 8),
        "discard_level": trial.suggest_int("discard_level", 1, 8),
    }


FAMILY = SurvivalFamily(NAME, "Autellix (program-level scheduling, PLAS / ATLAS)", AutellixParams,
                        decide, space, "evict the KV of programs with the most attained service first")
