"""The multi-session workload generator: agent sessions drawn from stated distributions.

Tool gaps come in three kinds, each a log-normal duration (median, sigma), tools drawn uniformly
(those marked * have side effects) and a rule for what the harness tells the engine
(``expected_gap_s``):

    code   fast code execution   median 0.4 s  sigma 0.6  python, shell                 hint: the median
    api    slow external APIs    median 2.5 s  sigma 0.5  search, weather, crm_update*  hint: the median
    human  rare human approvals  median 60 s   sigma 0.7  approval                      hint: none

A workload kind fixes the tool mix, the turns per session (uniform), the task and tool-output
lengths (log-normal, clipped), the output lengths (uniform), Poisson arrivals and the suggested
KV budgets, in sessions' worth of KV (times the mean final context of the trace's sessions):

    tool-heavy    6-12 turns, tool outputs ~120 tokens, mix code/api/human 0.60/0.35/0.05,
                  arrivals 0.5/s, pool of 2 sessions, host tier of half a session
    memory-tight  3-6 turns, tool outputs ~500 tokens, tasks 200-400 tokens, mix 0.30/0.60/0.10,
                  arrivals 1/s, pool of 1.25 sessions, host tier of a quarter session

Each session has a focus in [0.2, 1] (how much of its text is about its task); low-focus sessions
have fewer turns (the intent stand-in's premise: off-task sessions end sooner). ``time_scale``
multiplies every duration and arrival time and ``token_scale`` every message length (the
real-engine replay on a shared 2-core machine uses both < 1 to stay short). Same arguments, same
trace.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from evals.survival.text import cosine, word_ids
from evals.survival.trace import SessionSpec, Trace, TraceHeader, Turn, WorkloadError


@dataclass(frozen=True)
class ToolKind:
    """A kind of tool gap: log-normal duration, its tools (some with side effects), what the harness hints."""

    name: str
    tools: tuple[str, ...]
    median_s: float
    sigma: float
    side_effect_tools: tuple[str, ...]
    hinted: bool


TOOL_KINDS = {k.name: k for k in (
    ToolKind("code", ("python", "shell"), 0.4, 0.6, (), True),
    ToolKind("api", ("search", "weather", "crm_update"), 2.5, 0.5, ("crm_update",), True),
    ToolKind("human", ("approval",), 60.0, 0.7, (), False),
)}


@dataclass(frozen=True)
class WorkloadSpec:
    """A workload kind (see the module docstring for the two built-in ones)."""

    name: str
    turns: tuple[int, int]
    task_tokens: tuple[int, int]
    tool_output_median: int
    tool_output_sigma: float
    tool_output_clip: tuple[int, int]
    output_tokens: tuple[int, int]
    tool_mix: tuple[tuple[str, float], ...]
    arrival_rate_per_s: float
    system_tokens: int
    pool_sessions: float
    host_sessions: float

    def describe(self) -> dict[str, object]:
        return {"turns": list(self.turns), "task_tokens": list(self.task_tokens),
                "tool_output_tokens": {"lognormal_median": self.tool_output_median,
                                       "sigma": self.tool_output_sigma, "clip": list(self.tool_output_clip)},
                "output_tokens": list(self.output_tokens), "tool_mix": dict(self.tool_mix),
                "tool_kinds": {k.name: {"median_s": k.median_s, "sigma": k.sigma,
                                        "side_effect_tools": list(k.side_effect_tools),
                                        "hinted": k.hinted, "tools": list(k.tools)} for k in TOOL_KINDS.values()},
                "arrival_rate_per_s": self.arrival_rate_per_s, "pool_sessions": self.pool_sessions,
                "host_sessions": self.host_sessions}


KINDS = {k.name: k for k in (
    WorkloadSpec("tool-heavy", (6, 12), (40, 80), 120, 0.5, (30, 600), (8, 16),
                 (("code", 0.60), ("api", 0.35), ("human", 0.05)), 0.5, 64, 2.0, 0.5),
    WorkloadSpec("memory-tight", (3, 6), (200, 400), 500, 0.4, (150, 1500), (8, 16),
                 (("code", 0.30), ("api", 0.60), ("human", 0.10)), 1.0, 64, 1.25, 0.25),
)}


def get_kind(name: str) -> WorkloadSpec:
    """The workload kind ``name`` (the error lists the valid ones)."""
    try:
        return KINDS[name]
    except (KeyError, TypeError):
        raise WorkloadError(f"unknown workload kind {name!r}; valid kinds: {', '.join(KINDS)}", field="kind",
                            value=name) from None


def _lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return median * math.exp(rng.gauss(0.0, sigma))


def _pick(rng: random.Random, mix: tuple[tuple[str, float], ...]) -> str:
    x, acc = rng.random() * sum(w for _, w in mix), 0.0
    for name, w in mix:
        acc += w
        if x < acc:
            return name
    return mix[-1][0]


def _session(spec: WorkloadSpec, rng: random.Random, index: int, arrival: float, scale: float,
             tokens: float) -> SessionSpec:
    seed = rng.randrange(1 << 30)
    focus = rng.uniform(0.2, 1.0)
    lo, hi = spec.turns
    n_turns = max(lo, min(hi, round(lo + (hi - lo) * focus + rng.uniform(-1.0, 1.0))))
    task_n = max(1, round(rng.randint(*spec.task_tokens) * tokens))
    task = word_ids(seed, 0, "user", task_n, 1.0)
    turns = []
    inputs = [task_n] + [max(1, round(tokens * max(spec.tool_output_clip[0], min(spec.tool_output_clip[1], round(
        _lognormal(rng, spec.tool_output_median, spec.tool_output_sigma)))))) for _ in range(n_turns - 1)]
    for k in range(n_turns):
        rel = 1.0 if k == 0 else round(cosine(task, word_ids(seed, k, "tool", inputs[k], focus * 0.9 ** k)), 4)
        out = max(1, round(rng.randint(*spec.output_tokens) * tokens))
        if k == n_turns - 1:
            turns.append(Turn(inputs[k], out, None, 0.0, None, False, rel))
            continue
        kind = TOOL_KINDS[_pick(rng, spec.tool_mix)]
        gap = round(_lognormal(rng, kind.median_s, kind.sigma) * scale, 4)
        hint = round(kind.median_s * scale, 4) if kind.hinted else None
        tool = rng.choice(kind.tools)
        turns.append(Turn(inputs[k], out, tool, gap, hint, tool in kind.side_effect_tools, rel))
    return SessionSpec(f"s{index:04d}", f"p{index:04d}", round(arrival * scale, 4), seed, tuple(turns))


def generate_trace(kind: str, sessions: int, seed: int = 0, time_scale: float = 1.0,
                   arrival_rate_per_s: float | None = None, token_scale: float = 1.0) -> Trace:
    """A trace of ``sessions`` sessions of workload ``kind`` (deterministic in its arguments).

    ``arrival_rate_per_s`` overrides the kind's arrival rate (cluster-scale traces use a higher one).

    Raises:
        WorkloadError: an unknown kind, a non-positive session count, time scale or arrival rate.
    """
    spec = get_kind(kind)
    if arrival_rate_per_s is not None:
        if not (isinstance(arrival_rate_per_s, int | float) and math.isfinite(arrival_rate_per_s)
                and arrival_rate_per_s > 0):
            raise WorkloadError(f"arrival_rate_per_s must be a positive number, got {arrival_rate_per_s!r}",
                                field="arrival_rate_per_s", value=arrival_rate_per_s)
        spec = replace(spec, arrival_rate_per_s=float(arrival_rate_per_s))
    if isinstance(sessions, bool) or not isinstance(sessions, int) or not 1 <= sessions <= 1_000_000:
        raise WorkloadError(f"sessions must be an integer in [1, 1000000], got {sessions!r}", field="sessions",
                            value=sessions)
    for name, v in (("time_scale", time_scale), ("token_scale", token_scale)):
        if isinstance(v, bool) or not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
            raise WorkloadError(f"{name} must be a positive number, got {v!r}", field=name, value=v)
    rng = random.Random(f"{kind}/{seed}")
    arrival = 0.0
    out = []
    for i in range(sessions):
        out.append(_session(spec, rng, i, arrival, time_scale, token_scale))
        arrival += rng.expovariate(spec.arrival_rate_per_s)
    mean = sum(s.context_tokens for s in out) / len(out)
    header = TraceHeader(kind, seed, "generated", spec.system_tokens,
                         max(1, round(spec.system_tokens + mean * spec.pool_sessions)),
                         round(mean * spec.host_sessions),
                         {**spec.describe(), "time_scale": time_scale, "token_scale": token_scale})
    return Trace(header, tuple(out))
