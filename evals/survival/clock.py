"""The model clock: time that advances by a calibration's :class:`Timing`, not by the wall.

The simulator runs on it, and so can the real replay (``ReplayConfig(clock="model")``): then the
run loop sees the same times in both, takes the same scheduling decisions in the same order, and
the two must agree token for token (the conformance test). Time advances by a request's start,
each decode step and each finish, and by every byte the radix tree moved between pool and host
(read from its counters whenever the clock is read, so swaps a survival policy orders between
requests are paid too). Waiting for a tool return jumps ahead; after a wait of ``IDLE_S`` or more
the next request's start also pays ``Timing.wake_s``. The policy's own thinking time is not
charged (measured: about a millisecond a decision in the sandbox).
"""

from __future__ import annotations

from engine.cache.radix import TreeStats
from evals.survival.calibration import IDLE_S, Timing


class ModelClock:
    """A clock advanced by ``timing`` and by the swap bytes in ``stats`` (a radix tree's counters)."""

    def __init__(self, timing: Timing, stats: TreeStats) -> None:
        self.timing = timing
        self.stats = stats
        self._t = 0.0
        self._swapped = stats.swap_out_bytes + stats.swap_in_bytes
        self._idle = False

    def now(self) -> float:
        moved = self.stats.swap_out_bytes + self.stats.swap_in_bytes
        if moved != self._swapped:
            self._t += self.timing.t_swap(moved - self._swapped)
            self._swapped = moved
        return self._t

    def wait_until(self, t: float) -> None:
        now = self.now()
        if t - now >= IDLE_S:
            self._idle = True
        self._t = max(now, t)

    def started(self, computed: int, prompt: int) -> None:
        """A request started: ``computed`` of its ``prompt`` tokens were prefilled."""
        wake = self.timing.wake_s if self._idle else 0.0
        self._idle = False
        self._t = self.now() + wake + self.timing.t_start(computed, prompt)

    def stepped(self, batch: int, forward: int, context: int) -> None:
        """One decode step of ``batch`` sequences, ``forward`` of which go on (attending to ``context``
        tokens in all)."""
        self._t = self.now() + self.timing.t_step(batch, forward, context)

    def finished(self) -> None:
        self._t = self.now() + self.timing.finish_s
