"""Every experiment YAML loads; the paper-scale configs hold the reference study's setting; the
remote-backend options refuse bad values with errors that name the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import AKVError
from evals.rates import load_rates
from rsi.cache.command import CommandError
from rsi.cache.config import SearchConfig, config_from_dict, load_config
from rsi.cache.search import _normalized, parse_expert
from rsi.config import ConfigError
from search_spaces import get_policy

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
FILES = sorted(p for p in EXPERIMENTS.rglob("*.yaml")
               if not p.name.startswith("survival-"))  # survival-search configs: tests/rsi/test_survival_evolve.py
PAPER = {"gpt-oss-120b": "gpt-oss-120b", "minimax-m2.7": "MiniMax-M2.7", "qwen3-30b-a3b": "Qwen3-30B-A3B"}


def test_there_are_paper_configs():
    names = {p.name for p in FILES}
    for model in PAPER:
        assert {f"search-{model}.yaml", f"eval-{model}.yaml"} <= names
    assert "search-akv-engine-cuda.yaml" in names


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(EXPERIMENTS)) for p in FILES])
def test_every_experiment_file_loads(path):
    cfg = load_config(path)
    assert isinstance(cfg, SearchConfig) and cfg.name
    for text in cfg.experts:
        spec = parse_expert(text)
        get_policy(spec.name, **dict(spec.params))  # the expert parameters are valid
    load_rates(cfg.eval.rates)


@pytest.mark.parametrize("model", sorted(PAPER))
@pytest.mark.parametrize("kind", ["search", "eval"])
def test_paper_configs_hold_the_study_setting(model, kind):
    cfg = load_config(EXPERIMENTS / "paper" / f"{kind}-{model}.yaml")
    assert cfg.eval.rates == model and PAPER[model] in cfg.model.name
    experts = {parse_expert(t).name: parse_expert(t) for t in cfg.experts}
    assert experts["rolling_drop"].params == {"keep_tool_responses": 12}
    standard = get_policy("standard", **dict(experts["standard"].params))
    text_eng = get_policy("text_engineering", **dict(experts["text_engineering"].params))
    assert int(standard.p.threshold_ratio * standard.p.window) == 96 * 1024
    assert int(text_eng.p.threshold_ratio * text_eng.p.window) == 48 * 1024
    assert cfg.executor.backend == "remote" and "{model}" in cfg.executor.server_command
    assert "PLACEHOLDER" in cfg.data.suite  # the study's benchmarks are not known here: clearly marked
    assert (cfg.generations == 0 and not cfg.seeds) if kind == "eval" else cfg.generations > 0


def remote(**executor):
    return {"executor": {"backend": "remote", **executor}}


@pytest.mark.parametrize(("raw", "exc", "field", "message"), [
    (remote(), ConfigError, "executor.server_command", "when executor.backend is remote"),
    (remote(server_command="akv serve --port {port}", server_urls=["http://h:1"]), ConfigError,
     "executor.server_command", "not both"),
    (remote(server_command="akv serve --port {prt}"), CommandError, "executor.server_command", "valid placeholders"),
    (remote(server_command="akv serve --model {model}"), CommandError, "executor.server_command", "{port}"),
    ({"executor": {"backend": "gpu"}}, ConfigError, "executor.backend", "local or remote"),
    (remote(server_command="akv serve --port {port}", server_prefix_mode="guess"), ConfigError,
     "executor.server_prefix_mode", "continue_final_message"),
    ({"model": {"dtype": "fp8"}}, ConfigError, "model.dtype", "bfloat16"),
    ({"executor": {"server_timeout": 3}}, ConfigError, "executor.server_timeout", "server_health_timeout_s"),
])
def test_bad_remote_options_name_the_key(raw, exc, field, message):
    with pytest.raises(exc) as err:
        config_from_dict(raw)
    assert isinstance(err.value, AKVError) and err.value.field == field and message in str(err.value)


@pytest.mark.parametrize(("raw", "field", "message"), [
    # each of these once ran into a traceback (TypeError, ValueError, OverflowError, ZeroDivisionError,
    # MlflowException), a run directory outside runs/, or a finished search with an expert of NaNs
    ({"seed": "abc"}, "seed", "an integer >= 0, got 'abc'"),
    ({"seed": -1}, "seed", "an integer >= 0, got -1"),
    ({"name": "../../elsewhere"}, "name", "it names the run directory"),
    ({"name": ""}, "name", "it names the run directory"),
    ({"model": {"pool_gb": float("inf")}}, "model.pool_gb", "a finite number >= 0, got inf"),
    ({"model": {"pool_gb": -1}}, "model.pool_gb", "a finite number >= 0, got -1"),
    ({"executor": {"replicas": 0}}, "executor.replicas", "an integer >= 1, got 0"),
    ({"executor": {"timeout_s": float("nan")}}, "executor.timeout_s", "a positive number of seconds"),
    ({"heldout_front": -2}, "heldout_front", "an integer >= 0"),
    ({"data": {"guide_tasks": -1}}, "data.guide_tasks", "an integer >= 0, got -1"),
    ({"proposer": {"parents": 0}}, "proposer.parents", "an integer >= 1"),
    ({"optuna": {"fidelity_tasks": -1}}, "optuna.fidelity_tasks", "an integer >= 0"),
    ({"seeds": ["rolling_drop", "nosuch"]}, "seeds[1]", "unknown seed 'nosuch'; valid seeds: full"),
    ({"experts": ["full", "nosuch"]}, "experts[1]", "unknown policy 'nosuch'; valid policies: full"),
    ({"experts": ["rolling_drop:keep_tool_responses=-5"]}, "experts[0]", "must be in [0, 100000], got -5"),
    ({"experts": [12]}, "experts", "a list of 'name' or 'name:k=v,k=v' strings"),
    ({"proposer": {"kind": "evolve"}}, "proposer.kind", "mutation, synthesis, llm, none"),
    ({"proposer": {"candidates": 0}}, "proposer.candidates", "an integer >= 1"),
    ({"oracle": {"feedback": "always"}}, "oracle.feedback", "evidence or model or none"),
    ({"oracle": {"heldout": "yes"}}, "oracle.heldout", "true or false"),
    ({"oracle": {"budget": 0}}, "oracle.budget", "an integer >= 1"),
    ({"oracle": {"colour": 1}}, "oracle.colour", "valid keys here"),
    ({"ablation": 1}, "ablation", "true, false or a list of distinct arms"),
    ({"ablation": ["random", "sideways"]}, "ablation", "from tuning-only, random, hillclimb"),
    ({"ablation": ["random", "random"]}, "ablation", "distinct arms"),
    ({"proposer": {"kind": "annealing"}}, "proposer.kind", "random, hillclimb"),
    ({"ablation": True, "proposer": {"kind": "none"}}, "ablation", "the tuning-only arm already"),
])
def test_bad_search_values_are_refused_before_a_run_starts(raw, field, message):
    with pytest.raises(ConfigError) as err:
        config_from_dict(raw)
    assert err.value.field == field and message in str(err.value), str(err.value)


def test_model_id_changes_only_off_the_defaults():
    assert config_from_dict({}).model_id == "gemma-3-270m|plain"  # keys of existing runs are unchanged
    assert config_from_dict({"executor": {"gpus_per_replica": 1}}).model_id == "gemma-3-270m|plain|bfloat16"
    a = config_from_dict(remote(server_command="akv serve --port {port}", server_urls=[]))
    b = config_from_dict(remote(server_command="sglang --port {port}"))
    assert a.model_id != b.model_id and "|remote:" in a.model_id


@pytest.mark.parametrize("native", [True, False])
def test_dtype_fast_is_bfloat16_only_where_the_cpu_multiplies_it_natively(monkeypatch, native):
    """``fast`` follows the CPU's flags (read once per resolution); ``auto`` never does, so the keys
    of every existing CPU run stay float32."""
    import rsi.cache.config

    monkeypatch.setattr(rsi.cache.config, "cpu_has_native_bf16", lambda: native)
    fast = config_from_dict({"model": {"dtype": "fast"}})
    assert fast.dtype == ("bfloat16" if native else "float32")
    assert fast.model_id == ("gemma-3-270m|plain|bfloat16" if native else "gemma-3-270m|plain")
    assert config_from_dict({"model": {"dtype": "auto"}}).dtype == "float32"
    gpu = config_from_dict({"model": {"dtype": "fast"}, "executor": {"gpus_per_replica": 1}})
    assert gpu.dtype == "bfloat16"


def test_cpu_flags_are_read_from_proc_cpuinfo(tmp_path, monkeypatch):
    import builtins

    from engine.settings import cpu_has_native_bf16

    real_open = builtins.open
    for flags, want in (("fpu avx2 avx512f avx512_bf16", True), ("fpu amx_bf16 amx_tile", True),
                        ("fpu avx2 avx512f avx512bw", False)):
        fake = tmp_path / "cpuinfo"
        fake.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        monkeypatch.setattr(builtins, "open", lambda path, *a, f=fake, **k: real_open(
            f if path == "/proc/cpuinfo" else path, *a, **k))
        assert cpu_has_native_bf16() is want


def test_runs_written_before_new_config_keys_still_resume():
    current = config_from_dict({"executor": {"replicas": 3}})
    old = json.loads(json.dumps(current.to_dict()))
    for key in ("backend", "server_command", "server_urls", "server_log_dir", "server_health_timeout_s",
                "server_grace_s", "server_prefix_mode"):
        del old["executor"][key]
    del old["model"]["dtype"]
    assert _normalized(old) == json.loads(json.dumps(current.to_dict()))


def test_a_resumed_run_takes_new_executor_fields_and_keeps_the_rest(tmp_path):
    from rsi.cache.search import load_run_config
    from tests.rsi.conftest import tiny_config

    started = tiny_config(executor={"kind": "ray", "replicas": 2})
    (tmp_path / "config.json").write_text(json.dumps(started.to_dict()))
    resumed = load_run_config(tmp_path, {"kind": "local"})
    assert resumed.executor.kind == "local" and resumed.executor.replicas == 2
    assert {**resumed.to_dict(), "executor": None} == {**started.to_dict(), "executor": None}
    assert load_run_config(tmp_path).to_dict() == started.to_dict()
    with pytest.raises(AKVError, match="kind"):
        load_run_config(tmp_path, {"kind": "carrier-pigeon"})
    with pytest.raises(AKVError, match=r"keeps its executor\.backend"):  # the engine behind the results
        load_run_config(tmp_path, {"backend": "remote"})
    with pytest.raises(ConfigError, match=r"^executor\.replicas must be an integer >= 1, got -3"):  # the flag's value
        load_run_config(tmp_path, {"replicas": -3})
    with pytest.raises(ConfigError, match=r"executor must be a mapping to set executor\.kind, got 5"):
        config_from_dict({"executor": 5}, {"executor.kind": "local"})
