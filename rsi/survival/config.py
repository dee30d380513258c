"""The config of a survival evolution (``akv survival-search --evolve CONFIG``), read and checked.

:func:`load_config` reads YAML, :func:`config_from_dict` checks every field (an unknown or bad one
raises :class:`EvolveConfigError` naming it), :func:`config_from_dict_json` reads back a run's
``config.json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.errors import AKVError, show
from engine.files import read_text
from evals.survival.generate import KINDS
from rsi.config import RUN_NAME_RULE, ProposerConfig, is_run_name
from search_spaces.survival import (
    SURVIVAL_FAMILIES,
    SURVIVAL_SEEDS,
    get_survival_family,
)


class EvolveConfigError(AKVError):
    """A survival-evolution config that cannot run (the message names the field)."""


@dataclass(frozen=True)
class TraceSet:
    """Traces of ``kinds`` x ``seeds`` with ``sessions`` sessions each (``evals.survival.generate_trace``)."""

    kinds: tuple[str, ...]
    seeds: tuple[int, ...]
    sessions: int
    time_scale: float = 1.0
    token_scale: float = 1.0

    def ids(self) -> list[tuple[str, int]]:
        return [(k, s) for k in self.kinds for s in self.seeds]


@dataclass(frozen=True)
class EvolveConfig:
    """A survival-evolution run (see ``experiments/survival-evolve.yaml`` for every field)."""

    train: TraceSet
    heldout: TraceSet
    name: str = "survival-evolve"
    seed: int = 0
    calibration: str = "assumed-gpu"
    pool_tokens: int | None = None
    host_tokens: int | None = None
    max_batch: int = 4
    seeds: tuple[str, ...] = SURVIVAL_SEEDS
    families: tuple[str, ...] = tuple(SURVIVAL_FAMILIES)
    generations: int = 2
    per_generation: int = 4
    parents: int = 3
    trials: int = 8
    cascade_traces: int = 1
    max_calls_per_turn: int = 20
    bootstrap_samples: int = 2000
    tracking: bool = True
    llm: ProposerConfig | None = None  # proposer.kind: llm (None: the mutation proposer)
    ablation: bool = False  # the tuning-only arm after the generations (rsi.loop.run_arm), a headline comparator

    def to_dict(self) -> dict[str, Any]:
        d = json.loads(json.dumps(asdict(self)))
        if d["llm"] is None:
            del d["llm"]  # (config.json of a mutation run reads as before the field existed)
        if not d["ablation"]:
            del d["ablation"]  # (the same for a run without the tuning-only arm)
        return d


_TOP = {"name", "seed", "train", "heldout", "simulator", "seeds", "families", "generations", "proposer", "optuna",
        "cascade", "bootstrap_samples", "tracking", "ablation"}


def _int(raw: Mapping[str, Any], key: str, where: str, default: int, low: int) -> int:
    v = raw.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise EvolveConfigError(f"{where}{key} must be an integer >= {low}, got {show(v)}", field=key, value=v)
    return v


def _section(raw: Mapping[str, Any], key: str, allowed: set[str]) -> Mapping[str, Any]:
    v = raw.get(key, {})
    if not isinstance(v, Mapping):
        raise EvolveConfigError(f"{key} must be a mapping, got {show(v)}", field=key, value=v)
    extra = set(v) - allowed
    if extra:
        raise EvolveConfigError(f"{key}: unknown field {sorted(extra)[0]!r}; valid fields: "
                                f"{', '.join(sorted(allowed))}", field=key, value=sorted(extra)[0])
    return v


def _traces(raw: Mapping[str, Any], key: str) -> TraceSet:
    sec = _section(raw, key, {"kinds", "seeds", "sessions", "time_scale", "token_scale"})
    kinds, seeds = sec.get("kinds"), sec.get("seeds")
    if not isinstance(kinds, list) or not kinds or any(k not in KINDS for k in kinds):
        raise EvolveConfigError(f"{key}.kinds must be a non-empty list of {', '.join(KINDS)}, got {show(kinds)}",
                                field=f"{key}.kinds", value=kinds)
    if not isinstance(seeds, list) or not seeds or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
        raise EvolveConfigError(f"{key}.seeds must be a non-empty list of integers, got {show(seeds)}",
                                field=f"{key}.seeds", value=seeds)
    scales = []
    for name in ("time_scale", "token_scale"):
        v = sec.get(name, 1.0)
        if isinstance(v, bool) or not isinstance(v, int | float) or not (math.isfinite(v) and v > 0):
            raise EvolveConfigError(f"{key}.{name} must be a positive number, got {show(v)}", field=f"{key}.{name}",
                                    value=v)
        scales.append(float(v))
    return TraceSet(tuple(kinds), tuple(seeds), _int(sec, "sessions", f"{key}.", 6, 1), scales[0], scales[1])


def config_from_dict(raw: Any) -> EvolveConfig:
    """Parse a config mapping (the YAML file's content).

    Raises:
        EvolveConfigError: an unknown or bad field (named), unknown seeds or families, or held-out
            traces that repeat a train trace.
    """
    if not isinstance(raw, Mapping):
        raise EvolveConfigError(f"a survival-evolve config is a mapping, got {show(raw)}", field="config", value=raw)
    extra = set(raw) - _TOP
    if extra:
        raise EvolveConfigError(f"unknown field {sorted(extra)[0]!r}; valid fields: {', '.join(sorted(_TOP))}",
                                field=sorted(extra)[0], value=sorted(extra)[0])
    train, held = _traces(raw, "train"), _traces(raw, "heldout")
    shared = set(train.ids()) & set(held.ids())
    if shared:
        kind, seed = sorted(shared)[0]
        raise EvolveConfigError(f"held-out trace {kind}/{seed} is also a train trace; held-out needs other seeds",
                                field="heldout.seeds", value=seed)
    sim = _section(raw, "simulator", {"calibration", "pool_tokens", "host_tokens", "max_batch",
                                      "max_calls_per_turn"})
    prop = _section(raw, "proposer", {"per_generation", "parents", "kind", *LLM_KEYS})
    llm = _llm(prop)
    opt = _section(raw, "optuna", {"trials"})
    cas = _section(raw, "cascade", {"traces"})
    seeds = tuple(raw.get("seeds", SURVIVAL_SEEDS))
    for s in seeds:
        if s not in SURVIVAL_SEEDS:
            raise EvolveConfigError(f"unknown survival seed {show(s)}; valid seeds: {', '.join(SURVIVAL_SEEDS)}",
                                    field="seeds", value=s)
    families = tuple(raw.get("families", SURVIVAL_FAMILIES))
    for f in families:
        get_survival_family(f)
    pools = []
    for key in ("pool_tokens", "host_tokens"):
        v = sim.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise EvolveConfigError(f"simulator.{key} must be an integer >= 0 or null, got {show(v)}",
                                    field=f"simulator.{key}", value=v)
        pools.append(v)
    cal = sim.get("calibration", "assumed-gpu")
    if not isinstance(cal, str) or not cal:
        raise EvolveConfigError(f"simulator.calibration must be 'assumed-gpu', a model name or a file, got {show(cal)}",
                                field="simulator.calibration", value=cal)
    tracking = raw.get("tracking", True)
    if not isinstance(tracking, bool):
        raise EvolveConfigError(f"tracking must be true or false, got {show(tracking)}", field="tracking",
                                value=tracking)
    name = raw.get("name", "survival-evolve")
    if not is_run_name(name):
        raise EvolveConfigError(f"name must be {RUN_NAME_RULE}, got {show(name)}", field="name", value=name)
    ablation = raw.get("ablation", False)
    if not isinstance(ablation, bool):
        raise EvolveConfigError(f"ablation must be true or false, got {show(ablation)}", field="ablation",
                                value=ablation)
    cascade = _int(cas, "traces", "cascade.", 1, 0)
    if cascade >= len(train.ids()):
        cascade = 0  # a first stage on every train trace is no cheaper stage
    return EvolveConfig(train, held, name, _int(raw, "seed", "", 0, 0), cal, pools[0], pools[1],
                        _int(sim, "max_batch", "simulator.", 4, 1), seeds, families,
                        _int(raw, "generations", "", 2, 0), _int(prop, "per_generation", "proposer.", 4, 1),
                        _int(prop, "parents", "proposer.", 3, 1), _int(opt, "trials", "optuna.", 8, 1), cascade,
                        _int(sim, "max_calls_per_turn", "simulator.", 20, 1),
                        _int(raw, "bootstrap_samples", "", 2000, 100), tracking, llm, ablation)


LLM_KEYS = frozenset({"base_url", "model", "api_key_env", "max_tokens", "temperature", "budget_usd", "budget_tokens",
                      "price_in", "price_out", "timeout_s"})
"""The ``proposer`` keys of ``kind: llm`` (as the cache search's ``rsi.config.ProposerConfig``)."""


def _llm(prop: Mapping[str, Any]) -> ProposerConfig | None:
    """The LLM proposer's settings (``None`` for ``kind: mutation``, the default)."""
    kind = prop.get("kind", "mutation")
    if kind not in ("mutation", "llm"):
        raise EvolveConfigError(f"proposer.kind must be mutation or llm, got {show(kind)}", field="proposer.kind",
                                value=kind)
    given = {k: v for k, v in prop.items() if k in LLM_KEYS}
    if kind == "mutation":
        if given:
            key = sorted(given)[0]
            raise EvolveConfigError(f"proposer.{key} is a setting of proposer.kind: llm, and kind is mutation",
                                    field=f"proposer.{key}", value=given[key])
        return None
    for key in ("base_url", "model"):
        if not isinstance(given.get(key), str) or not given[key]:
            raise EvolveConfigError(f"proposer.kind: llm needs proposer.{key}, got {show(given.get(key))}",
                                    field=f"proposer.{key}", value=given.get(key))
    try:
        return ProposerConfig(kind="llm", **given)
    except TypeError as err:
        raise EvolveConfigError(f"proposer: {err}", field="proposer", value=None) from None


def load_config(path: str | Path) -> EvolveConfig:
    """Read a YAML config (see :func:`config_from_dict`)."""
    import yaml

    p = Path(path)
    text = read_text(p, "config", EvolveConfigError)
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise EvolveConfigError(f"config {str(p)!r} is not YAML: {str(err).splitlines()[0]}", field="config",
                                value=str(p)) from None
    return config_from_dict(raw)


def config_from_dict_json(d: Mapping[str, Any]) -> EvolveConfig:
    """An :class:`EvolveConfig` from its ``to_dict`` form (``config.json``)."""
    fields: dict[str, Any] = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()
                              if k not in ("train", "heldout", "llm")}
    if d.get("llm") is not None:
        fields["llm"] = ProposerConfig(**d["llm"])
    return EvolveConfig(_trace_set(d["train"]), _trace_set(d["heldout"]), **fields)


def _trace_set(d: Mapping[str, Any]) -> TraceSet:
    return TraceSet(tuple(d["kinds"]), tuple(d["seeds"]), d["sessions"], d.get("time_scale", 1.0),
                    d.get("token_scale", 1.0))
