"""The ``akv`` command line: thin wrappers over the library (no logic lives here).

    akv serve --model gemma-3-270m --host 127.0.0.1 --port 30000
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _serve(args: argparse.Namespace) -> int:
    from engine.engine import Engine
    from engine.server import create_app, serve
    from engine.settings import settings

    pool = 0 if args.no_reuse else int(args.pool_gb * (1 << 30))
    eng = Engine.from_pretrained(args.model, template=args.template, pool_bytes=pool,
                                 host_bytes=int(args.host_gb * (1 << 30)), threads=args.threads)
    snapshots = args.snapshot_dir or str(settings().cache_dir / "snapshots")
    app = create_app(eng, snapshot_dir=snapshots, max_queue=args.max_queue, max_batch=args.max_batch,
                     timeout=args.timeout, aliases=(args.model,))
    print(f"serving {eng.name} on http://{args.host}:{args.port} (snapshots in {snapshots})", flush=True)
    serve(app, args.host, args.port)
    return 0


def build_parser() -> argparse.ArgumentParser:
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
    s.set_defaults(func=_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
