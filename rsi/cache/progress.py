"""Progress of a search: evaluations done out of those the config implies, with an ETA.

The plan (:func:`plan_evaluations`) counts what the config asks for: every expert on train,
every program (seeds, imported front, ``per_generation`` proposals per generation) tuned with
``trials`` trials on every train task, and, once the picks are frozen (``rsi.cache.protocol``), the
held-out split for each expert (fixed and tuned), each baseline arm's choice, up to
``heldout_front`` front members and one match per comparator (``rsi.cache.headline.heldout_targets``). It
is an upper bound: a pruned trial stops after the fidelity tasks, a refused program runs nothing,
a trial may repeat parameters. The loop settles each unit (:meth:`SearchProgress.unit`) when it
ends, so the total shrinks to what actually ran and the bar ends full.

The bar advances once per distinct evaluation, whether it was computed or came from the store
(a resumed search moves fast over what it finished before). It is drawn (tqdm) only when the
output is a terminal; elsewhere the per-candidate lines are the progress.

:class:`SearchProgress` is the search's console reporter: every line the search shows goes through
:meth:`SearchProgress.write` (above the bar), and everything else the search says is logged.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from rsi.cache.config import SearchConfig


@dataclass(frozen=True)
class EvalPlan:
    """Evaluations a config implies (upper bounds, see the module docstring)."""

    experts: int
    per_program: int
    programs: int
    heldout: int
    check: int = 0

    @property
    def total(self) -> int:
        return self.experts + self.per_program * self.programs + self.heldout + self.check


def plan_evaluations(config: SearchConfig, n_train: int, n_heldout: int) -> EvalPlan:
    """The plan for ``config`` with ``n_train`` / ``n_heldout`` tasks per split (imported programs
    of ``seed_from`` are added by the loop when it has read them)."""
    return EvalPlan(
        experts=len(config.experts) * n_train,
        per_program=(config.cascade.promote if config.cascade.enabled else config.optuna.trials) * n_train,
        programs=len(config.seeds) + config.generations * config.proposer.per_generation,
        heldout=(config.heldout_front + 2 * (len(config.experts) + len(config.arms))) * n_heldout,
        check=config.cascade.check * n_train if config.cascade.enabled else 0,
    )


class SearchProgress:
    """Evaluations done / planned of one search attempt, and the bar that shows them.

    Args:
        total: the planned evaluations.
        enabled: ``True`` draws the bar, ``False`` never, ``None`` only on a terminal.
        file: where the bar goes (tqdm's default, stderr, when ``None``).
    """

    def __init__(self, total: int, enabled: bool | None = None, file: Any = None):
        self.planned = total
        self.total = total
        self.done = 0
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self.bar = tqdm(total=total, desc="search", unit="eval", disable=None if enabled is None else not enabled,
                        file=file, dynamic_ncols=True, smoothing=0.1)
        self.drawn = not self.bar.disable  # (tqdm disables a bar when it closes)

    def advance(self, key: str) -> None:
        """Count the evaluation ``key`` (once, however often it is asked for)."""
        with self._lock:
            if key in self._seen:
                return
            self._seen.add(key)
            self.done += 1
            self.bar.update(1)

    def replan(self, delta: int) -> None:
        """Change the planned total by ``delta`` (never below what is done)."""
        with self._lock:
            self.total = max(self.done, self.total + delta)
            self.bar.total = self.total
            self.bar.refresh()

    @contextmanager
    def unit(self, planned: int) -> Iterator[None]:
        """A part of the plan worth ``planned`` evaluations: on exit, the total keeps only what it ran."""
        before = self.done
        try:
            yield
        finally:
            self.replan((self.done - before) - planned)

    def write(self, text: str) -> None:
        """A line of output that keeps the bar below it."""
        if not self.bar.disable:
            self.bar.write(text, file=sys.stdout)
            sys.stdout.flush()
        else:
            print(text, flush=True)

    def close(self) -> None:
        self.bar.close()
