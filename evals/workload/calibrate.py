"""Calibration of the simulator from the real engine: prefill, decode and swap speeds, template sizes.

:func:`calibrate` measures, on the engine it is given:

- prefill: wall time of ``Engine.start`` (render, plan, prefill, commit) for n new tokens after
  ``ctx`` stored ones, over a small grid; least squares fit of ``c0 + c1*n + c2*n*(ctx + n)``;
- decode: wall time of one ``Engine.step`` for batches of 1, 2 and 4; fit of ``d0 + d1*b``; and
  the time of ``Engine.finish`` (storing the generated KV, releasing locks);
- swap: the time to move a 256-token payload to the host tier and back (on a CPU-only machine the
  host tier is the same memory under another budget, so this is bookkeeping, and fast);
- template: the tokens a chat template adds to the system prompt, the first request and each
  later turn (the simulator counts prompts without a tokenizer).

The result is a :class:`Calibration` (JSON; ``bench/results/survival-calibration-<model>.json``).
Negative fitted coefficients are refitted without their term, so times never decrease with size.
:func:`fit_calibration` fits the same model from the per-turn timings a replay recorded
(``replay(...)["samples"]``): *in-situ* calibration, under the machine's load at that time.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.engine import Engine
from engine.kvstore import TensorKV
from engine.radix import RadixTree
from engine.survival import CostModel
from evals.workload.text import render, vocabulary, word_ids
from evals.workload.trace import WorkloadError

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


@dataclass(frozen=True)
class TemplateTokens:
    """Tokens a chat template adds: to the shared system prompt (``system``), to the first request
    beyond the system part and the task (``first``; ``first_no_system`` without a system prompt),
    and to each later request beyond the previous output and the new input (``turn``)."""

    system: int = 6
    first: int = 6
    first_no_system: int = 7
    turn: int = 8


@dataclass(frozen=True)
class Calibration:
    """Measured speeds of one model on one machine (see the module docstring)."""

    model: str
    cost: CostModel
    template: TemplateTokens = field(default_factory=TemplateTokens)
    finish_s: float = 0.0
    points: Mapping[str, Any] = field(default_factory=dict)

    def wire(self) -> dict[str, Any]:
        return {"model": self.model, "cost": self.cost.wire(), "template": self.template.__dict__,
                "finish_s": self.finish_s, "points": dict(self.points)}

    @classmethod
    def from_wire(cls, raw: Any) -> Calibration:
        if not isinstance(raw, Mapping):
            raise WorkloadError("a calibration must be a JSON object", field="calibration", value=None)
        try:
            return cls(str(raw["model"]), CostModel.from_wire(raw["cost"]), TemplateTokens(**raw["template"]),
                       float(raw.get("finish_s", 0.0)), dict(raw.get("points", {})))
        except (KeyError, TypeError, ValueError) as err:
            raise WorkloadError(f"malformed calibration: {err}", field="calibration", value=None) from err

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.wire(), indent=1) + "\n", encoding="utf-8")
        return p


def load_calibration(path: str | Path) -> Calibration:
    p = Path(path)
    if not p.is_file():
        raise WorkloadError(f"calibration {str(p)!r} does not exist", field="calibration", value=str(p))
    try:
        return Calibration.from_wire(json.loads(p.read_text(encoding="utf-8")))
    except json.JSONDecodeError as err:
        raise WorkloadError(f"calibration {str(p)!r} is not JSON: {err.msg}", field="calibration",
                            value=str(p)) from None


def default_calibration(model: str = "gemma-3-270m") -> Calibration:
    """The stored calibration of ``model`` on this machine, or figures from MEASURED.md (labelled)."""
    p = RESULTS / f"survival-calibration-{model}.json"
    if p.is_file():
        return load_calibration(p)
    return Calibration(model, CostModel())


def _fit(x: np.ndarray, y: np.ndarray) -> list[float]:
    """Least squares with non-negative coefficients (drop a negative term and refit)."""
    cols = list(range(x.shape[1]))
    while True:
        coef, *_ = np.linalg.lstsq(x[:, cols], y, rcond=None)
        bad = [c for c, v in zip(cols, coef) if v < 0]
        if not bad or len(cols) == 1:
            out = [0.0] * x.shape[1]
            for c, v in zip(cols, coef):
                out[c] = max(0.0, float(v))
            return out
        cols.remove(bad[-1])


def _msg(role: str, seed: int, n: int, vocab: tuple[str, ...]) -> dict[str, Any]:
    return {"role": role, "content": render(word_ids(seed, 0, role, n, 0.0), vocab)}


def _template(engine: Engine, vocab: tuple[str, ...]) -> TemplateTokens:
    def count(messages: list[dict[str, Any]]) -> int:
        return sum(1 for it in engine.layout(messages).items if isinstance(it, int))

    sys_msg, user = _msg("system", 1, 10, vocab), _msg("user", 2, 10, vocab)
    asst, tool = _msg("assistant", 3, 10, vocab), {**_msg("tool", 4, 10, vocab), "name": "python"}
    system = len(engine.render([sys_msg]).token_ids) - 10
    first = count([sys_msg, user]) - (10 + system) - 10
    first_no = count([user]) - 10
    turn = count([sys_msg, user, asst, tool]) - count([sys_msg, user]) - 20
    return TemplateTokens(system, first, first_no, turn)


def fit_calibration(engine: Engine, samples: Mapping[str, Any]) -> Calibration:
    """Fit prefill, decode and finish times from a replay's recorded ``samples`` (see the module
    docstring); the template sizes and swap bandwidth are measured on ``engine`` as in :func:`calibrate`.

    Raises:
        WorkloadError: too few samples to fit.
    """
    pre, dec, fin = samples.get("prefill") or [], samples.get("decode") or [], samples.get("finish") or []
    if len(pre) < 3 or len({b for b, _ in dec}) < 1:
        raise WorkloadError("fit_calibration: a replay with at least 3 turns is needed", field="samples",
                            value=len(pre))
    prefill = _fit(np.asarray([[1.0, c, c * p] for c, p, _ in pre], dtype=float),
                   np.asarray([t for *_, t in pre], dtype=float))
    decode = _fit(np.asarray([[1.0, b] for b, _ in dec], dtype=float), np.asarray([t for _, t in dec], dtype=float))
    cost = CostModel((prefill[0], prefill[1], prefill[2]), (decode[0], decode[1]), _swap_bandwidth(engine),
                     engine.geometry.bytes_per_token,
                     f"measured in-situ: {engine.name}, fitted on {len(pre)} prefills and {len(dec)} decode steps of "
                     f"a replay, {time.strftime('%Y-%m-%d')}")
    return Calibration(engine.name, cost, _template(engine, vocabulary(engine.tokenizer)),
                       statistics.median(fin) if fin else 0.0,
                       {"prefill_samples": len(pre), "decode_samples": len(dec)})


def calibrate(engine: Engine, *, quick: bool = False, repeats: int = 3) -> Calibration:
    """Measure ``engine`` (its tree is replaced during the measurement and restored after)."""
    vocab = vocabulary(engine.tokenizer)
    saved, saved_stop = engine.tree, engine.stop_ids
    engine.tree, engine.stop_ids = RadixTree(1 << 40, 1 << 40), set()
    seed = 1000
    try:
        engine.chat([_msg("user", 999, 32, vocab)], max_tokens=2)  # warm up
        rows, times = [], []
        for ctx in ((0, 256) if quick else (0, 512, 1024)):
            for n in ((32, 128) if quick else (32, 128, 512)):
                point = []
                for _ in range(repeats):
                    seed += 1
                    base = [_msg("system", seed, ctx, vocab)] if ctx else []
                    if base:
                        engine.prefill(base)
                    messages = [*base, _msg("user", seed, n, vocab)]
                    t0 = time.perf_counter()
                    g = engine.start(messages, max_tokens=1)
                    point.append(time.perf_counter() - t0)
                    engine.finish(g)
                computed, prompt = g.usage.prefill_tokens, g.usage.prompt_tokens
                rows.append([1.0, computed, computed * prompt])
                times.append(statistics.median(point))  # robust to a busy machine
        prefill = _fit(np.asarray(rows), np.asarray(times))
        steps, finishes = [], []
        for b in (1, 2, 4):
            gens = []
            for _ in range(b):
                seed += 1
                gens.append(engine.start([_msg("user", seed, 48, vocab)], max_tokens=6))
            engine.step(gens)  # the first step samples from the prefill's state
            per = []
            while not all(g.done for g in gens):
                t0 = time.perf_counter()
                engine.step(gens)
                per.append(time.perf_counter() - t0)
            for g in gens:
                t0 = time.perf_counter()
                engine.finish(g)
                finishes.append(time.perf_counter() - t0)
            steps.append((b, statistics.median(per)))
        decode = _fit(np.asarray([[1.0, b] for b, _ in steps]), np.asarray([t for _, t in steps]))
        swap_bw = _swap_bandwidth(engine)
    finally:
        engine.tree, engine.stop_ids = saved, saved_stop
    cost = CostModel((prefill[0], prefill[1], prefill[2]), (decode[0], decode[1]), swap_bw,
                     engine.geometry.bytes_per_token,
                     f"measured: {engine.name}, {torch.get_num_threads()} threads, {time.strftime('%Y-%m-%d')}")
    points = {"prefill": [[r[1], r[2] / max(1, r[1]) - r[1], t] for r, t in zip(rows, times)],
              "decode": [[b, t] for b, t in steps], "swap_bytes_per_s": swap_bw}
    return Calibration(engine.name, cost, _template(engine, vocab), statistics.median(finishes), points)


def _swap_bandwidth(engine: Engine, n: int = 256) -> float:
    g = engine.geometry
    tree = RadixTree(1 << 40, 1 << 40)
    dev = engine.model.device
    kv = TensorKV(torch.zeros(g.n_layers, g.n_kv_heads, n, g.head_dim, device=dev, dtype=engine.model.dtype),
                  torch.zeros(g.n_layers, g.n_kv_heads, n, g.head_dim, device=dev, dtype=engine.model.dtype), str(dev))
    node = tree.extend(tree.root, list(range(n)), kv)
    moves = []
    for _ in range(5):
        t0 = time.perf_counter()
        tree.swap_out(node)
        tree.swap_in(node)
        moves.append((time.perf_counter() - t0) / 2)
    return float(kv.nbytes / max(statistics.median(moves), 1e-9))
