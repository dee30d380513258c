"""Calibrations: how long the engine's work takes on one machine, and the token ids of its chat template.

A :class:`Calibration` describes one model on one machine (model, dtype, device, torch threads,
date: ``machine``). It holds

- :class:`Timing`, the simulator's clock: seconds of a request's start (render, plan, prefill,
  commit; ``a + b*n + c*n*p + e*p`` for ``n`` computed tokens of a ``p``-token prompt), of one
  decode step (``d0 + d1*batch``: every sequence of the batch picks a token; plus, when ``forward``
  of them go on, ``d2 + d3*forward + d4*context``: one forward pass over their new tokens,
  attending to ``context`` tokens in all), of a request's finish, the pool <-> host bandwidth,
  and the extra time of the first request after the engine sat idle (``wake_s``: caches and
  threads gone cold while every session waited on a tool);
- the :class:`engine.survival.CostModel` that survival policies price recompute and swaps with
  (derived from the timing when measured);
- :class:`evals.survival.chat.ChatTokens`, so that the simulator builds the engine's exact histories.

``akv workload calibrate`` measures one (``evals.survival.calibrate``); files live in
``bench/results/survival-calibration-<model>.json``. This module holds the data and its checks only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.files import atomic_write
from engine.survival import CostModel, SurvivalError
from evals.survival.chat import ChatTokens
from evals.survival.trace import WorkloadError, read_text

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
FORMAT = "akv-calibration/2"
IDLE_S = 0.01
"""A wait of at least this long makes the next request pay ``Timing.wake_s``."""


def _coefs(raw: Any, n: int, where: str) -> tuple[float, ...]:
    if not isinstance(raw, list | tuple) or len(raw) != n:
        raise WorkloadError(f"calibration: {where} must be a list of {n} numbers, got {raw!r}", field=where, value=raw)
    out = []
    for i, x in enumerate(raw):
        if isinstance(x, bool) or not isinstance(x, int | float) or not x >= 0 or x == float("inf"):
            raise WorkloadError(f"calibration: {where}[{i}] must be a finite number >= 0, got {x!r}",
                                field=where, value=x)
        out.append(float(x))
    return tuple(out)


@dataclass(frozen=True)
class Timing:
    """Seconds of the engine's work as the run loop sees it (see the module docstring).

    Attributes:
        prefill: (a, b, c, e): a request's start takes ``a + b*n + c*n*p + e*p`` for ``n`` computed
            tokens of a ``p``-token prompt (``a``: per-request overhead; ``e``: rendering and
            gathering the stored context).
        decode: (d0, d1, d2, d3, d4): one decode step of ``batch`` sequences, ``forward`` of which
            run the model over their new token (those not finishing) attending to ``context``
            tokens in all, takes ``d0 + d1*batch``, plus ``d2 + d3*forward + d4*context`` when
            ``forward > 0`` (a forward pass has a fixed cost: reading the weights).
        finish_s: a request's finish (storing the generated KV, releasing locks).
        swap_bytes_per_s: pool <-> host copy bandwidth.
        wake_s: added to the first request's start after the engine waited ``IDLE_S`` or more.
    """

    prefill: tuple[float, float, float, float]
    decode: tuple[float, float, float, float, float]
    finish_s: float
    swap_bytes_per_s: float
    wake_s: float = 0.0

    def __post_init__(self) -> None:
        _coefs(list(self.prefill), 4, "timing.prefill")
        _coefs(list(self.decode), 5, "timing.decode")
        _coefs([self.finish_s, self.wake_s], 2, "timing.finish_s, timing.wake_s")
        if not self.swap_bytes_per_s > 0:
            raise WorkloadError(f"calibration: timing.swap_bytes_per_s must be > 0, got {self.swap_bytes_per_s!r}",
                                field="timing.swap_bytes_per_s", value=self.swap_bytes_per_s)

    def t_start(self, computed: int, prompt: int) -> float:
        a, b, c, e = self.prefill
        return a + b * computed + c * computed * prompt + e * prompt

    def t_step(self, batch: int, forward: int, context: int) -> float:
        if batch <= 0:
            return 0.0
        d0, d1, d2, d3, d4 = self.decode
        return d0 + d1 * batch + (d2 + d3 * forward + d4 * context if forward > 0 else 0.0)

    def t_swap(self, nbytes: int) -> float:
        return max(0, nbytes) / self.swap_bytes_per_s

    def cost_model(self, bytes_per_token: int, source: str, context: int = 1024) -> CostModel:
        """The policies' view: prefill ``(a, b + e, c)`` (exact for a recompute from scratch) and
        decode ``(d0 + d2, d1 + d3 + d4*context)`` (steps of sequences of ``context`` tokens that go on)."""
        a, b, c, e = self.prefill
        d0, d1, d2, d3, d4 = self.decode
        return CostModel((a, b + e, c), (d0 + d2, d1 + d3 + d4 * context), self.swap_bytes_per_s, bytes_per_token,
                         source)

    def scaled(self, factor: float) -> Timing:
        """Every time ``factor`` times longer (a machine that slow or fast)."""
        return Timing(tuple(x * factor for x in self.prefill), tuple(x * factor for x in self.decode),  # type: ignore[arg-type]
                      self.finish_s * factor, self.swap_bytes_per_s / factor, self.wake_s * factor)

    @classmethod
    def of_cost(cls, cost: CostModel, finish_s: float = 0.0) -> Timing:
        """The timing a cost model states (no context terms)."""
        c0, c1, c2 = cost.prefill
        return cls((c0, c1, c2, 0.0), (cost.decode[0], 0.0, 0.0, cost.decode[1], 0.0), finish_s,
                   cost.swap_bytes_per_s)

    def wire(self) -> dict[str, Any]:
        return {"prefill": list(self.prefill), "decode": list(self.decode), "finish_s": self.finish_s,
                "swap_bytes_per_s": self.swap_bytes_per_s, "wake_s": self.wake_s}

    @classmethod
    def from_wire(cls, raw: Any) -> Timing:
        if not isinstance(raw, Mapping):
            raise WorkloadError("calibration: timing must be an object", field="timing", value=None)
        p = _coefs(raw.get("prefill"), 4, "timing.prefill")
        d = _coefs(raw.get("decode"), 5, "timing.decode")
        f = _coefs([raw.get("finish_s", 0.0)], 1, "timing.finish_s")[0]
        s = _coefs([raw.get("swap_bytes_per_s")], 1, "timing.swap_bytes_per_s")[0]
        w = _coefs([raw.get("wake_s", 0.0)], 1, "timing.wake_s")[0]
        return cls((p[0], p[1], p[2], p[3]), (d[0], d[1], d[2], d[3], d[4]), f, s, w)


@dataclass(frozen=True)
class Calibration:
    """One model on one machine (see the module docstring).

    Attributes:
        model: the engine's model name.
        cost: the policies' cost model.
        timing: the simulator's clock.
        chat: the template's and the workload vocabulary's token ids.
        machine: what was measured where: dtype, device, threads, date, host, load (free-form).
        points: the raw measurements and the fit's residuals.
    """

    model: str
    cost: CostModel
    timing: Timing
    chat: ChatTokens = field(default_factory=ChatTokens.generic)
    machine: Mapping[str, Any] = field(default_factory=dict)
    points: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def assumed(cls, model: str, cost: CostModel, finish_s: float = 0.0, chat: ChatTokens | None = None) -> Calibration:
        """A calibration stated rather than measured: the timing is ``cost``'s (label ``cost.source``)."""
        return cls(model, cost, Timing.of_cost(cost, finish_s), chat or ChatTokens.generic(),
                   {"measured": False, "source": cost.source})

    @property
    def measured(self) -> bool:
        return bool(self.machine.get("measured", False))

    def wire(self) -> dict[str, Any]:
        return {"format": FORMAT, "model": self.model, "machine": dict(self.machine), "timing": self.timing.wire(),
                "cost": self.cost.wire(), "chat": self.chat.wire(), "points": dict(self.points)}

    @classmethod
    def from_wire(cls, raw: Any) -> Calibration:
        if not isinstance(raw, Mapping):
            raise WorkloadError("a calibration must be a JSON object", field="calibration", value=None)
        if raw.get("format") != FORMAT:
            raise WorkloadError(f"calibration format {raw.get('format')!r} is not {FORMAT!r}; measure a new one with "
                                "`akv workload calibrate --model M`", field="format", value=raw.get("format"))
        try:
            cost = CostModel.from_wire(raw["cost"])
            machine, points = raw.get("machine", {}), raw.get("points", {})
            if not isinstance(machine, Mapping) or not isinstance(points, Mapping):
                raise TypeError("machine and points must be objects")
            return cls(str(raw["model"]), cost, Timing.from_wire(raw["timing"]), ChatTokens.from_wire(raw["chat"]),
                       dict(machine), dict(points))
        except (KeyError, TypeError, SurvivalError) as err:
            raise WorkloadError(f"malformed calibration: {err}", field="calibration", value=None) from err

    def summary(self) -> str:
        """One line of the headline numbers. A per-token prefill time the fit put at zero (a tiny model
        whose fixed overhead hides it) reads as below the fit's resolution rather than being divided by."""
        t = self.timing
        per_token = t.prefill[1] + t.prefill[3]
        rate = f"{1 / per_token:.0f} tok/s" if per_token > 0 else "per-token time below the fit's resolution"
        errors = self.points.get("max_rel_error") or {}
        worst = f"{max(errors.values()):.0%}" if errors else "n/a"
        return (f"prefill {rate} from scratch (+{t.prefill[0] * 1e3:.1f} ms a request), decode step "
                f"{t.t_step(1, 1, 512) * 1e3:.0f} ms (1 sequence, 512 tokens), finish {t.finish_s * 1e3:.1f} ms, "
                f"swap {t.swap_bytes_per_s / 1e9:.1f} GB/s; worst fit error {worst}")

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        atomic_write(p, (json.dumps(self.wire(), indent=1) + "\n").encode("utf-8"))
        return p

    def check_model(self, model: str, force: bool = False, where: str = "the calibration") -> None:
        """Refuse a calibration of another model (unless ``force``).

        Raises:
            WorkloadError: ``model`` is not the calibration's.
        """
        if not force and self.model != model:
            raise WorkloadError(f"{where} was made for model {self.model!r}, not {model!r} (pass --model "
                                f"{self.model} or --force)", field="model", value=model)


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration file.

    Raises:
        WorkloadError: a missing, unreadable or malformed file (names it).
    """
    p = Path(path)
    text = read_text(p, "calibration")
    try:
        return Calibration.from_wire(json.loads(text))
    except json.JSONDecodeError as err:
        raise WorkloadError(f"calibration {str(p)!r} is not JSON: {err.msg}", field="calibration",
                            value=str(p)) from None
    except WorkloadError as err:
        raise WorkloadError(f"calibration {str(p)!r}: {err}", field=err.field, value=err.value) from None


def assumed_gpu() -> Calibration:
    """Cluster-scale speeds, *assumed* (stated, not measured here): an H100-class GPU serving an 8B
    model in fp16 -- ~10k prefill tokens/s, 25 ms decode steps, 128 KiB of KV per token, PCIe 5."""
    return Calibration.assumed("llama-3-8b (assumed)", CostModel(
        (0.005, 1.0e-4, 2.0e-9), (0.025, 2.0e-4), 25e9, 131_072,
        "assumed: H100-class GPU, 8B model fp16 (10k prefill tok/s, 25 ms decode step, PCIe 25 GB/s)"), 0.0005)


def stored_path(model: str) -> Path:
    """Where ``akv workload calibrate`` stores ``model``'s calibration."""
    return RESULTS / f"survival-calibration-{Path(model).name}.json"


def default_calibration(model: str = "gemma-3-270m") -> Calibration:
    """The stored calibration of ``model`` on this machine, or MEASURED.md's figures (labelled assumed)."""
    p = stored_path(model)
    if p.is_file():
        return load_calibration(p)
    return Calibration.assumed(model, CostModel())
