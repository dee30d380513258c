"""The ``akv`` command line: thin wrappers over the library (no logic lives here).

    akv serve --model gemma-3-270m --host 127.0.0.1 --port 30000
    akv proxy --upstream http://10.0.0.5:30000 --model M --policy k12=rolling_drop:keep_tool_responses=12
    akv eval --policy rolling_drop --params keep_tool_responses=4 --split train --out results.json
    akv eval --compare full,rolling_drop,standard,text_engineering --plot compare.png
    akv search experiments/quickstart.yaml [--run-dir DIR] | akv search --resume DIR [--in-process | --replicas N]
    akv report DIR | akv export DIR --pick best --out policy.py | akv dashboard DIR
    akv oracle --suite mixed --split heldout --out oracle.json   (the hindsight oracle and bounds)

Every command turns the project's errors (``AKVError`` and its subclasses) and unusable user
files (missing, unreadable, a directory, not JSON or YAML) into one line on stderr and exit
status 2; ``--debug`` (before or after the command name) shows the traceback instead.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine.errors import AKVError

EXIT_USER_ERROR = 2


def _check_front_options(args: argparse.Namespace) -> None:
    """Refuse nonsense options of the HTTP front (``akv serve``, ``akv proxy``): port and key limits."""
    import math

    if not 0 <= args.port <= 65535:
        raise AKVError(f"--port must be in [0, 65535], got {args.port}", field="port", value=args.port)
    if not (math.isfinite(args.key_rate) and args.key_rate >= 0):
        raise AKVError(f"--key-rate must be a finite number >= 0, got {args.key_rate}", field="key_rate",
                       value=args.key_rate)
    for flag in ("key_concurrency", "key_burst"):
        if getattr(args, flag) < 0:
            name = "--" + flag.replace("_", "-")
            raise AKVError(f"{name} must be an integer >= 0 (0: no limit), got {getattr(args, flag)}", field=flag,
                           value=getattr(args, flag))


def _check_serve_options(args: argparse.Namespace) -> None:
    """Refuse nonsense serving options before the model loads (the engine and scheduler check the rest)."""
    import math

    _check_front_options(args)
    for flag in ("pool_gb", "host_gb", "snapshot_quota_gb"):
        value = getattr(args, flag)
        if not (math.isfinite(value) and value >= 0):
            name = "--" + flag.replace("_", "-")
            raise AKVError(f"{name} must be a finite number >= 0, got {value}", field=flag, value=value)


def _read_secret(path: str) -> bytes:
    try:
        return Path(path).read_bytes().strip()
    except OSError as err:
        raise AKVError(f"--snapshot-secret-file {path!r} cannot be read ({err.strerror or err})",
                       field="snapshot_secret_file", value=path) from None


def _serve(args: argparse.Namespace) -> int:
    import torch

    from engine.engine import Engine
    from engine.server import create_app, serve
    from engine.server.limits import ServerLimits
    from engine.server.ratelimit import TenantLimits
    from engine.server.tenants import configure
    from engine.settings import settings

    _check_serve_options(args)
    policies = _served_policies(args)  # refused now, before the model loads
    pool = 0 if args.no_reuse else int(args.pool_gb * (1 << 30))
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    eng = Engine.from_pretrained(args.model, template=args.template, pool_bytes=pool,
                                 host_bytes=int(args.host_gb * (1 << 30)), threads=args.threads,
                                 device=args.device, dtype=getattr(torch, dtype), weights=args.weights)
    snapshots = args.snapshot_dir or str(settings().cache_dir / "snapshots")
    survival = None
    if args.survival:
        from engine.survival import SurvivalManager, TreeBackend
        from search_spaces.survival.registry import get_survival_policy

        survival = SurvivalManager(TreeBackend(eng.tree, eng.geometry.bytes_per_token),
                                   get_survival_policy(args.survival))
    env = settings()
    tenants = configure(args.api_key or [], args.api_keys_file, env_keys=env.api_keys,
                        shared=args.shared_cache_tenants or "", public_metrics=args.public_metrics)
    secret = _read_secret(args.snapshot_secret_file) if args.snapshot_secret_file else None
    secret = secret or (env.snapshot_secret.encode() if env.snapshot_secret else None)
    quota = int(args.snapshot_quota_gb * (1 << 30)) if args.snapshot_quota_gb > 0 else None
    app = create_app(eng, snapshot_dir=snapshots, max_queue=args.max_queue, max_batch=args.max_batch,
                     timeout=args.timeout, aliases=(args.model,), survival=survival, tenants=tenants,
                     snapshot_secret=secret, snapshot_quota=quota,
                     limits=ServerLimits(max_body_bytes=args.max_body_bytes, max_candidates=args.max_candidates,
                                         max_score_tokens=args.max_score_tokens, intake_bytes=args.intake_bytes),
                     tenant_limits=TenantLimits(args.key_concurrency, args.key_rate, args.key_burst),
                     policies=policies)
    if args.intake_bytes:
        app.state.intake.start()  # its start-up (seconds) beside the server's, not in the first large body
    keys = f"{len(tenants.names)} API key(s)" if tenants.keyed else "no API keys"
    print(f"serving {eng.name} on http://{args.host}:{args.port} (snapshots in {snapshots}; {keys})", flush=True)
    for name in policies.names:
        print(f"  model {eng.name}@{name}: {policies.get(name)!r}", flush=True)
    serve(app, args.host, args.port)
    return 0


def _proxy(args: argparse.Namespace) -> int:
    from engine.layout import Renderer
    from engine.server import serve
    from engine.server.limits import ServerLimits
    from engine.server.proxy import create_proxy
    from engine.server.ratelimit import TenantLimits
    from engine.server.tenants import configure
    from engine.server.upstream import Upstream
    from engine.settings import settings

    _check_front_options(args)
    env = settings()
    upstream = Upstream(args.upstream, timeout_s=args.timeout, api_key=env.client_api_key)
    policies = _served_policies(args)  # refused now, before the tokenizer loads
    renderer = Renderer.for_model(args.tokenizer or args.model, args.template)
    tenants = configure(args.api_key or [], args.api_keys_file, env_keys=env.api_keys,
                        public_metrics=args.public_metrics)
    app = create_proxy(upstream, renderer, args.model, policies=policies, tenants=tenants,
                       limits=ServerLimits(max_body_bytes=args.max_body_bytes, intake_bytes=0),
                       tenant_limits=TenantLimits(args.key_concurrency, args.key_rate, args.key_burst))
    keys = f"{len(tenants.names)} API key(s)" if tenants.keyed else "no API keys"
    sent = "AKV_API_KEY" if upstream.api_key else "each client's own key"
    print(f"proxying {args.model} at {upstream.url} on http://{args.host}:{args.port} ({keys}; upstream gets "
          f"{sent})", flush=True)
    for name in policies.names:
        print(f"  model {args.model}@{name}: {policies.get(name)!r}", flush=True)
    serve(app, args.host, args.port)
    return 0


POLICY_WAIT = 3
"""How many ``--policy-timeout``s the server waits for one request's schedule (the replay, and on a
failure the search for the last request point that decided) before serving it without drops."""


def _served_policies(args: argparse.Namespace) -> Any:
    """``--policy NAME=SPEC`` entries as the server's :class:`engine.server.policies.Policies`."""
    import math

    from engine.server.policies import Policies

    if not (math.isfinite(args.policy_timeout) and args.policy_timeout > 0):
        raise AKVError(f"--policy-timeout must be a finite number > 0, got {args.policy_timeout}",
                       field="policy_timeout", value=args.policy_timeout)
    if not args.policy:
        return Policies()
    from rsi.cache.serving import served_policies

    return Policies(served_policies(args.policy, args.policy_timeout), time_limit_s=POLICY_WAIT * args.policy_timeout)


