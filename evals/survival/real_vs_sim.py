"""The survival report: every policy on two traces, real engine and simulator side by side.

    python -m evals.survival.real_vs_sim [--model gemma-3-270m] [--sessions 6] [--time-scale 0.25]
        [--policies lru,ttl,...] [--calibration FILE] [--skip-real] [--cluster-sessions 2000]

Steps: generate a tool-heavy and a memory-tight trace; replay every policy on the real engine
(wall clock) and simulate it with the measured calibration (``--calibration``, default the stored
one of ``--model``: ``akv workload calibrate``); compute the simulator's prediction error per
metric; then simulate cluster-scale traces (thousands of sessions, a GPU-sized pool; *assumed* GPU speeds,
labelled as such). Writes ``bench/results/survival-report.json``, the traces and the calibration
under ``bench/results/``, and the tables to ``docs/survival-results.md`` (and between the
``<!-- results:begin -->`` / ``<!-- results:end -->`` markers of ``docs/survival.md``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evals.survival.calibration import RESULTS, assumed_gpu, default_calibration, load_calibration
from evals.survival.generate import generate_trace
from evals.survival.metrics import METRIC_KEYS
from evals.survival.replay import ReplayConfig, replay
from evals.survival.sim import SimConfig, simulate
from evals.survival.trace import save_trace
from search_spaces.survival import SURVIVAL_FAMILIES

DOCS = Path(__file__).resolve().parents[2] / "docs"
KINDS = ("tool-heavy", "memory-tight")

GPU_ASSUMED = assumed_gpu()  # cluster-scale speeds: NOT measured here (stated in its source)

LABELS = {"jct_mean_s": "JCT mean (s)", "jct_p95_s": "JCT p95 (s)", "resume_ttft_p50_s": "resume TTFT p50 (s)",
          "resume_ttft_p95_s": "resume TTFT p95 (s)", "recompute_tokens": "recompute tokens",
          "peak_pool_bytes": "peak pool (MB)"}


def rel_error(sim: float | None, real: float | None) -> float | None:
    """|sim - real| / real; 0.0 when both are 0; None when undefined (real 0, sim not)."""
    if sim is None or real is None:
        return None
    if real == 0:
        return 0.0 if sim == 0 else None
    return abs(sim - real) / abs(real)


def concordance(real: dict[str, float], sim: dict[str, float]) -> float | None:
    """Share of policy pairs that the simulator orders as the real engine does (ties count as agreeing
    only with ties)."""
    names = sorted(real)
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    if not pairs:
        return None
    def sign(x: float) -> int:
        return (x > 1e-9) - (x < -1e-9)
    same = sum(sign(real[a] - real[b]) == sign(sim[a] - sim[b]) for a, b in pairs)
    return same / len(pairs)


def _fmt(key: str, v: Any) -> str:
    if v is None:
        return "-"
    if key == "peak_pool_bytes":
        return f"{v / 1e6:.1f}"
    if key == "recompute_tokens":
        return f"{int(v)}"
    return f"{v:.2f}"


def markdown(report: dict[str, Any]) -> str:
    sources = "; ".join(f"{k}: {c['cost']['source']}" for k, c in report["calibrations"].items())
    out = ["## Measured: real engine vs simulator", "",
           f"Model `{report['model']}` on this machine, {report['sessions']} sessions per trace, time scale "
           f"{report['time_scale']}, token scale {report['token_scale']}. Each cell is **real / simulated**. "
           f"Simulator calibration ({sources}).", ""]
    for kind in report["traces"]:
        t = report["traces"][kind]
        out += [f"### {kind} (pool {t['pool_tokens']} tokens, host {t['host_tokens']} tokens)", "",
                "| policy | " + " | ".join(LABELS[k] for k in METRIC_KEYS) + " |",
                "|---|" + "---|" * len(METRIC_KEYS)]
        for name, row in t["policies"].items():
            cells = [f"{_fmt(k, row['real'].get(k) if row['real'] else None)} / {_fmt(k, row['sim'].get(k))}"
                     for k in METRIC_KEYS]
            out.append(f"| `{name}` | " + " | ".join(cells) + " |")
        out.append("")
    out += ["### Simulator prediction error (|sim - real| / real, over policies)", "",
            "| trace | " + " | ".join(LABELS[k] for k in METRIC_KEYS) + " |", "|---|" + "---|" * len(METRIC_KEYS)]
    for kind, errs in report["errors"].items():
        out.append(f"| {kind} | " + " | ".join(
            "-" if errs[k]["mean"] is None else f"{100 * errs[k]['mean']:.0f}% (ranks {errs[k]['concordance']:.0%})"
            for k in METRIC_KEYS) + " |")
    for kind, noise in report.get("noise", {}).items():
        out.append(f"| {kind}: real engine, lru run again | " + " | ".join(
            "-" if noise.get(k) is None else f"{100 * noise[k]:.0f}%" for k in METRIC_KEYS) + " |")
    out += ["", "Percentages: mean relative error over the policies; *ranks*: share of policy pairs the "
            "simulator orders as the real engine does. The *lru run again* rows are the real engine's own "
            "run-to-run difference on the same trace (the machine's noise floor).", ""]
    if report.get("cluster"):
        c = report["cluster"]
        out += [f"## Simulated at cluster scale ({c['sessions']} sessions arriving at {c['arrival_rate_per_s']}/s, "
                f"pool {c['pool_tokens']} tokens, host {c['host_tokens']} tokens, batch {c['max_batch']})", "",
                f"Speeds **assumed**, not measured: {c['cost_source']}. `lru_ranked*` is not a policy but the "
                "structural baseline: the survival layer's ranks with every score equal (generated branches nobody "
                "resends go first, sessions waiting for admission are kept, LRU otherwise).", ""]
        for kind, rows in c["traces"].items():
            out += [f"### {kind}", "", "| policy | " + " | ".join(LABELS[k] for k in METRIC_KEYS) + " | sim wall (s) |",
                    "|---|" + "---|" * (len(METRIC_KEYS) + 1)]
            for name, r in rows.items():
                out.append(f"| `{name}` | " + " | ".join(_fmt(k, r.get(k)) for k in METRIC_KEYS)
                           + f" | {r['wall_s']:.1f} |")
            out.append("")
    out += [f"Produced by `{report['command']}` in {report['wall_s'] / 60:.1f} min.", ""]
    return "\n".join(out)


def _splice(doc: Path, text: str) -> None:
    if not doc.is_file():
        return
    body = doc.read_text(encoding="utf-8")
    begin, end = "<!-- results:begin -->", "<!-- results:end -->"
    if begin in body and end in body:
        head, rest = body.split(begin, 1)
        tail = rest.split(end, 1)[1]
        doc.write_text(f"{head}{begin}\n{text}\n{end}{tail}", encoding="utf-8")


def noise(args: argparse.Namespace, report: dict[str, Any], engine: Any) -> dict[str, Any]:
    """Replay lru again ``args.repeat_lru`` times per trace: relative difference to the first lru run."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        first = report["traces"][kind]["policies"]["lru"]["real"]
        trace = generate_trace(kind, report["sessions"], args.seed, report["time_scale"],
                               token_scale=report["token_scale"])
        cal = load_calibration(args.calibration) if args.calibration else default_calibration(report["model"])
        diffs: dict[str, list[float]] = {k: [] for k in METRIC_KEYS}
        for _ in range(args.repeat_lru):
            again = replay(trace, "lru", ReplayConfig(calibration=cal, max_batch=args.max_batch), engine=engine)
            print(f"{kind:13s} lru again         " + " ".join(f"{k}={_fmt(k, again.get(k))}" for k in METRIC_KEYS),
                  flush=True)
            for k in METRIC_KEYS:
                e = rel_error(again.get(k), first.get(k))
                if e is not None:
                    diffs[k].append(e)
        out[kind] = {k: (sum(v) / len(v) if v else None) for k, v in diffs.items()}
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.from_json:
        t0 = time.perf_counter()
        prev: dict[str, Any] = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
        if args.repeat_lru:
            from engine.engine import Engine

            prev["noise"] = noise(args, prev, Engine.from_pretrained(prev["model"], threads=args.threads))
        if args.cluster_sessions:
            prev["cluster"] = cluster(prev["policies"], args.cluster_sessions, args.seed)
        prev["command"] += " && python -m evals.survival.real_vs_sim " + " ".join(sys.argv[1:])
        prev["wall_s"] += time.perf_counter() - t0
        return prev
    t0 = time.perf_counter()
    policies = [p for p in args.policies.split(",") if p] if args.policies else list(SURVIVAL_FAMILIES)
    engine = None
    if not args.skip_real:
        from engine.engine import Engine

        engine = Engine.from_pretrained(args.model, threads=args.threads)
    cal = load_calibration(args.calibration) if args.calibration else default_calibration(args.model)
    cal.check_model(args.model)
    report: dict[str, Any] = {"model": args.model, "sessions": args.sessions, "time_scale": args.time_scale,
                              "token_scale": args.token_scale, "policies": policies, "traces": {}, "errors": {},
                              "calibrations": {},
                              "command": "python -m evals.survival.real_vs_sim " + " ".join(sys.argv[1:])}
    for kind in KINDS:
        trace = generate_trace(kind, args.sessions, args.seed, args.time_scale, token_scale=args.token_scale)
        save_trace(trace, RESULTS / "traces" / f"{kind}-{args.sessions}.jsonl")
        rows: dict[str, Any] = {}
        for name in policies:
            real = None
            if engine is not None:
                real = replay(trace, name, ReplayConfig(calibration=cal, max_batch=args.max_batch), engine=engine)
                real = {k: v for k, v in real.items() if k != "samples"}
            sim = simulate(trace, name, SimConfig(calibration=cal, max_batch=args.max_batch))
            rows[name] = {"real": real, "sim": sim}
            print(f"{kind:13s} {name:17s} " + " ".join(
                f"{k}={_fmt(k, real.get(k) if real else None)}/{_fmt(k, sim.get(k))}" for k in METRIC_KEYS), flush=True)
        report["calibrations"][kind] = {"model": cal.model, "machine": dict(cal.machine), "cost": cal.cost.wire(),
                                        "timing": cal.timing.wire()}
        report["traces"][kind] = {"pool_tokens": trace.header.pool_tokens, "host_tokens": trace.header.host_tokens,
                                  "policies": rows}
        if engine is not None:
            report["errors"][kind] = {k: _errors(rows, k) for k in METRIC_KEYS}
    if args.repeat_lru and engine is not None and "lru" in policies:
        report["noise"] = noise(args, report, engine)
    if args.cluster_sessions:
        report["cluster"] = cluster(policies, args.cluster_sessions, args.seed)
    report["wall_s"] = time.perf_counter() - t0
    return report


