"""Measure a calibration (``evals.survival.calibration``) on the local engine: ``akv workload calibrate``.

:func:`calibrate` times, on an idle engine and one request at a time (so no queueing is absorbed),
exactly the calls the replay's run loop makes:

- a request's start (``Engine.start``: render, plan, prefill, commit, decode cache) for ``n`` new
  tokens after ``ctx`` stored ones, over a grid of both; the stored context is a conversation of
  the workloads' shape (system prompt, then assistant and tool messages), prefilled untimed;
- one decode step (``Engine.step``) for each batch size up to ``max_batch``, at a short and a
  long context, apart for the steps that go on and the last one (no forward pass), and a
  request's finish (``Engine.finish``);
- a pool -> host -> pool move of a 256-token payload (on a CPU-only machine the host tier is the
  same memory under another budget, so this is bookkeeping and fast);
- the wake-up cost: a request's start after the engine sat idle for 0.2 s, minus the same start
  back to back (caches and worker threads go cold while every session waits on a tool).

Noise: every point is the median of ``repeats`` runs after warm-up requests, and the repeats go
round-robin over the grid, so a burst of load on a shared machine spreads over all points rather
than spoiling one. The fits (``a + b*n + c*n*p + e*p``, and ``d0 + d1*batch`` plus
``d2 + d3*forward + d4*context`` for a step with a forward pass)
minimise *relative* error with non-negative coefficients (a negative one is dropped and the rest
refitted); each point's residual is stored with the raw medians, and the machine's load average
before and after. A calibration that looks taken on a busy machine carries ``machine["warnings"]``
(load average above half the CPUs before the start; the same probe request first and last
differing by more than 25%; a point more than 25% off the fit), and ``akv workload calibrate``
does not store it without ``--force``.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch

from engine.engine import Engine
from engine.results import Generation
from evals.survival.calibration import Calibration, Timing
from evals.survival.chat import ChatTokens
from evals.survival.text import render, vocabulary, word_ids
from evals.survival.trace import WorkloadError

BUSY_LOAD = 0.5
"""A load average above this many per CPU before the measurement marks the machine as busy."""
MAX_DRIFT = 0.25
"""The probe request may change speed by this much between the start and the end."""
MAX_RESIDUAL = 0.25
"""No measured point may be further than this from the fit."""


def nonneg_fit(x: np.ndarray, y: np.ndarray, relative: bool = True) -> list[float]:
    """Least squares ``x @ coef ~ y`` with ``coef >= 0`` (a negative coefficient's term is dropped
    and the rest refitted); ``relative`` weighs each row by ``1 / y`` (relative error).

    Raises:
        WorkloadError: fewer rows than columns, or a non-positive ``y`` with ``relative``.
    """
    if x.shape[0] < x.shape[1]:
        raise WorkloadError(f"a fit of {x.shape[1]} coefficients needs at least as many points, got {x.shape[0]}",
                            field="points", value=x.shape[0])
    if relative:
        if (y <= 0).any():
            raise WorkloadError("a relative fit needs positive times", field="points", value=float(y.min()))
        x, y = x / y[:, None], np.ones_like(y)
    cols = list(range(x.shape[1]))
    while True:
        coef, *_ = np.linalg.lstsq(x[:, cols], y, rcond=None)
        bad = [c for c, v in zip(cols, coef) if v < 0]
        if not bad or len(cols) == 1:
            out = [0.0] * x.shape[1]
            for c, v in zip(cols, coef):
                out[c] = max(0.0, float(v))
            return out
        worst = min(bad, key=lambda c: coef[cols.index(c)])
        cols.remove(worst)


def _timed(engine: Engine, fn: Callable[[], Any]) -> tuple[Any, float]:
    engine.synchronize()
    t0 = time.perf_counter()
    out = fn()
    engine.synchronize()
    return out, time.perf_counter() - t0


class _Words:
    """Fresh synthetic messages (never repeated, so nothing matches beyond what is meant to)."""

    def __init__(self, vocab: tuple[str, ...]) -> None:
        self.vocab = vocab
        self.seed = 10_000

    def message(self, role: str, n: int, **extra: Any) -> dict[str, Any]:
        self.seed += 1
        return {"role": role, "content": render(word_ids(self.seed, 0, role, n, 0.0), self.vocab), **extra}

    def conversation(self, n: int) -> list[dict[str, Any]]:
        """About ``n`` tokens of a workload-shaped history: a system prompt, then alternating
        assistant messages and tool outputs (the first turn's user message included)."""
        out = [self.message("system", min(64, n)), self.message("user", 32)]
        left = n - 96
        while left > 0:
            out.append(self.message("assistant", min(16, left)))
            out.append(self.message("tool", min(112, max(1, left - 16)), name="python"))
            left -= 128
        return out


def _prefill_points(engine: Engine, words: _Words, contexts: Sequence[int], sizes: Sequence[int],
                    repeats: int) -> list[dict[str, Any]]:
    bases = {}
    for ctx in contexts:
        base = words.conversation(ctx) if ctx else []
        if base:
            engine.prefill(base)
        bases[ctx] = base
    raw: dict[tuple[int, int], list[tuple[int, int, float]]] = {}
    for _ in range(repeats):
        for ctx in contexts:
            for n in sizes:
                messages = [*bases[ctx], words.message("user", n)]
                g, dt = _timed(engine, partial(engine.start, messages, max_tokens=1, ignore_eos=True))
                engine.finish(g)
                raw.setdefault((ctx, n), []).append((g.usage.prefill_tokens, g.usage.prompt_tokens, dt))
    return [{"context": ctx, "new": n, "computed": samples[0][0], "prompt": samples[0][1],
             "seconds": statistics.median(s[2] for s in samples), "samples": [round(s[2], 6) for s in samples]}
            for (ctx, n), samples in raw.items()]


def _decode_points(engine: Engine, words: _Words, batches: Sequence[int], contexts: Sequence[int], steps: int,
                   repeats: int) -> tuple[list[dict[str, Any]], list[float]]:
    """Decode steps of each batch size at each prompt length: the steps that go on (a forward pass
    for every sequence) and the last one (every sequence finishes: no forward pass)."""
    raw: dict[tuple[int, int, bool], list[tuple[int, float]]] = {}
    finishes: list[float] = []
    for _ in range(repeats):
        for ctx in contexts:
            for b in batches:
                gens: list[Generation] = [
                    engine.start([words.message("user", ctx)], max_tokens=steps + 1, ignore_eos=True)
                    for _ in range(b)]
                while not all(g.done for g in gens):
                    last = all(len(g.tokens) + 1 >= g.request.sampling.max_tokens for g in gens)
                    context = 0 if last else sum(g.usage.prompt_tokens + len(g.tokens) for g in gens)
                    _, dt = _timed(engine, partial(engine.step, gens))
                    raw.setdefault((ctx, b, last), []).append((context, dt))
                for g in gens:
                    _, dt = _timed(engine, partial(engine.finish, g))
                    finishes.append(dt)
    points = [{"context": ctx, "batch": b, "forward": 0 if last else b,
               "context_tokens": int(statistics.median(c for c, _ in s)),
               "seconds": statistics.median(t for _, t in s), "samples": len(s)} for (ctx, b, last), s in raw.items()]
    return points, finishes


def wake_cost(engine: Engine, words: _Words, repeats: int, idle_s: float = 0.2) -> tuple[float, list[float]]:
    """Median extra seconds of a 64-token request's start after ``idle_s`` of idleness, over the
    same start back to back (pairs interleaved; never negative)."""
    cold: list[float] = []
    warm: list[float] = []
    for _ in range(repeats):
        for after_idle in (False, True):
            if after_idle:
                time.sleep(idle_s)
            g, dt = _timed(engine, partial(engine.start, [words.message("user", 64)], max_tokens=1, ignore_eos=True))
            engine.finish(g)
            (cold if after_idle else warm).append(dt)
    w, c = statistics.median(warm), statistics.median(cold)
    return max(0.0, c - w), [w, c]


def _probe(engine: Engine, words: _Words) -> float:
    """Median seconds of three 128-token starts: taken first and last, their ratio shows a machine
    whose speed changed during the measurement."""
    times = []
    for _ in range(3):
        g, dt = _timed(engine, partial(engine.start, [words.message("user", 128)], max_tokens=1, ignore_eos=True))
        engine.finish(g)
        times.append(dt)
    return statistics.median(times)


def _residuals(points: list[dict[str, Any]], predict: Callable[[dict[str, Any]], float]) -> float:
    worst = 0.0
    for p in points:
        p["fit_seconds"] = round(predict(p), 6)
        p["rel_error"] = round(p["fit_seconds"] / p["seconds"] - 1.0, 4)
        worst = max(worst, abs(p["rel_error"]))
    return worst


def calibrate(engine: Engine, *, quick: bool = False, repeats: int = 5, max_batch: int = 4,
              progress: Callable[[str], None] | None = None) -> Calibration:
    """Measure ``engine`` (on a scratch cache: its own is put back after; every turn generates its
    full length, end-of-sequence ignored). ``quick``: a small grid (for tests), not a calibration to keep.

    Raises:
        WorkloadError: ``repeats`` or ``max_batch`` below 1.
    """
    if repeats < 1 or max_batch < 1:
        raise WorkloadError(f"repeats and max_batch must be >= 1, got {repeats} and {max_batch}",
                            field="repeats", value=repeats)
    say = progress or (lambda _msg: None)
    vocab = vocabulary(engine.tokenizer)
    words = _Words(vocab)
    limit = engine.max_context - 64
    contexts = [c for c in ((0, 256) if quick else (0, 512, 2048)) if c < limit]
    sizes = [n for n in ((16, 64) if quick else (16, 128, 512)) if n < limit]
    batches = [b for b in (1, 2, 4, 8, 16) if b <= max_batch]
    dec_contexts = (32, 256) if quick else (32, 512)
    t_begin, load_before = time.perf_counter(), _load()
    with engine.scratch_cache(1 << 40, 1 << 40):
        say("warming up")
        for n in (32, 128):
            g = engine.start([words.message("user", n)], max_tokens=3, ignore_eos=True)
            while not g.done:
                engine.step([g])
            engine.finish(g)
        probe_before = _probe(engine, words)
        say(f"prefill: contexts {contexts} x new tokens {sizes} x {repeats} repeats")
        pre = _prefill_points(engine, words, contexts, sizes, repeats)
        say(f"decode: batches {batches} x contexts {list(dec_contexts)} x {repeats} repeats")
        dec, finishes = _decode_points(engine, words, batches, dec_contexts, 4 if quick else 8, repeats)
        say("swap bandwidth, wake-up cost")
        swap = engine.swap_bandwidth()
        wake, wake_points = wake_cost(engine, words, max(3, repeats))
        probe_after = _probe(engine, words)
    prefill = nonneg_fit(np.asarray([[1.0, p["computed"], p["computed"] * p["prompt"], p["prompt"]] for p in pre]),
                         np.asarray([p["seconds"] for p in pre]))
    y = np.asarray([p["seconds"] for p in dec])
    if len(batches) > 1:
        decode = nonneg_fit(np.asarray([[1.0, p["batch"], p["forward"] > 0, p["forward"], p["context_tokens"]]
                                        for p in dec], dtype=float), y)
    else:  # one batch size: the per-sequence costs are in the constants
        d0, d2, d4 = nonneg_fit(np.asarray([[1.0, p["forward"] > 0, p["context_tokens"]] for p in dec], dtype=float), y)
        decode = [d0, 0.0, d2, 0.0, d4]
    timing = Timing((prefill[0], prefill[1], prefill[2], prefill[3]),
                    (decode[0], decode[1], decode[2], decode[3], decode[4]), statistics.median(finishes), swap, wake)
    pre_err = _residuals(pre, lambda p: timing.t_start(p["computed"], p["prompt"]))
    dec_err = _residuals(dec, lambda p: timing.t_step(p["batch"], p["forward"], p["context_tokens"]))
    date = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    dtype, device, threads = str(engine.model.dtype).removeprefix("torch."), str(engine.model.device), \
        torch.get_num_threads()
    cpus = os.cpu_count() or 1
    drift = probe_after / probe_before - 1.0
    warnings = []
    if load_before is not None and load_before > BUSY_LOAD * cpus:
        warnings.append(f"load average {load_before} on {cpus} CPUs before the measurement")
    if abs(drift) > MAX_DRIFT:
        warnings.append(f"the same request took {drift:+.0%} longer at the end than at the start")
    worst = max(pre_err, dec_err)
    if worst > MAX_RESIDUAL:
        warnings.append(f"a measured point is {worst:.0%} off the fit")
    machine = {"measured": True, "dtype": dtype, "device": device, "threads": threads, "date": date,
               "host": platform.node(), "cpus": cpus, "processor": platform.processor() or platform.machine(),
               "load_before": load_before, "load_after": _load(), "seconds": round(time.perf_counter() - t_begin, 1),
               "quick": quick, "repeats": repeats, "probe_s": [round(probe_before, 6), round(probe_after, 6)],
               "warnings": warnings}
    source = f"measured: {engine.name} {dtype} on {device}, {threads} threads, {date[:10]}"
    cost = timing.cost_model(engine.geometry.bytes_per_token, source)
    points = {"prefill": pre, "decode": dec, "finish_samples": len(finishes), "swap_bytes_per_s": swap,
              "wake": {"start_warm_s": wake_points[0], "start_after_idle_s": wake_points[1]},
              "max_rel_error": {"prefill": pre_err, "decode": dec_err}}
    chat = ChatTokens.from_renderer(engine.renderer, vocab)
    return Calibration(engine.name, cost, timing, chat, machine, points)


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None