def _eval_settings(args: argparse.Namespace) -> None:
    from evals.cache.cli import fill_eval_defaults

    """Fill the ``akv eval`` settings the command line left out: from ``--run``'s config first (its
    suite, held-out tasks, model, template, dtype, scoring, rates and frame guard; said on stdout),
    then ``evals.cache.cli.EVAL_DEFAULTS``. Runs before the template is checked and before any work."""
    if args.run:
        from rsi.cache.export import run_eval_settings

        took = []
        for key, value in run_eval_settings(Path(args.run)).items():
            if key == "frame_guard":
                if value and not args.frame_guard:
                    args.frame_guard = True  # what the search counted; export does the same
                    took.append("frame guard on (it was searched under the frame guard)")
            elif getattr(args, key, None) is None:
                setattr(args, key, value)
                took.append(f"{key} {value}")
        if took:
            print(f"from {args.run}: {', '.join(took)} (options given on the command line win)", flush=True)
    elif args.pick is not None:
        raise AKVError("--pick goes with --run RUN_DIR", field="pick", value=args.pick)
    fill_eval_defaults(args)


def _eval(args: argparse.Namespace) -> int:
    from evals.cache.cli import run_eval

    picked = None
    if args.run:
        from rsi.cache.export import pick_spec

        picked = pick_spec(Path(args.run), args.pick or "headline")
        print(f"evaluating {picked.display} of {args.run}", flush=True)
    from search_spaces.lookup import parse_params

    if args.suite is not None and args.suite.startswith("bfcl-"):  # judged by BFCL's checker, not probes
        from evals.bfcl.cli import run_bfcl_eval

        return run_bfcl_eval(args, parse_params(args.params or []), picked)
    return run_eval(args, parse_params(args.params or []), picked)


def _live(args: argparse.Namespace) -> int:
    from evals.cache.cli import live_cli
    from search_spaces.lookup import parse_params

    if not args.run:
        if args.pick is not None:
            raise AKVError("--pick goes with --run RUN_DIR", field="pick", value=args.pick)
        return live_cli(args, parse_params(args.params or []))
    if args.params:
        raise AKVError("--params goes with --policy; a run's candidate has its own", field="params", value=args.params)
    from rsi.cache.export import pick_spec, run_frame_guard

    picked, guard = pick_spec(Path(args.run), args.pick or "headline"), run_frame_guard(Path(args.run))
    print(f"playing {picked.display} of {args.run}{' under its frame guard' if guard else ''}", flush=True)
    return live_cli(args, {}, picked, frame_guard=guard)


def _survival_search(args: argparse.Namespace) -> int:
    if args.evolve:
        from rsi.survival.cli import evolve_cli

        return evolve_cli(args)
    if args.confirm_replay:
        raise AKVError("--confirm-replay needs --evolve CONFIG", field="confirm_replay", value=args.confirm_replay)
    if not args.trace:
        raise AKVError("survival-search needs a TRACE (tune the families) or --evolve CONFIG (evolve programs)",
                       field="trace", value=None)
    from rsi.survival.cli import search_cli

    return search_cli(args)


