"""One table of the speed goals: ``python -m bench.speed_summary [--run RUN_DIR]`` (``make bench`` runs the
benchmarks first, then this).

It reads the results the benchmarks wrote (``bench/results/``: ``engine-<model>.json`` from
``bench.engine_speed --peak``, ``eval-throughput.json`` from ``bench.eval_speed``,
``eval-lockstep.json`` from ``bench.eval_speed --lockstep``, ``screen-speed-*.json`` from
``bench.screen_speed``, ``server-limits-<model>.json`` from ``bench.server_limits``,
``weight-formats-<model>.json`` from ``bench.weight_formats``) and a search run's own measure of
the screen against the model (inside a search, the figure the goal names): ``--run RUN_DIR`` reads
the run's ``fidelity.json`` and keeps its figure in ``screen-in-search-<model>.json``, which later
summaries read without ``--run``. It writes
``bench/results/speed-summary.json``: one row ``{"measure", "value", "goal", "met", "source"}`` per
goal, with the machine each source recorded and when. A source that is missing is a row with
``value: null`` and ``met: false``, never a guess. Every ratio is the one its benchmark measured in
one run (its own medians of repeats).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import RESULTS, write_result

MEASURES = ["engine", "evals/cache", "search_spaces", "rsi/cache"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _row(measure: str, value: float | None, goal: str, met: Callable[[float], bool], source: str,
         fmt: str = "{:.2f}x") -> dict[str, Any]:
    return {"measure": measure, "value": value, "shown": fmt.format(value) if value is not None else "missing",
            "goal": goal, "met": bool(value is not None and met(value)), "source": source}


def engine_rows(engine: dict[str, Any] | None, source: str) -> list[dict[str, Any]]:
    rows = []
    by_ctx = {r["context"]: r for r in (engine or {}).get("throughput", [])}
    for ctx in (512, 2048, 4096):
        r = by_ctx.get(ctx, {})
        ratio = r.get("prefill_ratio") or (r["prefill_tok_s_ours"] / r["prefill_tok_s_hf"]
                                           if r.get("prefill_tok_s_hf") else None)
        rows.append(_row(f"prefill vs HF at {ctx} tokens", ratio, ">= 1.5x", lambda v: v >= 1.5, source))
        rows.append(_row(f"prefill share of the measured peak at {ctx} tokens", r.get("prefill_share_of_peak"),
                         ">= 50%", lambda v: v >= 0.5, source, "{:.0%}"))
        rows.append(_row(f"decode vs HF at {ctx} tokens of context", r.get("decode_ratio"), ">= 2x",
                         lambda v: v >= 2.0, source))
    restore = (engine or {}).get("restore", {})
    rows.append(_row("restore vs the step-by-step reference", restore.get("speedup_vs_reference"), ">= 3x",
                     lambda v: v >= 3.0, source))
    rows.append(_row("restore vs a plain prefill (time ratio)", restore.get("ratio_to_plain_prefill"), "<= 1.0x",
                     lambda v: v <= 1.0, source))
    return rows


def eval_rows(evals: dict[str, Any] | None, source: str) -> list[dict[str, Any]]:
    rows = {bool(r.get("share")): r for r in (evals or {}).get("rows", [])}
    ratio = None
    if True in rows and False in rows and rows[False].get("evals_per_min"):
        ratio = rows[True]["evals_per_min"] / rows[False]["evals_per_min"]
    return [_row("evaluations/min, radix sharing vs none", ratio, ">= 4x", lambda v: v >= 4.0, source)]


def lockstep_rows(lock: dict[str, Any] | None, source: str) -> list[dict[str, Any]]:
    """A task's policies in one batched forward per probe vs one after another (``bench.eval_speed
    --lockstep``); a run whose two modes gave different rows counts as missing."""
    speedup = (lock or {}).get("speedup") if (lock or {}).get("same_rows") else None
    return [_row("evaluations/min, policies of a task in lockstep vs one at a time", speedup, "(no goal)",
                 lambda v: v > 1.0, source)]


def screen_rows(screen: dict[str, Any] | None, run: dict[str, Any] | None, screen_source: str,
                run_source: str) -> list[dict[str, Any]]:
    in_run = ((run or {}).get("speed") or {}).get("ratio")
    rows = [_row("screen vs model inside a search", in_run, ">= 3000x", lambda v: v >= 3000, run_source, "{:,.0f}x")]
    rows.append(_row("screen vs model in bench.screen_speed", (screen or {}).get("ratio"), "(no goal)",
                     lambda v: v >= 3000, screen_source, "{:,.0f}x"))
    return rows


def server_rows(server: dict[str, Any] | None, source: str) -> list[dict[str, Any]]:
    out = []
    by = {r["scenario"]: r for r in (server or {}).get("rows", [])}
    for label, key in (("3 MB prompts", "3 MB prompt"), ("100k-message bodies", "100k messages")):
        r: dict[str, Any] = next((v for k, v in by.items() if k.startswith(key)), {})
        out.append(_row(f"small-request p50 during a flood of {label}, vs idle", r.get("ratio_vs_idle"), "<= 1.5x",
                        lambda v: v <= 1.5, source))
    return out


def format_rows(formats: dict[str, Any] | None, source: str) -> list[dict[str, Any]]:
    """The opt-in bfloat16 format (``bench.weight_formats``): its prefill against plain transformers
    in float32 and its evaluations against the float32 engine's, with the probes it changes. The
    goals above are the default float32 engine's; these rows have none."""
    by = {r["tokens"]: r.get("bfloat16", {}) for r in (formats or {}).get("prefill", [])}
    rows = [_row(f"prefill vs HF float32 at {n} tokens, bfloat16 weights (opt-in)", by.get(n, {}).get("vs_hf_float32"),
                 "(no goal)", lambda v: v >= 1.5, source) for n in (512, 2048)]
    dec = (formats or {}).get("decode", {}).get("bfloat16", {})
    rows.append(_row("decode vs float32 at 512 tokens of context, bfloat16 (opt-in)", dec.get("vs_float32"),
                     "(no goal)", lambda v: v >= 1.0, source))
    ev = (formats or {}).get("evaluation", {})
    rows.append(_row("evaluations/min, bfloat16 vs float32 (opt-in)", ev.get("speedup"), "(no goal)",
                     lambda v: v > 1.0, source))
    flipped = ev["probes_flipped"] / ev["probes"] if ev.get("probes") else None
    rows.append(_row("probes whose pass changes, bfloat16 vs float32", flipped, "(no goal)", lambda v: v == 0,
                     source, "{:.1%}"))
    return rows


