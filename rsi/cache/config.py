"""The cache search's configuration: one YAML file describes one experiment (frozen dataclasses,
resolved once). Its ``proposer`` section and the run-name rule are shared with the survival track
(``rsi.config``).

Every field has a default; a YAML file overrides any subset. Unknown keys are errors that name
the key and list the valid ones. ``resolve()`` fills "auto" values before the run starts, and the
resolved config is written to the run directory and logged once.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from engine.errors import AKVError
from engine.files import read_text
from engine.models.catalog import default_template
from engine.settings import cpu_has_native_bf16
from evals.cache.evaluator import EvalConfig
from evals.cache.probes import probe_format_for
from rsi.config import RUN_NAME_RULE, ConfigError, ProposerConfig, is_run_name

DTYPES = ("auto", "fast", "float32", "bfloat16", "float16")
PROPOSERS = ("mutation", "synthesis", "llm", "none", "random", "hillclimb")
ARMS = ("tuning-only", "random", "hillclimb")
"""Baseline arms a search can run beside its generations (``SearchConfig.ablation``)."""


@dataclass(frozen=True)
class ModelConfig:
    """The engine that answers probes. ``pool_gb``: its KV pool (shared by all evaluations).

    ``dtype``: weights and KV of the in-process engine (``auto``: float32 on CPU, bfloat16 on GPU
    replicas; ``fast``: bfloat16 also on a CPU that multiplies it natively, ``avx512_bf16`` or
    ``amx_bf16``, else as ``auto``); with ``executor.backend: remote``, the dtype of the server's KV
    cache. The resolved dtype is part of every evaluation's key (``SearchConfig.model_id``).
    ``template``: the chat template (unset: the model's own, ``chatml`` for qwen2.5-coder-1.5b, and
    ``plain`` for gemma-3-270m and local checkpoints); resolved when the config is built.
    """

    name: str = "gemma-3-270m"
    template: str = None  # type: ignore[assignment]  # resolved in __post_init__
    pool_gb: float = 2.0
    threads: int = 0
    dtype: str = "auto"

    def __post_init__(self) -> None:
        if self.template is None:
            object.__setattr__(self, "template", default_template(str(self.name), "plain"))


@dataclass(frozen=True)
class DataConfig:
    """Which tasks: suite name or path, how many per split (0 = all, chosen evenly by family), the
    longest task to use (tokens under the gemma template; 0 = no limit), and how many of the held-out
    split's evenly chosen tasks to skip first (``heldout_offset``: a later run can be judged on
    held-out tasks an earlier run never saw). ``guide_tasks``: train-split tasks after the
    ``train_tasks`` that the proposer reads at zero forwards only (its hindsight and its screen,
    with the full cache assumed to pass every probe and a dropped evidence to fail it): more
    evidence for choosing rules than the few tasks the model evaluates, none of it held out.
    ``heldout_reused``: every run of this config judges the same held-out tasks (the quickstart's), so
    its headline is a demonstration, not a blind result; the headline and the report say so."""

    suite: str = "default"
    train_tasks: int = 8
    heldout_tasks: int = 6
    max_task_tokens: int = 0
    heldout_offset: int = 0
    guide_tasks: int = 0
    heldout_reused: bool = False


@dataclass(frozen=True)
class EvalSettings:
    """Scoring (see ``evals.cache.evaluator.EvalConfig``). ``generate``: also score greedy answers;
    ``frame_guard``: every policy's drops wait until an assistant turn has read the message, and the
    system prompt and task are never dropped (``evals.cache.guard``); the oracle's bounds and the
    rule table are then judged under the guard too. ``fidelity_bound``: on a suite of agent logs
    (tasks without probes), a policy passes a conversation when no recorded assistant turn loses more
    than this much log-likelihood per token against the full cache (``evals.cache.log_fidelity``)."""

    rates: str = "gpt-oss-120b"
    scoring: str = "loglik"
    generate: bool = False
    lead_in: str = "verbatim"
    frame_guard: bool = False
    fidelity_bound: float = 0.5


@dataclass(frozen=True)
class OptunaConfig:
    """Tuning of each program's declared parameters (two objectives: cost down, pass rate up).

    Attributes:
        sampler: ``tpe`` or ``nsga2``.
        trials: trials per program.
        storage: ``sqlite`` (a file in the run dir), ``journal`` (a journal file, safe for many
            processes) or a database URL.
        fidelity_tasks: tasks of a first, partial evaluation; a trial whose partial result is
            dominated by the archive's front on the same tasks is pruned (0 disables).
    """

    sampler: str = "tpe"
    trials: int = 4
    storage: str = "sqlite"
    fidelity_tasks: int = 3


@dataclass(frozen=True)
class CascadeConfig:
    """The evaluation cascade (``evals.cache.fidelity``, ``rsi.cache.tuning.Screen``).

    Each program's parameters are first drawn ``trials`` times and screened at the zero-forward
    fidelity on every train task (exact cost; pass predicted from which evidence stays attended);
    at most ``promote`` sets that no other set beats by ``margin`` of predicted pass at no more
    cost go on to the model (``optuna.fidelity_tasks`` train tasks, then all of train), in place of
    ``optuna.trials`` model trials. The proxy needs two model evaluations per train task, made
    once (the ``full`` cache and the ``drop_evidence`` control). Held-out is always the model's.

    Attributes:
        enabled: use the cascade (off: every Optuna trial is a model trial, as before).
        trials: proxy trials per program.
        promote: most parameter sets per program that reach the model (more than one: the most
            accurate prediction, then the cheapest set predicted to reach each expert's predicted
            pass, then sets spread along cost; ``rsi.cache.tuning.promoted``).
        margin: predicted-pass margin of the promotion rule (0: the plain proxy front).
        check: after the last generation, how many screened parameter sets the model has not
            evaluated it evaluates on all of train, spread evenly over the predicted pass range,
            only to check the proxy (``rsi.cache.cascade.Cascade.sample``): the promoted sets
            alone cover a narrow range of predictions, where a rank correlation says little.
    """

    enabled: bool = False
    trials: int = 32
    promote: int = 2
    margin: float = 0.02
    check: int = 0


ORACLE_FEEDBACK = ("evidence", "model", "none")


@dataclass(frozen=True)
class OracleSettings:
    """The hindsight oracle in a search (``evals.cache.oracle``, ``evals.cache.headroom``).

    Attributes:
        heldout: measure the headroom on the held-out tasks at the end (the oracle's schedule and the
            rolling-drop bounds, with the model; ``headroom`` in ``headline.json``).
        feedback: what the proposers learn on train: ``evidence`` (the oracle's zero-forward start:
            each required probe's evidence), ``model`` (the oracle searched with the model, ``budget``
            evaluations per train task), ``none``.
        budget: model evaluations of the oracle's greedy search per task.
        bound_budget: model evaluations of the per-task rolling-drop bound per task.
        single_budget: candidate settings of the one-setting rolling-drop bound.
    """

    heldout: bool = False
    feedback: str = "evidence"
    budget: int = 8
    bound_budget: int = 3
    single_budget: int = 2


PLACEMENT = ("kind", "replicas", "ray_address", "timeout_s", "threads_per_replica", "gpus_per_replica", "routing")
"""The executor fields that say only where evaluations run: a resumed search may change them (its
results do not depend on them; the engine backend and its server do, so those stay fixed)."""


@dataclass(frozen=True)
class ExecutorConfig:
    """Where evaluations run: ``local`` (this process) or ``ray`` (replica actors), and on what engine.

    Attributes:
        backend: ``local``: the engine runs inside the replica (on its GPU with
            ``gpus_per_replica``); ``remote``: each replica launches a server from
            ``server_command`` (or attaches to one of ``server_urls``) and evaluates through
            ``engine.remote.RemoteEngine`` (docs/gpu.md).
        server_command: template with ``{port}`` (required), ``{model}``, ``{gpu}``, ``{host}``,
            ``{python}`` (``rsi.cache.command``), e.g. ``akv serve --model {model} --port {port}``.
        server_urls: existing servers, one per replica (round robin), instead of launching.
        server_log_dir: where launched servers write their logs ("" = ``<run dir>/servers``).
        server_health_timeout_s: how long a server may take to answer ``/health``.
        server_grace_s: seconds between SIGTERM and SIGKILL when a server is stopped.
        server_prefix_mode: how a probe's reply prefix reaches a server that is not ``akv serve``
            (``field`` refuses, ``continue_final_message``: a final assistant message to continue;
            see ``engine.remote``).
    """

    kind: str = "local"
    replicas: int = 2
    ray_address: str = ""
    timeout_s: float = 900.0
    threads_per_replica: int = 1
    gpus_per_replica: float = 0.0
    routing: str = "affinity"
    backend: str = "local"
    server_command: str = ""
    server_urls: tuple[str, ...] = ()
    server_log_dir: str = ""
    server_health_timeout_s: float = 900.0
    server_grace_s: float = 15.0
    server_prefix_mode: str = "field"


@dataclass(frozen=True)
class SearchConfig:
    """One experiment.

    Attributes:
        name: experiment name (MLflow experiment).
        seed: every random choice derives from it.
        generations: proposer generations after the seed generation.
        seeds: built-in families whose program sources seed the archive.
        experts: policies compared in the report (``name`` or ``name:k=v,k=v``).
        seed_from: an earlier run directory whose archive front seeds this search.
        heldout_front: how many front members (the most accurate on train) get a held-out evaluation
            once the picks are frozen, besides each comparator's cheapest match on train
            (``rsi.cache.headline``, ``rsi.cache.protocol``).
        tracking_uri: MLflow store ("" = sqlite in the run directory).
        tune_experts: also tune the tunable experts of ``experts`` (rolling drop's K, the
            summarizing baselines' window) on train with ``optuna.trials`` trials, and report the
            tuned setting beside the fixed one (``rsi.cache.expert_tuning``).
        bootstrap_samples: resamples of the paired bootstrap behind ``headline.json`` (``evals.paired``).
        ablation: after the generations, run baseline arms at the generations' model-evaluation budget
            (``rsi.cache.ablation``): ``true`` is ``[tuning-only]`` (the seed programs tuned again), or a
            list of :data:`ARMS` (``random``: independent programs from the synthesis grammar,
            ``hillclimb``: (1+1) hill climbing over it; ``rsi.cache.baselines``). Each arm's choice joins
            the headline under the arm's name.
    """

    name: str = "akv-search"
    seed: int = 0
    generations: int = 3
    seeds: tuple[str, ...] = ("rolling_drop", "scored_drop", "thinking_drop")
    experts: tuple[str, ...] = ("full", "rolling_drop:keep_tool_responses=12", "standard", "text_engineering")
    seed_from: str = ""
    heldout_front: int = 4
    tracking_uri: str = ""
    tune_experts: bool = True
    bootstrap_samples: int = 2000
    ablation: bool | tuple[str, ...] = False
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: EvalSettings = field(default_factory=EvalSettings)
    proposer: ProposerConfig = field(default_factory=ProposerConfig)
    optuna: OptunaConfig = field(default_factory=OptunaConfig)
    cascade: CascadeConfig = field(default_factory=CascadeConfig)
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    oracle: OracleSettings = field(default_factory=OracleSettings)

    @property
    def arms(self) -> tuple[str, ...]:
        """The baseline arms ``ablation`` asks for, in order (``true``: the tuning-only arm)."""
        if isinstance(self.ablation, bool):
            return ("tuning-only",) if self.ablation else ()
        return tuple(self.ablation)

    def __post_init__(self) -> None:
        checks = [
            (self.proposer.kind in PROPOSERS, "proposer.kind", self.proposer.kind, ", ".join(PROPOSERS)),
            (self.proposer.prompt in ("full", "short"), "proposer.prompt", self.proposer.prompt, "full or short"),
            (_count(self.proposer.candidates), "proposer.candidates", self.proposer.candidates, "an integer >= 1"),
            (_count(self.proposer.inner) and self.proposer.inner <= 8, "proposer.inner", self.proposer.inner,
             "an integer in [1, 8]"),
            (self.oracle.feedback in ORACLE_FEEDBACK, "oracle.feedback", self.oracle.feedback,
             " or ".join(ORACLE_FEEDBACK)),
            (isinstance(self.oracle.heldout, bool), "oracle.heldout", self.oracle.heldout, "true or false"),
            (_count(self.oracle.budget), "oracle.budget", self.oracle.budget, "an integer >= 1"),
            (_count(self.oracle.bound_budget, 0), "oracle.bound_budget", self.oracle.bound_budget, "an integer >= 0"),
            (_count(self.oracle.single_budget, 0), "oracle.single_budget", self.oracle.single_budget,
             "an integer >= 0"),
            (isinstance(self.ablation, bool) or (isinstance(self.ablation, tuple) and len(set(self.ablation)) == len(
                self.ablation) and all(a in ARMS for a in self.ablation)), "ablation", self.ablation,
             "true, false or a list of distinct arms from " + ", ".join(ARMS)),
            (not self.ablation or self.proposer.kind != "none", "ablation", self.ablation,
             "false when proposer.kind is none (the search is the tuning-only arm already)"),
            (self.optuna.sampler in ("tpe", "nsga2"), "optuna.sampler", self.optuna.sampler, "tpe or nsga2"),
            (self.executor.kind in ("local", "ray"), "executor.kind", self.executor.kind, "local or ray"),
            (self.executor.routing in ("affinity", "round_robin"), "executor.routing", self.executor.routing,
             "affinity or round_robin"),
            (self.eval.scoring in ("loglik", "loglik-norm", "generate"), "eval.scoring", self.eval.scoring,
             "loglik, loglik-norm or generate"),
            (isinstance(self.eval.frame_guard, bool), "eval.frame_guard", self.eval.frame_guard, "true or false"),
            (_amount(self.eval.fidelity_bound), "eval.fidelity_bound", self.eval.fidelity_bound,
             "a finite number >= 0"),
            (self.model.dtype in DTYPES, "model.dtype", self.model.dtype, " or ".join(DTYPES)),
            (self.executor.backend in ("local", "remote"), "executor.backend", self.executor.backend,
             "local or remote"),
            (self.executor.backend == "local" or bool(self.executor.server_command) != bool(self.executor.server_urls),
             "executor.server_command", self.executor.server_command,
             "set (or executor.server_urls, not both) when executor.backend is remote"),
            (self.executor.server_prefix_mode in ("field", "continue_final_message"), "executor.server_prefix_mode",
             self.executor.server_prefix_mode, "field or continue_final_message"),
            (self.executor.server_health_timeout_s > 0, "executor.server_health_timeout_s",
             self.executor.server_health_timeout_s, "> 0"),
            (self.generations >= 0, "generations", self.generations, ">= 0"),
            (_count(self.data.train_tasks, 0), "data.train_tasks", self.data.train_tasks, "an integer >= 0"),
            (_count(self.data.heldout_tasks, 0), "data.heldout_tasks", self.data.heldout_tasks, "an integer >= 0"),
            (_count(self.data.heldout_offset, 0), "data.heldout_offset", self.data.heldout_offset,
             "an integer >= 0"),
            (_count(self.data.guide_tasks, 0), "data.guide_tasks", self.data.guide_tasks, "an integer >= 0"),
            (isinstance(self.data.heldout_reused, bool), "data.heldout_reused", self.data.heldout_reused,
             "true or false"),
            (self.optuna.trials >= 1, "optuna.trials", self.optuna.trials, ">= 1"),
            (self.proposer.per_generation >= 1, "proposer.per_generation", self.proposer.per_generation, ">= 1"),
            (isinstance(self.cascade.enabled, bool), "cascade.enabled", self.cascade.enabled, "true or false"),
            (_count(self.cascade.trials), "cascade.trials", self.cascade.trials, "an integer >= 1"),
            (_count(self.cascade.promote), "cascade.promote", self.cascade.promote, "an integer >= 1"),
            (_count(self.cascade.check, 0), "cascade.check", self.cascade.check, "an integer >= 0"),
            (isinstance(self.cascade.margin, int | float) and not isinstance(self.cascade.margin, bool)
             and 0 <= self.cascade.margin < 1, "cascade.margin", self.cascade.margin, "a number in [0, 1)"),
            (isinstance(self.tune_experts, bool), "tune_experts", self.tune_experts, "true or false"),
            (isinstance(self.bootstrap_samples, int) and not isinstance(self.bootstrap_samples, bool)
             and self.bootstrap_samples >= 100, "bootstrap_samples", self.bootstrap_samples, "an integer >= 100"),
            (is_run_name(self.name), "name", self.name, RUN_NAME_RULE),
            (_count(self.seed, 0), "seed", self.seed, "an integer >= 0"),
            (_count(self.heldout_front, 0), "heldout_front", self.heldout_front, "an integer >= 0"),
            (_count(self.proposer.parents), "proposer.parents", self.proposer.parents, "an integer >= 1"),
            (_count(self.optuna.fidelity_tasks, 0), "optuna.fidelity_tasks", self.optuna.fidelity_tasks,
             "an integer >= 0"),
            (_count(self.data.max_task_tokens, 0), "data.max_task_tokens", self.data.max_task_tokens,
             "an integer >= 0"),
            (_amount(self.model.pool_gb), "model.pool_gb", self.model.pool_gb, "a finite number >= 0"),
            (_count(self.model.threads, 0), "model.threads", self.model.threads, "an integer >= 0"),
            (_count(self.executor.replicas), "executor.replicas", self.executor.replicas, "an integer >= 1"),
            (_count(self.executor.threads_per_replica, 0), "executor.threads_per_replica",
             self.executor.threads_per_replica, "an integer >= 0"),
            (_amount(self.executor.gpus_per_replica), "executor.gpus_per_replica", self.executor.gpus_per_replica,
             "a finite number >= 0"),
            (_amount(self.executor.timeout_s) and self.executor.timeout_s > 0, "executor.timeout_s",
             self.executor.timeout_s, "a positive number of seconds"),
            (all(isinstance(s, str) for s in self.seeds), "seeds", self.seeds, "a list of seed names"),
            (all(isinstance(e, str) for e in self.experts), "experts", self.experts,
             "a list of 'name' or 'name:k=v,k=v' strings"),
        ]
        for ok, key, value, want in checks:
            if not ok:
                raise ConfigError(f"{key} must be {want}, got {value!r}", field=key, value=value)
        self._check_policies()
        if self.executor.server_command:
            from rsi.cache.command import CommandTemplate

            CommandTemplate(self.executor.server_command)  # raises CommandError (an AKVError) naming the placeholder

    def _check_policies(self) -> None:
        """Each seed and expert names a policy with valid parameters (refused here, before a run starts)."""
        from evals.cache.evaluator import PolicySpec
        from search_spaces.cache.seeds import seed_source

        for i, name in enumerate(self.seeds):
            try:
                seed_source(name)
            except AKVError as err:
                raise ConfigError(f"seeds[{i}]: {err}", field=f"seeds[{i}]", value=name) from None
        for i, text in enumerate(self.experts):
            try:
                PolicySpec.parse(text).build()
            except AKVError as err:
                raise ConfigError(f"experts[{i}] {text!r}: {err}", field=f"experts[{i}]", value=text) from None

    @property
    def dtype(self) -> str:
        """``model.dtype`` with ``auto`` resolved (bfloat16 on GPU replicas, float32 otherwise) and
        ``fast`` (bfloat16 also where the CPU multiplies it natively)."""
        if self.model.dtype == "fast" and cpu_has_native_bf16():
            return "bfloat16"
        if self.model.dtype not in ("auto", "fast"):
            return self.model.dtype
        return "bfloat16" if self.executor.gpus_per_replica > 0 or self.executor.backend == "remote" else "float32"

    @property
    def model_id(self) -> str:
        """The model part of evaluation keys: name and template, plus the dtype when not float32 and the
        server command (hashed) for remote engines, so results of different numerics never mix."""
        out = f"{self.model.name}|{self.model.template}"
        if self.dtype != "float32":
            out += f"|{self.dtype}"
        if self.executor.backend == "remote":
            server = self.executor.server_command or ",".join(self.executor.server_urls)
            out += f"|remote:{hashlib.sha256(server.encode()).hexdigest()[:8]}"
        return out

    def eval_config(self) -> EvalConfig:
        """The evaluator's settings this config asks for: ``eval`` with the model's probe format (the
        one place a search config becomes an ``EvalConfig``)."""
        return EvalConfig(rates=self.eval.rates, scoring=self.eval.scoring,
                          probe=dataclasses.replace(probe_format_for(self.model.name), lead_in=self.eval.lead_in),
                          generate=self.eval.generate, frame_guard=self.eval.frame_guard,
                          fidelity_bound=float(self.eval.fidelity_bound))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def digest(self) -> str:
        """Hash of everything that changes results (not the name or tracking location)."""
        d = self.to_dict()
        for k in ("name", "tracking_uri"):
            d.pop(k)
        d["executor"] = {"timeout_s": d["executor"]["timeout_s"]}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


_SECTIONS = {"model": ModelConfig, "data": DataConfig, "eval": EvalSettings, "proposer": ProposerConfig,
             "optuna": OptunaConfig, "cascade": CascadeConfig, "executor": ExecutorConfig, "oracle": OracleSettings}


def _count(value: Any, least: int = 1) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _amount(value: Any) -> bool:
    """A finite number >= 0 (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < float("inf")


def _build(cls: type, raw: Mapping[str, Any], where: str) -> Any:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {raw!r}", field=where, value=raw)
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(names))
    if unknown:
        key = f"{where}.{unknown[0]}" if where else unknown[0]
        raise ConfigError(f"unknown config key {key!r}; valid keys here: {', '.join(sorted(names))}",
                          field=key, value=unknown[0])
    kwargs: dict[str, Any] = {}
    for k, v in raw.items():
        key = f"{where}.{k}" if where else k
        if k in _SECTIONS and cls is SearchConfig:
            kwargs[k] = _build(_SECTIONS[k], v or {}, key)
        elif isinstance(v, list):
            kwargs[k] = tuple(v)
        else:
            kwargs[k] = v
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise ConfigError(f"{where or 'config'}: {err}", field=where or "config", value=None) from err


def load_config(path: str | Path, overrides: Mapping[str, Any] | None = None) -> SearchConfig:
    """Read a YAML experiment file (plus dotted ``overrides`` such as ``{"executor.replicas": 2}``)."""
    raw = yaml.safe_load(read_text(path, "config file", ConfigError)) or {}
    return config_from_dict(raw, overrides)


def config_from_dict(raw: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> SearchConfig:
    """The config of ``raw`` (a config's ``to_dict()`` or a parsed YAML file), plus dotted ``overrides``."""
    if not overrides:
        return _build(SearchConfig, raw, "")
    merged: dict[str, Any] = copy.deepcopy(dict(raw))  # the caller's mapping stays as it was
    for dotted, value in overrides.items():
        node = merged
        *parents, last = dotted.split(".")
        for depth, part in enumerate(parents, 1):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                where = ".".join(parents[:depth])
                raise ConfigError(f"{where} must be a mapping to set {dotted}, got {node!r:.80}", field=where)
        node[last] = value
    return _build(SearchConfig, merged, "")