def yaml_reason(err: Exception) -> str:
    """A YAML error's problem and where it is, on one line."""
    problem, mark = getattr(err, "problem", None), getattr(err, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{problem or ' '.join(str(err).split())}{where}"


def _search(args: argparse.Namespace) -> int:
    import yaml

    from rsi.cache.config import load_config
    from rsi.cache.search import Search, load_run_config
    executor: dict[str, Any] = {}
    if args.replicas is not None:
        executor.update(replicas=args.replicas, kind="ray")
    if args.ray_address:
        executor.update(ray_address=args.ray_address, kind="ray")
    if args.in_process:
        if executor:
            raise AKVError("--in-process evaluates in this process: give it without --replicas or --ray-address",
                           field="in_process")
        executor["kind"] = "local"
    overrides = {f"executor.{k}": v for k, v in executor.items()}
    if args.resume:
        run_dir = Path(args.resume)
        config = load_run_config(run_dir, executor)
    else:
        if not args.config:
            raise AKVError("give a CONFIG file, or --resume RUN_DIR", field="config")
        try:
            config = load_config(args.config, overrides)
        except yaml.YAMLError as err:
            raise AKVError(f"{args.config} is not valid YAML: {yaml_reason(err)}", field="config",
                           value=args.config) from err
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = Path(args.run_dir) if args.run_dir else Path("runs") / f"{config.name}-{stamp}"
    t0 = time.perf_counter()
    from rsi.provenance import SEARCH_MEASURES, capture, record_run

    started = capture(measures=SEARCH_MEASURES, model=config.model.name, dtype=config.dtype,
                      judge=f"{config.model.name} ({config.eval.scoring})",
                      configs=[] if args.resume else [args.config])
    result = Search(config, run_dir).run()
    record_run(run_dir, started)
    from rsi.cache.headline import run_headline

    print("headline (held-out, paired, 95% bootstrap intervals; headline.json):\n  "
          + "\n  ".join(run_headline(run_dir)))
    print(f"search finished in {time.perf_counter() - t0:.0f}s; report: {(result.run_dir / 'report.html').resolve()}")
    return 0


def _import(args: argparse.Namespace) -> int:
    from collections import Counter

    from evals.tasks.logs import LogError, load_log, write_suite

    out = Path(args.out)
    if out.is_dir():
        raise LogError(f"--out {str(out)!r} is a directory; give the task file to write", field="out", value=str(out))
    tasks = load_log(args.file, heldout_share=args.heldout_share)
    write_suite(tasks, out)
    fmt = tasks[0].meta.get("format", "tasks") if tasks else "?"
    splits = Counter(t.split for t in tasks)
    turns = sum(1 for t in tasks for m in t.messages if m["role"] == "assistant")
    print(f"{len(tasks)} sessions ({fmt}; {turns} assistant turns; "
          f"{', '.join(f'{n} {s}' for s, n in sorted(splits.items()))}) -> {out.resolve()}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from rsi.rundir import RunDir

    run = Path(args.run_dir)
    if RunDir(run).is_survival:  # the report of the run's own track
        from rsi.rundir import read_json
        from rsi.survival.report import describe_headline
        from rsi.survival.report import write_report as write_survival_report

        write_survival_report(run)  # refuses a run without archive.json yet
        head = run / "headline.json"
        lines = describe_headline(read_json(head, dict)) if head.is_file() else ["no headline.json yet"]
    else:
        from rsi.cache.export import load_archive
        from rsi.cache.headline import run_headline
        from rsi.cache.report import write_report

        load_archive(run)  # a clear error for a directory that holds no run (yet)
        write_report(run)
        lines = run_headline(run)
    print("headline:\n  " + "\n  ".join(lines))
    print(f"report: {(run / 'report.html').resolve()}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from rsi.cache.headline import compare_picks, describe

    row = compare_picks(args.run_dir, args.a, args.b, args.split)
    print(f"{describe(row)} (paired over the {args.split} tasks both have; 95% bootstrap intervals)")
    print("A pair chosen after looking at held-out results is a post-hoc comparison: the headline's is chosen on "
          "train.")
    return 0


def _pool(args: argparse.Namespace) -> int:
    from rsi.cache.pooling import pool_runs, pooled_lines, write_pooled
    from rsi.rundir import RunDir

    survival = [RunDir(r).is_survival for r in args.run_dirs]
    if any(survival):
        if not all(survival):
            mixed = next(r for r, s in zip(args.run_dirs, survival, strict=True) if not s)
            raise AKVError(f"{mixed} is not a survival evolution, the others are: pool runs of one track",
                           field="run_dirs", value=mixed)
        from rsi.survival.pooling import pool_survival_runs, survival_pooled_lines, write_survival_pooled

        traces = pool_survival_runs(args.run_dirs, samples=args.samples, seed=args.seed, versus=args.versus)
        return _show_pooled(args, "each run's best evolved program chosen on train, paired with its comparator over "
                                  "that run's held-out traces", "; lower is better", survival_pooled_lines(traces),
                            lambda: write_survival_pooled(args.out, traces, args.run_dirs, samples=args.samples,
                                                          seed=args.seed))
    tasks = pool_runs(args.run_dirs, samples=args.samples, seed=args.seed, versus=args.versus)
    return _show_pooled(args, "each run's policy chosen on train, paired with each expert over that run's held-out "
                              "tasks", "", pooled_lines(tasks),
                        lambda: write_pooled(args.out, tasks, args.run_dirs, samples=args.samples, seed=args.seed))


def _show_pooled(args: argparse.Namespace, what: str, note: str, lines: list[str], write: Callable[[], Path]) -> int:
    """Print a pool's table under its one-line description; with ``--out``, write it and say where."""
    print(f"{what}; pooled: a bootstrap of {args.samples} resamples within each run (95% intervals{note})")
    for line in lines:
        print(line)
    if args.out:
        print(f"wrote {write()}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from rsi.cache.export import export_pick, run_frame_guard
    from rsi.rundir import RunDir

    guard = True if args.frame_guard else run_frame_guard(Path(args.run_dir))
    if RunDir(args.run_dir).is_survival:  # akv survival-search --evolve
        from rsi.survival.export import export_survival_pick

        path = export_survival_pick(Path(args.run_dir), args.pick, Path(args.out), args.format)
    else:
        path = export_pick(Path(args.run_dir), args.pick, Path(args.out), args.format, guard)
    print(f"exported {args.pick} to {path} ({args.format}{', frame guard on' if guard else ''})")
    return 0


def _dashboard(args: argparse.Namespace) -> int:
    from rsi.dashboard import run_dashboards

    if not Path(args.run_dir).is_dir():
        raise AKVError(f"{args.run_dir} is not a run directory", field="run_dir", value=args.run_dir)
    return run_dashboards(Path(args.run_dir), args.mlflow_port, args.optuna_port)


class _DefaultsFormatter(argparse.HelpFormatter):
    """Help that shows every option's default, unless its text already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if ("default" in text or action.default in (None, False, "", [], argparse.SUPPRESS)
                or not action.option_strings):
            return text
        return text + " (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """Every ``akv`` parser: help lists each option's default, an option without help text included."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        if kwargs.get("help") is None and kwargs.get("default") not in (None, False, "", []) and args and \
                str(args[0]).startswith("-"):
            kwargs["help"] = "default: %(default)s"
        return super().add_argument(*args, **kwargs)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("akv-rsi")
    except PackageNotFoundError:
        return "(not installed: run from a checkout)"


def _list(args: argparse.Namespace) -> int:
    if args.what != "candidates" and args.run_dir:
        raise AKVError(f"akv list {args.what} takes no run directory", field="run_dir", value=args.run_dir)
    if args.what == "policies":
        from search_spaces.cache.registry import FAMILIES, family_parameters

        for family in FAMILIES.values():
            print(f"{family.name} ({family.kind.value}): {family.summary}")
            for name, default, searched in family_parameters(family.name):
                print(f"    {name} = {default!r}    searched: {searched}")
        print("\nakv eval --policy NAME --params k=v ...; in a config's experts: NAME:k=v,k=v. A search's candidates "
              "(seed:rolling_drop, g1-p0, ...) are labels of its run: akv list candidates RUN")
    elif args.what == "suites":
        from evals.tasks.generator import SUITES
        from evals.tasks.horizon import HORIZON_SUITES  # noqa: F401 (registers the horizon suites)

        for spec in SUITES.values():
            counts = ", ".join(f"{split} {n}/family" for split, n in spec.tasks_per_family.items())
            print(f"{spec.name} (v{spec.version}): {counts}; {spec.min_tokens}-{spec.max_tokens} tokens")
        from evals.bfcl.data import SUITES as BFCL_SUITES

        for name, category in BFCL_SUITES.items():
            print(f"{name}: BFCL v4 {category} (200 tasks, judged by BFCL's checker; needs bfcl-eval: make bfcl)")
        print("\nor a task file on disk (docs/tasks.md), or agent logs: OpenAI chat JSONL/JSON, ATIF (akv import)")
    elif args.what == "models":
        from engine.models.catalog import MODELS
        from engine.models.loading import TINY_MODELS

        for model in MODELS.values():
            print(f"{model.name}: {model.title}; template {model.template or 'gemma/plain'}; {model.license}; "
                  f"install: {model.install}")
        print(f"{', '.join(TINY_MODELS)}: random weights for tests; or a local checkpoint directory")
    else:
        _list_candidates(args.run_dir)
    return 0


def _list_candidates(run_dir: str | None) -> None:
    from rsi.cache.export import load_archive
    from rsi.cache.headline import read_headline

    if not run_dir:
        raise AKVError("akv list candidates needs a RUN_DIR", field="run_dir", value=None)
    archive = load_archive(Path(run_dir))
    chosen = {r.policy_id for r in read_headline(Path(run_dir)) or []}
    print(f"{'id':14s} {'label':24s} {'gen':>3s} {'train pass':>10s} {'train cost':>10s} {'held-out pass':>13s} "
          f"{'size':>5s}")
    for c in archive.candidates:
        train, held = c.train, c.heldout
        print(f"{c.id:14s} {(c.label or '')[:24]:24s} {c.generation:3d} "
              f"{(f'{train.pass_rate:.3f}' if train else '-'):>10s} "
              f"{(f'{train.cost_cents_mean:.4f}c' if train else '-'):>10s} "
              f"{(f'{held.pass_rate:.3f}' if held is not None and held.ok else '-'):>13s} "
              f"{(str(c.size) if c.size else '-'):>5s}" + ("  <- headline choice" if c.id in chosen else ""))


def _add_key_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--api-key", action="append", metavar="[NAME:]KEY",
                   help="require 'Authorization: Bearer KEY'; each key is a tenant (repeatable; also "
                        "--api-keys-file and AKV_API_KEYS, which keep keys out of the process list)")
    p.add_argument("--api-keys-file", default=None, metavar="FILE", help="one [NAME:]KEY per line")
    p.add_argument("--public-metrics", action="store_true", help="serve /metrics without an API key")


def _add_body_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-body-bytes", type=int, default=4 << 20,
                   help="largest request body, declared or streamed (413 beyond; default 4 MiB)")


def _add_limit_and_policy_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--key-concurrency", type=int, default=0,
                   help="most model requests one API key may have in flight (429 beyond; 0: no limit)")
    p.add_argument("--key-rate", type=float, default=0.0,
                   help="requests a minute one API key may make (a token bucket; 429 with Retry-After beyond; 0: off)")
    p.add_argument("--key-burst", type=int, default=0,
                   help="the bucket's size for --key-rate (0: ten seconds' worth)")
    p.add_argument("--policy", action="append", metavar="NAME=SPEC",
                   help="serve model MODEL@NAME with the schedule this policy computes (repeatable). SPEC: a built-in "
                        "policy (rolling_drop:keep_tool_responses=12), a module written by akv export (FILE.py, run in "
                        "the sandbox), or a search run RUN_DIR[#PICK] (default pick: headline); docs/export.md")
    p.add_argument("--policy-timeout", type=float, default=10.0,
                   help="seconds (wall and CPU) one sandboxed policy call may take; a request whose schedule is not "
                        "ready in 3x this is served without new drops")


MODEL_HELP = "gemma-3-270m, qwen2.5-coder-1.5b (the qwen extra), tiny-random, or a local checkpoint"
WEIGHTS_HELP = ("decode weights: dense (the --dtype weights) or gguf (qwen2.5-coder-1.5b on CPU: the GGUF's own 4-bit "
                "groups for decode beside the --dtype weights for prefill; converted once into the cache)")
TEMPLATE_HELP = ("chat template: gemma, chatml or plain (default: the named model's own, chatml for "
                 "qwen2.5-coder-1.5b; else {fallback})")


def build_parser() -> argparse.ArgumentParser:
    from evals.cache.oracle_cli import add_parser as add_oracle
    from evals.survival.cli import add_parser as add_workload

    parser = _Parser(prog="akv", description="AKV-RSI: KV-cache policy search and serving")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("serve", help="run the OpenAI-compatible AKV server")
    s.add_argument("--model", default="gemma-3-270m", help=MODEL_HELP)
    s.add_argument("--template", default=None, help=TEMPLATE_HELP.format(fallback="gemma"))
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=30000)
    s.add_argument("--pool-gb", type=float, default=2.0, help="KV pool budget")
    s.add_argument("--host-gb", type=float, default=0.0, help="host-tier budget for swapped-out KV")
    s.add_argument("--no-reuse", action="store_true", help="full recompute: no prefix reuse (a baseline)")
    s.add_argument("--max-queue", type=int, default=64)
    s.add_argument("--max-batch", type=int, default=8)
    s.add_argument("--timeout", type=float, default=600.0, help="per-request deadline in seconds")
    s.add_argument("--threads", type=int, default=None)
    s.add_argument("--snapshot-dir", default=None)
    s.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N); a GPU replica sets CUDA_VISIBLE_DEVICES")
    s.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                   help="weights and KV (default: float32 on cpu, bfloat16 on cuda)")
    s.add_argument("--weights", default="dense", choices=["dense", "gguf"], help=WEIGHTS_HELP)
    s.add_argument("--survival", default=None,
                   help="tool-gap survival policy for paused sessions (lru, ttl, min_waste, ...; docs/survival.md)")
    _add_key_options(s)
    s.add_argument("--shared-cache-tenants", default=None, metavar="NAME,NAME",
                   help="tenants that share one prefix cache (default: no prefix reuse across tenants)")
    s.add_argument("--snapshot-secret-file", default=None, metavar="FILE",
                   help="HMAC key of snapshot files (also AKV_SNAPSHOT_SECRET; default: a 0600 file generated "
                        "in the snapshot dir)")
    s.add_argument("--snapshot-quota-gb", type=float, default=8.0,
                   help="disk quota of each tenant's snapshots (0: no limit)")
    _add_body_option(s)
    s.add_argument("--max-candidates", type=int, default=64, help="most candidates of one /v1/akv/score request")
    s.add_argument("--max-score-tokens", type=int, default=4096,
                   help="most candidate tokens (all candidates together) of one /v1/akv/score request")
    s.add_argument("--intake-bytes", type=int, default=256 << 10,
                   help="chat and score bodies of at least this size are screened in a separate, lower-priority "
                        "process before the server parses them (0: never; default 256 KiB)")
    _add_limit_and_policy_options(s)
    s.set_defaults(func=_serve)

    px = sub.add_parser("proxy", help="serve policies as MODEL@NAME in front of a server that speaks the wire format")
    px.add_argument("--upstream", required=True, metavar="URL",
                    help="the server to forward to (akv serve, an AKV/SGLang server), e.g. http://10.0.0.5:30000; "
                         "sent AKV_API_KEY when set, else each client's own Authorization header")
    px.add_argument("--model", required=True, help="the upstream's model name (MODEL in MODEL@NAME)")
    px.add_argument("--tokenizer", default=None,
                    help="where MODEL's tokenizer comes from (a registered name or a local dir; default: --model)")
    px.add_argument("--template", default=None, help=TEMPLATE_HELP.format(fallback="gemma"))
    px.add_argument("--host", default="127.0.0.1")
    px.add_argument("--port", type=int, default=30001)
    px.add_argument("--timeout", type=float, default=600.0,
                    help="seconds to wait for the upstream's answer, and between two chunks of a stream")
    _add_key_options(px)
    _add_body_option(px)
    _add_limit_and_policy_options(px)
    px.set_defaults(func=_proxy)

    e = sub.add_parser("eval", help="score policies on a task suite (cost and pass rate)")
    which = e.add_mutually_exclusive_group()
    which.add_argument("--policy", default=None, help="a policy name (or drop_evidence; drop_other on the BFCL suites)")
    which.add_argument("--compare", default=None,
                       help="policies to compare side by side, NAME or NAME:k=v,k=v, comma-separated (';' also "
                            "separates); each is paired over tasks with the first (95%% bootstrap intervals)")
    which.add_argument("--program", default=None, metavar="FILE.py",
                       help="a policy program, or a module written by akv export (run in the sandbox, never imported)")
    which.add_argument("--run", default=None, metavar="RUN_DIR", help="a candidate of a search run (see --pick)")
    e.add_argument("--pick", default=None,
                   help="with --run: 'headline' (the choice headline.json reports, made on train; the default), "
                        "'best' (the highest held-out pass, then the lowest cost), a candidate id or a label "
                        "(akv list candidates RUN)")
    e.add_argument("--params", nargs="*", default=[], help="k=v parameters of --policy or --program")
    e.add_argument("--suite", default=None,
                   help="suite name or path of a task set on disk (akv list suites; default: default, or --run's)")
    e.add_argument("--split", default=None,
                   help="a split of the task set (train, heldout, custom, ...) or 'all' (default: train when the "
                        "task set has one, else every task)")
    e.add_argument("--limit", type=int, default=None,
                   help="at most N tasks, spread over families (default: every task, or --run's held-out count)")
    e.add_argument("--offset", type=int, default=None,
                   help="skip the first N tasks of that spread (default: 0, or --run's held-out offset)")
    e.add_argument("--model", default=None, help=MODEL_HELP + " (default: gemma-3-270m, or --run's)")
    e.add_argument("--template", default=None, help=TEMPLATE_HELP.format(fallback="plain"))
    e.add_argument("--rates", default=None, help="price table (default: gpt-oss-120b, or --run's)")
    e.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                   help="weights and KV of the model (bfloat16: about 1.5x faster prefill on CPUs with avx512_bf16, "
                        "inexact: bench.weight_formats measures the probes it changes)")
    e.add_argument("--weights", default="dense", choices=["dense", "gguf"], help=WEIGHTS_HELP)
    e.add_argument("--fidelity-bound", type=float, default=0.5,
                   help="on agent logs (no probes): a conversation passes when no recorded assistant turn loses more "
                        "than this much log-likelihood per token against the full cache (default: 0.5)")
    e.add_argument("--scoring", default=None, choices=["loglik", "loglik-norm", "generate"],
                   help="what decides a probe's pass: the top candidate by log-likelihood (loglik), by log-likelihood "
                        "per character (loglik-norm, acc_norm), or exact match of the greedy answer (generate); "
                        "default: loglik, or --run's")
    e.add_argument("--generate", action="store_true",
                   help="also generate greedy answers (exact/contains match; slower; implied by --scoring generate)")
    e.add_argument("--check-generation", action="store_true",
                   help="generate each answer batched across a task's policies again alone and report how many "
                        "differ in tokens, text and verdict (the batched step's float rounding; doubles generation)")
    e.add_argument("--frame-guard", action="store_true",
                   help="guard every policy's drops: a message leaves only after an assistant turn has read it, and "
                        "the system prompt and first user message never leave (what a live agent needs); on by "
                        "itself for --run of a run searched under eval.frame_guard, and --program of a guarded export")
    e.add_argument("--tool-choice", default="auto", choices=["auto", "required"],
                   help="BFCL suites: 'required' makes each turn's first reply a call of a declared tool "
                        "(decoded under the tools' grammar), later replies 'auto'; 'auto' (default): prose allowed")
    e.add_argument("--turns", default="all", choices=["all", "evidence"],
                   help="BFCL suites: the turns the model answers: all (default), or only those with evidence among "
                        "the earlier outputs, on the tasks that have such a turn (the drop_evidence / drop_other "
                        "comparison at a fraction of the cost; --limit and --offset then count those tasks)")
    e.add_argument("--batch", type=int, default=None, metavar="N",
                   help="BFCL suites: (policy, task) jobs judged at once, their replies decoded in shared steps "
                        "(default: 8; 1: one at a time, as before); not part of the run's identity, so a rerun with "
                        "another --batch resumes")
    e.add_argument("--out", default=None,
                   help="results JSON, per-task parquet next to it (default: eval-results.json)")
    e.add_argument("--force", action="store_true", help="overwrite --out (and its parquet and plot) when they exist")
    e.add_argument("--plot", default=None, help="cost vs pass-rate PNG (with --compare)")
    e.set_defaults(func=_eval)

    lv = sub.add_parser("live", help="live agent episodes against an OpenAI-compatible endpoint")
    lv.add_argument("--endpoint", required=True,
                    help="server base URL, e.g. http://127.0.0.1:30000 (its API key, if any, from AKV_API_KEY)")
    lv.add_argument("--model", default="gemma-3-270m",
                    help="model for local token counts (its tokenizer) and its default template")
    lv.add_argument("--served-model", default=None, help="the request's model field (default: --model)")
    lv.add_argument("--template", default=None, help="the server's " + TEMPLATE_HELP.format(fallback="gemma"))
    who = lv.add_mutually_exclusive_group()
    who.add_argument("--policy", default="full",
                     help="a policy (with --params), or several sharing the server: NAME or NAME:k=v,k=v, "
                          "comma-separated (each in RUN_DIR/LABEL)")
    who.add_argument("--run", default=None, metavar="RUN_DIR",
                     help="play a candidate of a search run (see --pick), under the run's frame guard if it had one")
    lv.add_argument("--pick", default=None,
                    help="with --run: 'headline' (the default), 'best', a candidate id or label")
    lv.add_argument("--params", nargs="*", default=[], help="k=v parameters of --policy")
    lv.add_argument("--suite", default="smoke", help="suite name or path of a task set on disk")
    lv.add_argument("--split", default="heldout", help="a split of the task set, or 'all'")
    lv.add_argument("--limit", type=int, default=4, help="at most N tasks (spread over families)")
    lv.add_argument("--probes", type=int, default=1, help="episodes per task (one per probe)")
    lv.add_argument("--max-steps", type=int, default=8)
    lv.add_argument("--max-tokens", type=int, default=96)
    lv.add_argument("--tool-choice", choices=("required", "auto"), default="required",
                    help="OpenAI tool_choice of each turn where the template declares the tools (chatml): "
                         "'required' opens every reply with a call (answers come by submit_answer)")
    lv.add_argument("--rates", default="gpt-oss-120b")
    lv.add_argument("--concurrency", type=int, default=1, metavar="N",
                    help="episodes in flight at once against the endpoint (its scheduler batches them)")
    lv.add_argument("--run-dir", default=None,
                    help="checkpoints (rerun to resume); default runs/live-POLICY; several policies: RUN_DIR/POLICY")
    lv.add_argument("--out", default=None, help="results JSON (default RUN_DIR/live.json; one policy only)")
    lv.add_argument("--reference", default=None, metavar="RUN_DIR",
                    help="a run of the same policies (laid out as --run-dir) to compare with: answers, verdicts "
                         "and reply tokens that differ, in the summary's versus_reference")
    lv.set_defaults(func=_live)

    ss = sub.add_parser("survival-search", help="tune survival policies on the workload simulator")
    ss.add_argument("trace", nargs="?", help="a workload trace (akv workload generate); not with --evolve")
    ss.add_argument("--survival", default=None, help="comma-separated families (default: all)")
    ss.add_argument("--trials", type=int, default=20, help="Optuna trials per family (trial 0: defaults)")
    ss.add_argument("--pool-tokens", type=int, default=None, help="KV pool budget (default: the trace's)")
    ss.add_argument("--host-tokens", type=int, default=None)
    ss.add_argument("--max-batch", type=int, default=4)
    ss.add_argument("--seed", type=int, default=0)
    ss.add_argument("--out", default="runs/survival-search", help="directory for trials.jsonl and summary.json")
    ss.add_argument("--evolve", default=None, metavar="CONFIG",
                    help="evolve survival programs with the proposers (experiments/survival-evolve.yaml)")
    ss.add_argument("--run-dir", default=None, help="--evolve: the run directory (default runs/NAME)")
    ss.add_argument("--confirm-replay", type=int, default=0, metavar="N",
                    help="--evolve: replay the N best on held-out on the real engine (--model)")
    ss.add_argument("--model", default="gemma-3-270m", help="--confirm-replay: the engine's model")
    ss.add_argument("--confirm-clock", default="wall", choices=["wall", "model"],
                    help="--confirm-replay: wall-clock replay, or the engine on the simulator's model clock")
    ss.add_argument("--confirm-traces", type=int, default=0, metavar="N",
                    help="--confirm-replay: replay on N held-out traces, a seed of each kind in turn (0: every one)")
    ss.set_defaults(func=_survival_search)

    se = sub.add_parser("search", help="evolve cache policies (the main job)")
    se.add_argument("config", nargs="?", help="experiment YAML")
    se.add_argument("--run-dir", default=None)
    se.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue a killed search")
    se.add_argument("--replicas", type=int, default=None, help="evaluate on N Ray replicas")
    se.add_argument("--ray-address", default=None, help="auto or HOST:PORT of an existing Ray cluster")
    se.add_argument("--in-process", action="store_true",
                    help="evaluate in this process (with --resume: a run started on Ray goes on without it)")
    se.set_defaults(func=_search)

    im = sub.add_parser("import", help="agent logs (OpenAI chat JSONL/JSON, ATIF) -> a task file of the project's "
                                       "schema (no probes)")
    im.add_argument("file", help="the log file: OpenAI chat logs (one conversation a line, or a JSON array) or ATIF "
                                 "trajectories; the format is recognised by content")
    im.add_argument("--out", required=True, help="the task file to write (JSON lines, docs/tasks.md)")
    im.add_argument("--heldout-share", type=float, default=0.25,
                    help="share of sessions put in the heldout split, by a stable hash of their id (default: 0.25)")
    im.set_defaults(func=_import)

    r = sub.add_parser("report", help="write report.html for a run directory")
    r.add_argument("run_dir")
    r.set_defaults(func=_report)

    cmp = sub.add_parser("compare", help="two candidates of a run paired over tasks (stored results; no model)")
    cmp.add_argument("run_dir")
    cmp.add_argument("a", help="candidate id, label, or 'best' (as --pick)")
    cmp.add_argument("b", help="the candidate it is compared with")
    cmp.add_argument("--split", default="heldout", choices=["heldout", "train"])
    cmp.set_defaults(func=_compare)

    pool = sub.add_parser("pool", help="the headlines of several runs pooled over their held-out tasks (no model)")
    pool.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                      help="runs judged on distinct held-out tasks (e.g. every confirmation of one config)")
    pool.add_argument("--out", default=None, help="write the pooled comparisons as JSON here")
    pool.add_argument("--samples", type=int, default=2000, help="bootstrap resamples (>= 100)")
    pool.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    pool.add_argument("--versus", default=None,
                      help="pool only the comparison with this comparator (e.g. tuning-only: the evolved choice "
                           "against the ablation arm's tuned seed program; every run must have it). Survival "
                           "evolutions (akv survival-search --evolve) pool over traces: family or tuning-only")
    pool.set_defaults(func=_pool)

    x = sub.add_parser("export", help="write a chosen policy as a standalone module")
    x.add_argument("run_dir")
    x.add_argument("--pick", default="best",
                   help="candidate id, label, 'best' (the highest held-out pass, then the lowest cost) or "
                        "'headline' (the choice headline.json reports, made on train; cache-policy runs)")
    x.add_argument("--out", required=True)
    x.add_argument("--format", default="module", choices=["module", "akv-harness"],
                   help="module: decide(messages) / apply(body); akv-harness: the public AKV policy interface, "
                        "HarnessPolicy().decide(request) (docs/export.md)")
    x.add_argument("--frame-guard", action="store_true",
                   help="guard every decision (a message leaves only after an assistant turn read it; the system "
                        "prompt and first user message stay); on by itself for a run searched under eval.frame_guard")
    x.set_defaults(func=_export)

    d = sub.add_parser("dashboard", help="MLflow UI and optuna-dashboard for a run directory")
    d.add_argument("run_dir")
    d.add_argument("--mlflow-port", type=int, default=0)
    d.add_argument("--optuna-port", type=int, default=0)
    d.set_defaults(func=_dashboard)

    ls = sub.add_parser("list", help="what there is: policies (with parameters), suites, models, or a run's candidates")
    ls.add_argument("what", choices=["policies", "suites", "models", "candidates"])
    ls.add_argument("run_dir", nargs="?", help="with candidates: the run directory")
    ls.set_defaults(func=_list)

    add_oracle(sub)
    add_workload(sub)
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    _add_debug(sub)
    return parser


