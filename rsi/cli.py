"""The ``akv`` command line: thin wrappers over the library (no logic lives here).

    akv serve --model gemma-3-270m --host 127.0.0.1 --port 30000
    akv eval --policy rolling_drop --params keep_tool_responses=4 --split train --out results.json
    akv eval --compare full,rolling_drop,standard,text_engineering --plot compare.png
    akv search experiments/quickstart.yaml [--run-dir DIR] | akv search --resume DIR
    akv report DIR | akv export DIR --pick best --out policy.py | akv dashboard DIR
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _serve(args: argparse.Namespace) -> int:
    import torch

    from engine.engine import Engine
    from engine.server import create_app, serve
    from engine.settings import settings

    pool = 0 if args.no_reuse else int(args.pool_gb * (1 << 30))
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    eng = Engine.from_pretrained(args.model, template=args.template, pool_bytes=pool,
                                 host_bytes=int(args.host_gb * (1 << 30)), threads=args.threads,
                                 device=args.device, dtype=getattr(torch, dtype))
    snapshots = args.snapshot_dir or str(settings().cache_dir / "snapshots")
    survival = None
    if args.survival:
        from engine.survival import SurvivalManager, TreeBackend
        from search_spaces.survival.registry import get_survival_policy

        survival = SurvivalManager(TreeBackend(eng.tree, eng.geometry.bytes_per_token),
                                   get_survival_policy(args.survival))
    app = create_app(eng, snapshot_dir=snapshots, max_queue=args.max_queue, max_batch=args.max_batch,
                     timeout=args.timeout, aliases=(args.model,), survival=survival)
    print(f"serving {eng.name} on http://{args.host}:{args.port} (snapshots in {snapshots})", flush=True)
    serve(app, args.host, args.port)
    return 0


def _parse_params(items: Sequence[str]) -> dict[str, Any]:
    import yaml

    out = {}
    for kv in items:
        k, sep, v = kv.partition("=")
        if not sep:
            raise SystemExit(f"--params expects key=value, got {kv!r}")
        out[k.strip()] = yaml.safe_load(v)
    return out


def _eval(args: argparse.Namespace) -> int:
    from evals.cli import run_eval

    return run_eval(args, _parse_params(args.params or []))


def _live(args: argparse.Namespace) -> int:
    from evals.live import main_cli

    return main_cli(args, _parse_params(args.params or []))


def _survival_search(args: argparse.Namespace) -> int:
    from rsi.survival_search import main_cli

    return main_cli(args)


def _search(args: argparse.Namespace) -> int:
    from rsi.config import load_config
    from rsi.search import Search, load_run_config

    overrides: dict[str, Any] = {}
    if args.replicas is not None:
        overrides["executor.replicas"] = args.replicas
        overrides["executor.kind"] = "ray"
    if args.ray_address:
        overrides["executor.ray_address"] = args.ray_address
        overrides["executor.kind"] = "ray"
    if args.resume:
        run_dir = Path(args.resume)
        config = load_run_config(run_dir)
    else:
        if not args.config:
            raise SystemExit("akv search: give a CONFIG file, or --resume RUN_DIR")
        config = load_config(args.config, overrides)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = Path(args.run_dir) if args.run_dir else Path("runs") / f"{config.name}-{stamp}"
    t0 = time.perf_counter()
    result = Search(config, run_dir).run()
    print(f"search finished in {time.perf_counter() - t0:.0f}s; report: {(result.run_dir / 'report.html').resolve()}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from rsi.report import write_report

    write_report(args.run_dir)
    print(f"report: {(Path(args.run_dir) / 'report.html').resolve()}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from rsi.export import export_pick

    path = export_pick(Path(args.run_dir), args.pick, Path(args.out))
    print(f"exported {args.pick} to {path}")
    return 0


def _dashboard(args: argparse.Namespace) -> int:
    from rsi.dashboard import run_dashboards

    return run_dashboards(Path(args.run_dir), args.mlflow_port, args.optuna_port)


def build_parser() -> argparse.ArgumentParser:
    from evals.workload.cli import add_parser as add_workload

    parser = argparse.ArgumentParser(prog="akv", description="AKV-RSI: KV-cache policy search and serving")
    sub = parser.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the OpenAI-compatible AKV server")
    s.add_argument("--model", default="gemma-3-270m", help="gemma-3-270m, tiny-random, or a local checkpoint")
    s.add_argument("--template", default=None, help="chat template: gemma or plain")
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
    s.add_argument("--survival", default=None,
                   help="tool-gap survival policy for paused sessions (lru, ttl, min_waste, ...; docs/survival.md)")
    s.set_defaults(func=_serve)

    e = sub.add_parser("eval", help="score policies on a task suite (cost and pass rate)")
    e.add_argument("--policy", default=None, help="a policy name (or drop_evidence)")
    e.add_argument("--params", nargs="*", default=[], help="k=v parameters of --policy")
    e.add_argument("--compare", default=None, help="comma-separated policies to compare side by side")
    e.add_argument("--suite", default="default", help="suite name or path of a task set on disk")
    e.add_argument("--split", default="train", choices=["train", "heldout"])
    e.add_argument("--limit", type=int, default=0, help="at most N tasks (spread over families)")
    e.add_argument("--model", default="gemma-3-270m")
    e.add_argument("--template", default="plain")
    e.add_argument("--rates", default="gpt-oss-120b")
    e.add_argument("--scoring", default="loglik", choices=["loglik", "generate"])
    e.add_argument("--out", default=None, help="results JSON (per-task parquet next to it)")
    e.add_argument("--plot", default=None, help="cost vs pass-rate PNG (with --compare)")
    e.set_defaults(func=_eval)

    lv = sub.add_parser("live", help="live agent episodes against an OpenAI-compatible endpoint")
    lv.add_argument("--endpoint", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
    lv.add_argument("--model", default="gemma-3-270m", help="model for local token counts (tokenizer)")
    lv.add_argument("--served-model", default=None, help="the request's model field (default: --model)")
    lv.add_argument("--template", default="gemma", help="the server's chat template (gemma or plain)")
    lv.add_argument("--policy", default="full")
    lv.add_argument("--params", nargs="*", default=[], help="k=v parameters of --policy")
    lv.add_argument("--suite", default="smoke", help="suite name or path of a task set on disk")
    lv.add_argument("--split", default="heldout", choices=["train", "heldout"])
    lv.add_argument("--limit", type=int, default=4, help="at most N tasks (spread over families)")
    lv.add_argument("--probes", type=int, default=1, help="episodes per task (one per probe)")
    lv.add_argument("--max-steps", type=int, default=8)
    lv.add_argument("--max-tokens", type=int, default=96)
    lv.add_argument("--rates", default="gpt-oss-120b")
    lv.add_argument("--run-dir", default=None, help="checkpoints (rerun to resume); default runs/live-POLICY")
    lv.add_argument("--out", default=None, help="results JSON (default RUN_DIR/live.json)")
    lv.set_defaults(func=_live)

    ss = sub.add_parser("survival-search", help="tune survival policies on the workload simulator")
    ss.add_argument("trace", help="a workload trace (akv workload generate)")
    ss.add_argument("--survival", default=None, help="comma-separated families (default: all)")
    ss.add_argument("--trials", type=int, default=20, help="Optuna trials per family (trial 0: defaults)")
    ss.add_argument("--pool-tokens", type=int, default=None, help="KV pool budget (default: the trace's)")
    ss.add_argument("--host-tokens", type=int, default=None)
    ss.add_argument("--max-batch", type=int, default=4)
    ss.add_argument("--seed", type=int, default=0)
    ss.add_argument("--out", default="runs/survival-search", help="directory for trials.jsonl and summary.json")
    ss.set_defaults(func=_survival_search)

    se = sub.add_parser("search", help="evolve cache policies (the main job)")
    se.add_argument("config", nargs="?", help="experiment YAML")
    se.add_argument("--run-dir", default=None)
    se.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue a killed search")
    se.add_argument("--replicas", type=int, default=None, help="evaluate on N Ray replicas")
    se.add_argument("--ray-address", default=None, help="auto or HOST:PORT of an existing Ray cluster")
    se.set_defaults(func=_search)

    r = sub.add_parser("report", help="write report.html for a run directory")
    r.add_argument("run_dir")
    r.set_defaults(func=_report)

    x = sub.add_parser("export", help="write a chosen policy as a standalone module")
    x.add_argument("run_dir")
    x.add_argument("--pick", default="best", help="candidate id, label, or 'best'")
    x.add_argument("--out", required=True)
    x.set_defaults(func=_export)

    d = sub.add_parser("dashboard", help="MLflow UI and optuna-dashboard for a run directory")
    d.add_argument("run_dir")
    d.add_argument("--mlflow-port", type=int, default=0)
    d.add_argument("--optuna-port", type=int, default=0)
    d.set_defaults(func=_dashboard)

    add_workload(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