def _errors(rows: dict[str, Any], key: str) -> dict[str, Any]:
    errs = {n: rel_error(r["sim"].get(key), r["real"].get(key)) for n, r in rows.items() if r["real"]}
    defined = [e for e in errs.values() if e is not None]
    real = {n: r["real"][key] for n, r in rows.items() if r["real"] and r["real"].get(key) is not None}
    sim = {n: rows[n]["sim"][key] for n in real if rows[n]["sim"].get(key) is not None}
    return {"per_policy": errs, "mean": sum(defined) / len(defined) if defined else None,
            "max": max(defined) if defined else None, "concordance": concordance(real, sim) if len(sim) == len(real)
            else None}


# The structural baseline: scored eviction order with every score equal (the weighted family with
# zero weights). It separates what the survival layer's ranks do (generated branches nobody resends
# go first, resumed sessions waiting for admission are kept) from what each policy's scores add.
RANKED = {"name": "weighted", "params": {"w_cost": 0.0, "w_gap": 0.0, "w_ref": 0.0, "w_intent": 0.0}}
CLUSTER_RATE_PER_S, CLUSTER_POOL, CLUSTER_HOST, CLUSTER_BATCH = 3.0, 150_000, 300_000, 64


def cluster(policies: Sequence[str], sessions: int, seed: int) -> dict[str, Any]:
    pool, host, batch = CLUSTER_POOL, CLUSTER_HOST, CLUSTER_BATCH
    out: dict[str, Any] = {"sessions": sessions, "pool_tokens": pool, "host_tokens": host, "max_batch": batch,
                           "arrival_rate_per_s": CLUSTER_RATE_PER_S,
                           "cost_source": GPU_ASSUMED.cost.source, "traces": {}}
    specs: list[tuple[str, Any]] = [(n, n) for n in policies]
    specs.insert(1, ("lru_ranked*", RANKED))
    for kind in KINDS:
        trace = generate_trace(kind, sessions, seed, 1.0, arrival_rate_per_s=CLUSTER_RATE_PER_S)
        rows = {}
        for name, spec in specs:
            t = time.perf_counter()
            r = simulate(trace, spec, SimConfig(calibration=GPU_ASSUMED, pool_tokens=pool, host_tokens=host,
                                                max_batch=batch))
            rows[name] = {**{k: r.get(k) for k in (*METRIC_KEYS, "hol_wait_mean_s", "swap_out_bytes", "actions")},
                          "wall_s": time.perf_counter() - t}
            print(f"cluster {kind:13s} {name:17s} " + " ".join(f"{k}={_fmt(k, r.get(k))}" for k in METRIC_KEYS),
                  flush=True)
        out["traces"][kind] = rows
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evals.survival.real_vs_sim", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--sessions", type=int, default=4)
    p.add_argument("--time-scale", type=float, default=0.25)
    p.add_argument("--token-scale", type=float, default=0.25)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-batch", type=int, default=4)
    p.add_argument("--policies", default=None, help="comma-separated (default: all)")
    p.add_argument("--calibration", default=None, help="use this calibration (default: the stored one of --model)")
    p.add_argument("--skip-real", action="store_true", help="simulator only")
    p.add_argument("--cluster-sessions", type=int, default=2000, help="0 skips the cluster-scale simulation")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--repeat-lru", type=int, default=1, help="replay lru again N times per trace (noise floor)")
    p.add_argument("--from-json", default=None,
                   help="reuse an earlier report's real and simulated rows; redo the noise runs and the cluster part")
    p.add_argument("--out-json", default=str(RESULTS / "survival-report.json"))
    p.add_argument("--out-md", default=str(DOCS / "survival-results.md"))
    args = p.parse_args(argv)
    report = run(args)
    Path(args.out_json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out_json).write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    text = markdown(report)
    Path(args.out_md).write_text("# Tool-gap survival: measured results\n\n" + text, encoding="utf-8")
    _splice(DOCS / "survival.md", text)
    print(f"wrote {args.out_json} and {args.out_md}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