def _add_debug(sub: argparse._SubParsersAction[Any]) -> None:
    """``--debug`` after the command name too, on every (nested) command."""
    for command in sub.choices.values():
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help="show the traceback of an error")
        # argparse lists a parser's arguments and subcommands under private names only
        for action in command._actions:  # noqa: SLF001
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
                _add_debug(action)


def user_error(err: BaseException) -> bool:
    """Whether ``err`` is the user's to fix (one line, exit 2) rather than a bug (traceback): the
    project's errors, and files the user named that are missing, unreadable, or not JSON / YAML."""
    import json

    import yaml

    return isinstance(err, (AKVError, FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError,
                            json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError))


def error_line(err: BaseException) -> str:
    """``err`` as one line: its type and message (an OS error: what and which file)."""
    if isinstance(err, OSError) and err.strerror:
        text = f"{err.strerror}: {err.filename}" if err.filename is not None else err.strerror
    else:
        text = str(err)
    name = "" if type(err) is AKVError else f"{type(err).__name__}: "
    return name + " ".join(text.split())


# The template a command uses for a model without one of its own (kept for the first model's runs).
_TEMPLATE_FALLBACK = {"eval": "plain", "oracle": "plain", "serve": "gemma", "proxy": "gemma", "live": "gemma"}


def _resolve_template(args: argparse.Namespace) -> None:
    """Fill ``args.template`` with the model's own template when it was not given, and refuse an
    unknown one before any task or model is loaded."""
    from engine.models.catalog import default_template
    from engine.template import get_template

    if not hasattr(args, "template"):
        return
    if args.template is None:
        fallback = _TEMPLATE_FALLBACK.get(args.command, "plain")
        args.template = default_template(getattr(args, "model", "") or "", fallback)
    get_template(args.template)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "eval":
            _eval_settings(args)
        _resolve_template(args)
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except Exception as err:
        if getattr(args, "debug", False) or not user_error(err):
            raise
        print(f"akv {args.command}: {error_line(err)} (--debug for the traceback)", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())

