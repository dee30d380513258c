"""# Writing a tool-gap survival program

A survival program decides what happens to the KV of agent sessions that are paused on a tool
call: keep it as ordinary cache, pin it in the pool, swap it to the host tier, or discard it
(the next turn recomputes it). It has the same shape as a cache-policy program
(docs/policy-api.md) and runs through the same static checker and sandbox.

## What the file must define

```python
DEFAULTS = {"ttl_s": 2.0}          # optional, a literal dict: every parameter and its default

def decide(request, params):       # -> {session id: decision} for every session in request.sessions
    out = {}
    for s in request.sessions:
        out[s.session] = request.decision("pin", ttl_s=params["ttl_s"], score=-s.arrival_s)
    return out

def space(trial):                  # -> dict of parameters, drawn with trial.suggest_*
    return {"ttl_s": trial.suggest_float("ttl_s", 0.0, 10.0)}
```

## Decisions

A decision is `{"action": a, "ttl_s": t, "score": x}` (use `request.decision(a, ttl_s=None,
score=None)`), one per session of `request.sessions`, keyed by `s.session`:

| action | meaning |
|---|---|
| `"keep"` | leave the KV as ordinary cache; under memory pressure evicted in `score` order |
| `"pin"` | keep it in the pool; evicted only after every unpinned candidate (pins are relieved in `score` order) |
| `"swap"` | move it to the host tier now (what does not fit stays) |
| `"discard"` | free it now; the next turn recomputes it |

`score`: lower is evicted first; `None` means least-recently-used order (the engine's default).
`ttl_s`: after this many seconds the program is asked again about the session (with
`s.previous` set to the decision that expired and `s.waited_s` grown); `None` means never.

## The request

| name | meaning |
|---|---|
| `request.now` | the current time (seconds) |
| `request.sessions` | tuple of the sessions to decide now (just paused, or their TTL expired) |
| `request.pool_bytes`, `request.pool_used` | KV pool budget and use (bytes) |
| `request.host_bytes`, `request.host_used` | host tier budget and use (bytes) |
| `request.pool_free()`, `request.host_free()`, `request.pressure()` | free bytes; `pool_used / pool_bytes` |
| `request.running_tokens`, `request.running` | context tokens and number of running requests |
| `request.paused`, `request.paused_bytes` | paused sessions and their KV bytes (nominal) |
| `request.bytes_per_token` | KV bytes of one token |
| `request.t_prefill(n, context)` | seconds to compute `n` tokens after `context` stored ones |
| `request.t_fwd(n)` | seconds to recompute `n` tokens from scratch |
| `request.t_swap(nbytes)` | seconds to move `nbytes` between pool and host |
| `request.t_decode(batch)` | seconds of one decode step of `batch` sequences |
| `request.durations(tool)` | tuple of recently observed pause durations of `tool` (seconds) |
| `request.all_durations` | tuple of recently observed pause durations over all tools |
| `request.n_returns` | tool returns observed in total |
| `request.eta` | -corr(turn index, turns remaining) over finished programs, or `None` |
| `request.queue_delay_s` | mean admission delay of resumed requests whose KV was evicted, or `None` |
| `request.finished_turns` | tuple of turn counts of recently finished programs |
| `request.ecdf(values, x)` | fraction of `values` that are `<= x` (0.0 for an empty tuple) |
| `request.decision(action, ttl_s=None, score=None)` | a decision dict |

A session `s` has `s.session`, `s.program`, `s.turn`, `s.context_tokens`, `s.kv_bytes`,
`s.resident_tokens`, `s.host_tokens`, `s.absent_tokens`, `s.tool`, `s.expected_gap_s` (the
harness's estimate or `None`), `s.waited_s`, `s.paused_at`, `s.arrival_s`, `s.service_s` (its
attained LLM service), `s.program_service_s` (summed over its program), `s.critical_s` (the
program's longest per-session service), `s.queue_wait_s`, `s.relevance` (similarity of its
context to its task, or `None`), `s.side_effect` and `s.previous` (a decision dict or `None`).

## The language

The same as for cache programs: plain functions, `math`, `re`, `statistics`, the pure builtins;
no other imports, no `open`/`eval`/`getattr`, no classes, no attribute assignment, no names
starting with `_`, no builtin's name (`open`, `type`, `id`...) reused for a name of your own,
at most 20 KB; `space` follows the same rules as in a cache program. A failure (exception,
timeout, a missing or malformed decision) fails the candidate with a one-line reason.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Mapping, Sequence
from typing import Any

ACTIONS = ("keep", "pin", "swap", "discard")

_SESSION_FIELDS = (
    "session", "program", "turn", "context_tokens", "kv_bytes", "resident_tokens", "host_tokens", "absent_tokens",
    "tool", "expected_gap_s", "waited_s", "paused_at", "arrival_s", "service_s", "program_service_s", "critical_s",
    "queue_wait_s", "relevance", "side_effect",
)


class SessionView:
    """One paused session, read-only by convention (programs cannot assign attributes)."""

    __slots__ = (*_SESSION_FIELDS, "_previous")

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.session: str = str(data["session"])
        self.program: str = str(data["program"])
        self.turn: int = int(data["turn"])
        self.context_tokens: int = int(data["context_tokens"])
        self.kv_bytes: int = int(data["kv_bytes"])
        self.resident_tokens: int = int(data["resident_tokens"])
        self.host_tokens: int = int(data["host_tokens"])
        self.absent_tokens: int = int(data["absent_tokens"])
        self.tool: str = str(data["tool"])
        self.expected_gap_s: float | None = _opt(data["expected_gap_s"])
        self.waited_s: float = float(data["waited_s"])
        self.paused_at: float = float(data["paused_at"])
        self.arrival_s: float = float(data["arrival_s"])
        self.service_s: float = float(data["service_s"])
        self.program_service_s: float = float(data["program_service_s"])
        self.critical_s: float = float(data["critical_s"])
        self.queue_wait_s: float = float(data["queue_wait_s"])
        self.relevance: float | None = _opt(data["relevance"])
        self.side_effect: bool = bool(data["side_effect"])
        prev = data.get("previous")
        self._previous = json.loads(json.dumps(prev)) if prev is not None else None

    @property
    def previous(self) -> dict[str, Any] | None:
        """A fresh copy of the decision whose TTL expired, or ``None`` at the pause itself."""
        return json.loads(json.dumps(self._previous)) if self._previous is not None else None


def _opt(value: Any) -> float | None:
    return None if value is None else float(value)


class SurvivalView:
    """What a survival program sees of one decision point (see the module docstring)."""

    __slots__ = ("_cost", "_durations", "_sorted", "all_durations", "bytes_per_token", "eta", "finished_turns",
                 "host_bytes", "host_used", "n_returns", "now", "paused", "paused_bytes", "pool_bytes", "pool_used",
                 "queue_delay_s", "running", "running_tokens", "sessions")

    def __init__(self, data: Mapping[str, Any]) -> None:
        system, log, cost = data["system"], data["log"], data["cost"]
        self.now = float(data["now"])
        self.sessions = tuple(SessionView(s) for s in data["pending"])
        self.pool_bytes = int(system["pool_bytes"])
        self.pool_used = int(system["pool_used"])
        self.host_bytes = int(system["host_bytes"])
        self.host_used = int(system["host_used"])
        self.running_tokens = int(system["running_tokens"])
        self.running = int(system["running"])
        self.paused = int(system["paused"])
        self.paused_bytes = int(system["paused_bytes"])
        self.bytes_per_token = int(cost["bytes_per_token"])
        self._cost = (tuple(float(c) for c in cost["prefill"]), tuple(float(c) for c in cost["decode"]),
                      float(cost["swap_bytes_per_s"]))
        self._durations = {str(k): tuple(map(float, v)) for k, v in log["durations"].items()}
        self.all_durations = tuple(map(float, log["all_durations"]))
        self.n_returns = int(log["n_returns"])
        self.eta = None if log["eta"] is None else float(log["eta"])
        self.queue_delay_s = None if log["queue_delay_s"] is None else float(log["queue_delay_s"])
        self.finished_turns = tuple(map(int, log["finished_turns"]))
        self._sorted: dict[int, tuple[Sequence[float], list[float]]] = {}

    def durations(self, tool: str) -> tuple[float, ...]:
        return self._durations.get(tool, ())

    def pool_free(self) -> int:
        return max(0, self.pool_bytes - self.pool_used)

    def host_free(self) -> int:
        return max(0, self.host_bytes - self.host_used)

    def pressure(self) -> float:
        return self.pool_used / self.pool_bytes if self.pool_bytes > 0 else 1.0

    def t_prefill(self, n: float, context: float = 0.0) -> float:
        if n <= 0:
            return 0.0
        c0, c1, c2 = self._cost[0]
        return c0 + c1 * n + c2 * n * (context + n)

    def t_fwd(self, n: float) -> float:
        return self.t_prefill(n, 0.0)

    def t_swap(self, nbytes: float) -> float:
        return max(0.0, nbytes) / self._cost[2]

    def t_decode(self, batch: int) -> float:
        d0, d1 = self._cost[1]
        return d0 + d1 * max(1, batch) if batch > 0 else 0.0

    def ecdf(self, values: Sequence[float], x: float) -> float:
        """Fraction of ``values`` that are ``<= x`` (sorted once per sequence, then bisected)."""
        if not values:
            return 0.0
        entry = self._sorted.get(id(values))
        if entry is None or entry[0] is not values:
            entry = (values, sorted(values))
            self._sorted[id(values)] = entry
        return bisect.bisect_right(entry[1], x) / len(values)

    @staticmethod
    def decision(action: str, ttl_s: float | None = None, score: float | None = None) -> dict[str, Any]:
        return {"action": action, "ttl_s": ttl_s, "score": score}


API_CLASSES = (SessionView, SurvivalView)
