"""The shared event log of the survival layer: tool durations, finished programs, queue delays.

Every paused session's return adds one observed duration for its tool; every finished program
adds its turn count; every resumed request whose KV had been evicted adds its admission delay.
Policies read a bounded summary (:class:`engine.survival.types.LogStats`): Continuum's empirical
CDF of a tool's durations and its eta, UNISON-style reuse probabilities, and so on. It only
records; it never decides.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from engine.survival.types import LogStats, SurvivalError


@dataclass
class _Moments:
    """Running sums for the correlation of (turn index, turns remaining)."""

    n: float = 0.0
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    syy: float = 0.0
    sxy: float = 0.0

    def add_program(self, turns: int) -> None:
        for k in range(turns):
            x, y = float(k), float(turns - 1 - k)
            self.n += 1
            self.sx += x
            self.sy += y
            self.sxx += x * x
            self.syy += y * y
            self.sxy += x * y

    def corr(self) -> float | None:
        if self.n < 2:
            return None
        vx = self.sxx / self.n - (self.sx / self.n) ** 2
        vy = self.syy / self.n - (self.sy / self.n) ** 2
        if vx <= 1e-12 or vy <= 1e-12:
            return None
        cov = self.sxy / self.n - (self.sx / self.n) * (self.sy / self.n)
        return cov / math.sqrt(vx * vy)


class EventLog:
    """Observations shared by all sessions (bounded: the most recent ``per_tool`` / ``overall``).

    Args:
        per_tool: durations kept per tool.
        overall: durations kept over all tools, and finished programs kept.
    """

    def __init__(self, per_tool: int = 128, overall: int = 256) -> None:
        self.per_tool = per_tool
        self.overall = overall
        self._tools: dict[str, deque[float]] = {}
        self._all: deque[float] = deque(maxlen=overall)
        self._turns: deque[int] = deque(maxlen=overall)
        self._moments = _Moments()
        self.n_returns = 0
        self._delay_sum = 0.0
        self._delay_n = 0
        self._cache: dict[str | None, tuple[int, tuple[float, ...]]] = {}  # key -> (n_returns, tuple)

    def record_return(self, tool: str, duration_s: float) -> None:
        """One tool call of ``tool`` took ``duration_s`` seconds (from pause to resume)."""
        if not math.isfinite(duration_s) or duration_s < 0:
            raise SurvivalError(f"a tool duration must be a finite number >= 0, got {duration_s!r}",
                                field="duration_s", value=duration_s)
        self._tools.setdefault(tool, deque(maxlen=self.per_tool)).append(float(duration_s))
        self._all.append(float(duration_s))
        self.n_returns += 1

    def record_finish(self, turns: int) -> None:
        """A program finished after ``turns`` LLM calls."""
        if turns < 1:
            raise SurvivalError(f"a finished program has at least one turn, got {turns}", field="turns", value=turns)
        self._turns.append(int(turns))
        self._moments.add_program(int(turns))

    def record_queue_delay(self, delay_s: float) -> None:
        """A resumed request whose KV had been evicted waited ``delay_s`` for admission."""
        self._delay_sum += max(0.0, float(delay_s))
        self._delay_n += 1

    @property
    def eta(self) -> float | None:
        """Continuum's eta: the negative correlation of turn index and turns remaining."""
        c = self._moments.corr()
        return None if c is None else -c

    def durations(self, tool: str | None) -> tuple[float, ...]:
        """Recent durations of ``tool`` (``None``: of every tool), oldest first."""
        hit = self._cache.get(tool)
        if hit is None or hit[0] != self.n_returns:
            values = tuple(self._all if tool is None else self._tools.get(tool, ()))
            hit = (self.n_returns, values)
            self._cache[tool] = hit
        return hit[1]

    def stats(self, tools: Iterable[str]) -> LogStats:
        """The summary policies see, with durations of ``tools`` only (keeps requests small)."""
        return LogStats(
            durations={t: self.durations(t) for t in sorted(set(tools))},
            all_durations=self.durations(None),
            n_returns=self.n_returns,
            eta=self.eta,
            queue_delay_s=self._delay_sum / self._delay_n if self._delay_n else None,
            finished_turns=tuple(self._turns),
        )