def in_search(results: Path, model: str, run_dir: Path | None) -> tuple[dict[str, Any] | None, str]:
    """The screen-vs-model figure of a search: read from ``run_dir``'s ``fidelity.json`` and kept
    in ``results`` (with the run's name), or the one kept there before."""
    kept = results / f"screen-in-search-{model}.json"
    if run_dir is None:
        return _load(kept), _shown(kept)
    fidelity = _load(run_dir / "fidelity.json")
    if fidelity is None or not (fidelity.get("speed") or {}).get("ratio"):
        return None, f"{run_dir / 'fidelity.json'} (no speed figure)"
    write_result(kept, {"run": run_dir.resolve().name, "speed": fidelity["speed"]}, measures=MEASURES)
    return _load(kept), _shown(kept)


def _shown(path: Path) -> str:
    """``path`` relative to the repository when inside it (results are read from a checkout)."""
    try:
        return str(path.resolve().relative_to(RESULTS.parent.parent))
    except ValueError:
        return str(path)


def summary(results: Path, model: str, run_dir: Path | None) -> list[dict[str, Any]]:
    engine = results / f"engine-{model}.json"
    evals = results / "eval-throughput.json"
    lock = results / "eval-lockstep.json"
    screens = sorted(results.glob(f"screen-speed-{model}-*.json"))
    server = results / f"server-limits-{model}.json"
    formats = results / f"weight-formats-{model}.json"
    run, run_source = in_search(results, model, run_dir)
    return [*engine_rows(_load(engine), _shown(engine)), *eval_rows(_load(evals), _shown(evals)),
            *lockstep_rows(_load(lock), _shown(lock)),
            *screen_rows(_load(screens[-1]) if screens else None, run,
                         _shown(screens[-1]) if screens else "bench.screen_speed (not run)", run_source),
            *server_rows(_load(server), _shown(server)), *format_rows(_load(formats), _shown(formats))]


def machines(results: Path, model: str) -> dict[str, Any]:
    engine = _load(results / f"engine-{model}.json") or {}
    return {k: engine.get(k) for k in ("machine", "cpu_model", "cpu_flags", "torch", "torch_threads", "cpus",
                                       "started", "load_average_start", "load_average_end")}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.speed_summary", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--results", default=str(RESULTS))
    p.add_argument("--run", default=None, help="a search run directory (its fidelity.json: the screen inside a search)")
    args = p.parse_args(argv)
    rows = summary(Path(args.results), args.model, Path(args.run) if args.run else None)
    width = max(len(r["measure"]) for r in rows)
    print(f"{'measure':{width}s}  {'value':>10s}  {'goal':>9s}  met")
    for r in rows:
        met = "-" if r["goal"] == "(no goal)" else "yes" if r["met"] else "no"
        print(f"{r['measure']:{width}s}  {r['shown']:>10s}  {r['goal']:>9s}  {met}")
    write_result(Path(args.results) / "speed-summary.json",
                 {"model": args.model, "machine": machines(Path(args.results), args.model), "rows": rows},
                 measures=MEASURES)
    goals = [r for r in rows if r["goal"] != "(no goal)"]
    print(f"{sum(r['met'] for r in goals)} of {len(goals)} goals met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
