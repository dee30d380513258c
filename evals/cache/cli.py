"""``akv eval``: score one policy, or compare several, on a task suite (library calls only).

The policy is a family name (``--policy``), several (``--compare``), a program file or a module
written by ``akv export`` (``--program``: read, never imported; the program runs in the sandbox),
or a candidate of a search run (``--run``/``--pick``, resolved by ``rsi.cache.export.pick_spec``).
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from engine.errors import AKVError
from engine.files import atomic_write, read_text
from evals.cache.evaluator import OTHER_CONTROL, EvalConfig, PolicySpec, Replay, TaskResult, evaluate_with
from evals.cache.generation import BatchGeneration
from evals.cache.probes import probe_format_for
from evals.cache.scoring import wilson_interval
from evals.errors import TaskError
from evals.tasks.schema import Task

ALL_SPLITS = "all"


@dataclass(frozen=True)
class Selection:
    """Tasks chosen for an evaluation. ``split``: the split they come from (``all``: every task)."""

    tasks: list[Task]
    split: str


def load_tasks(suite: str, split: str | None, limit: int = 0, offset: int = 0) -> Selection:
    """The tasks of ``split`` of a suite or task file, at most ``limit`` (0: all) spread over families,
    after the first ``offset`` of that order (``select_tasks``: a later run can take tasks an earlier
    one did not).

    ``split=None``: ``train`` when the task set has a train split, else every task (a hand-written
    file, whose tasks default to split ``custom``). ``split="all"``: every task.

    Raises:
        TaskError: an unknown suite or path, malformed tasks, a split the task set does not have
            (the message lists its splits), no tasks, or two tasks with the same id.
    """
    from evals.tasks import load_suite, select_tasks

    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise TaskError(f"--limit must be an integer >= 0 (0: every task), got {limit!r}", field="limit", value=limit)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise TaskError(f"--offset must be an integer >= 0, got {offset!r}", field="offset", value=offset)
    tasks = load_suite(suite, None)
    if not tasks:
        raise TaskError(f"{suite} holds no tasks", field="suite", value=suite)
    have = sorted({t.split for t in tasks})
    if split is None:
        split = "train" if "train" in have else ALL_SPLITS
    if split != ALL_SPLITS:
        if split not in have:
            raise TaskError(f"{suite} has no split {split!r}; its splits: {', '.join(have)} (or {ALL_SPLITS})",
                            field="split", value=split)
        tasks = [t for t in tasks if t.split == split]
    seen: set[str] = set()
    for t in tasks:
        if t.id in seen:
            raise TaskError(f"{suite}: task id {t.id!r} occurs twice (ids key token counts and results)",
                            field="id", value=t.id)
        seen.add(t.id)
    if offset >= len(tasks):
        raise TaskError(f"--offset {offset} leaves no task: the selection holds {len(tasks)}", field="offset",
                        value=offset)
    return Selection(select_tasks(tasks, limit, offset), split)


def select_suite(suite: str, split: str | None, limit: int) -> list[Task]:
    """The tasks of :func:`load_tasks` (``akv live``)."""
    return load_tasks(suite, split, limit).tasks


@dataclass(frozen=True)
class ProgramFile:
    """A policy program read from a file.

    Attributes:
        source: the program (checked by ``check_program``; it only ever runs in the sandbox).
        params: its parameters (an exported module's ``PARAMS``; empty for a plain program).
        exported: the file is a module written by ``akv export``.
        frame_guard: an exported module guards its decisions (``FRAME_GUARD``): evaluate it under
            the frame guard to count what it drops.
    """

    source: str
    params: dict[str, Any] = field(default_factory=dict)
    exported: bool = False
    frame_guard: bool = False


_EXPORTED = ("PROGRAM_SOURCE", "PARAMS", "PROGRAM_SHA256", "FRAME_GUARD")


def read_program_file(path: str | Path) -> ProgramFile:
    """A program file, or a module written by ``akv export`` (``search_spaces.export``), read
    without importing or running it: an exported module's ``PROGRAM_SOURCE``, ``PARAMS`` and
    ``PROGRAM_SHA256`` are read as literals from its syntax tree.

    Raises:
        AKVError: the file is missing, a directory, unreadable or not UTF-8 (names it).
        PolicyError: the program is refused by the checker (the reason is the checker's), an
            exported module's constants are not literals of the right types, or its source does
            not match its ``PROGRAM_SHA256`` (it was edited).
    """
    from search_spaces import PolicyError, check_program

    path = Path(path)
    text = read_text(path, "program file")
    found: dict[str, Any] = {}
    try:
        tree: ast.Module | None = ast.parse(text, filename=str(path))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None  # not Python: check_program says why below
    for node in tree.body if tree is not None else ():
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in _EXPORTED):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                raise PolicyError(f"{path}: {node.targets[0].id} is not a literal (line {node.lineno}); regenerate "
                                  "the module with akv export", field="program", value=str(path)) from None
    program = ProgramFile(text)
    if "PROGRAM_SOURCE" in found:
        source, params = found["PROGRAM_SOURCE"], found.get("PARAMS", {})
        if not isinstance(source, str) or not isinstance(params, dict):
            raise PolicyError(f"{path}: PROGRAM_SOURCE must be a string and PARAMS a dict in an exported module",
                              field="program", value=str(path))
        program = ProgramFile(source, params, exported=True, frame_guard=found.get("FRAME_GUARD") is True)
    check = check_program(program.source)
    if not check.ok:
        raise PolicyError(f"{path}: the program is refused: {check.reason}", field="program", value=str(path))
    if program.exported and found.get("PROGRAM_SHA256", check.sha256) != check.sha256:
        raise PolicyError(f"{path}: PROGRAM_SOURCE does not match PROGRAM_SHA256 (the module was edited); "
                          "regenerate it with akv export", field="program", value=str(path))
    return program


def policy_specs(args: argparse.Namespace, params: dict[str, Any], picked: PolicySpec | None = None,
                 program: ProgramFile | None = None) -> list[PolicySpec]:
    """The policies of an ``akv eval`` command line, each built once so that a bad name, parameter
    or program is an error now rather than a failed result per task (``program``: ``--program``'s
    file, when the caller has read it already).

    Raises:
        AKVError: no policy given, ``--params`` with ``--compare`` or ``--run``, or what building
            a policy raises (unknown name, bad parameter, refused program).
    """
    if params and (args.compare or picked is not None):
        raise AKVError("--params goes with --policy or --program (with --compare, write NAME:k=v,k=v)",
                       field="params", value=args.params)
    if picked is not None:
        specs = [picked]
    elif args.program:
        program = program or read_program_file(args.program)
        specs = [PolicySpec("program", {**program.params, **params}, source=program.source,
                            label=f"program:{Path(args.program).name}")]
    elif args.compare:
        specs = [PolicySpec.parse(x) for x in split_compare(args.compare)]
        specs = [PolicySpec(s.name, s.params, label=s.name + (f"({s.label.split('(', 1)[1]}" if "(" in s.label else ""))
                 for s in specs]
    elif args.policy:
        specs = [PolicySpec(args.policy, params)]
    else:
        raise AKVError("give a policy: --policy NAME, --compare A,B,..., --program FILE.py or --run RUN_DIR",
                       field="policy")
    for s in specs:
        s.build()
    return specs


def split_compare(text: str) -> list[str]:
    """The policies of ``--compare``: ``A,B:k=v,k2=v2,C`` -> ``["A", "B:k=v,k2=v2", "C"]`` (a ``k=v``
    piece belongs to the policy before it); ``;`` separates policies outright when present.

    Raises:
        AKVError: a ``k=v`` piece with no policy before it, or no policy at all.
    """
    if ";" in text:
        out = [x.strip() for x in text.split(";") if x.strip()]
    else:
        out = []
        for piece in (x.strip() for x in text.split(",")):
            if not piece:
                continue
            if "=" in piece.split(":", 1)[0]:  # k=v: a parameter of the policy before it
                if not out or ":" not in out[-1]:
                    raise AKVError(f"--compare: parameter {piece!r} has no policy before it; write NAME:k=v,k=v",
                                   field="compare", value=text)
                out[-1] += "," + piece
            else:
                out.append(piece)
    if not out:
        raise AKVError(f"--compare names no policy: {text!r}", field="compare", value=text)
    return out


def paired_rows(specs: list[PolicySpec], results: list[TaskResult], *, samples: int = 2000,
                seed: int = 0) -> list[dict[str, Any]]:
    """Each policy after the first against the first, paired over tasks (``evals.paired``): cost
    change in percent and pass-rate change with 95% bootstrap intervals. A policy with failed
    results is left out (its row says why)."""
    from evals.paired import PairingError, pair_results, paired_bootstrap

    by_policy = {s.display: [r for r in results if r.policy == s.display] for s in specs}
    base = specs[0].display
    rows: list[dict[str, Any]] = []
    for s in specs[1:]:
        try:
            d = paired_bootstrap(pair_results(by_policy[s.display], by_policy[base]), samples=samples, seed=seed)
        except PairingError as err:
            rows.append({"policy": s.display, "versus": base, "error": str(err)})
            continue
        rows.append({"policy": s.display, "versus": base, "cost_delta_pct": d.cost_delta_pct,
                     "cost_delta_ci95": list(d.cost_delta_ci95), "pass_delta": d.pass_delta,
                     "pass_delta_ci95": list(d.pass_delta_ci95), "tasks": d.n_tasks, "significant": d.significant})
    return rows


def _print_paired(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    print(f"paired over tasks against {rows[0]['versus']} (95% bootstrap intervals; significant: the cost "
          f"interval excludes 0 and the pass interval's lower bound is >= -0.05, over >= 5 tasks)")
    for r in rows:
        if "error" in r:
            print(f"  {r['policy'][:30]:30s} not compared: {r['error']}")
            continue
        c, p = r["cost_delta_ci95"], r["pass_delta_ci95"]
        verdict = "significant" if r["significant"] else "not significant"
        print(f"  {r['policy'][:30]:30s} cost {r['cost_delta_pct']:+6.1f}% [{c[0]:+.1f}, {c[1]:+.1f}]  pass "
              f"{r['pass_delta']:+.3f} [{p[0]:+.3f}, {p[1]:+.3f}]  {verdict}")


def summarize(results: list[TaskResult], config: EvalConfig | None = None) -> dict[str, Any]:
    """Pass rate with a 95% interval, mean cost and its breakdown, tokens, per family.

    ``scoring`` names what decided ``pass_rate`` (``EvalConfig.scoring``); the greedy-answer
    rates (``exact_match``, ``contains_match``) are ``None`` when nothing was generated.
    """
    config = config or EvalConfig()
    ok = [r for r in results if r.ok]
    probes = [p for r in ok for p in r.probes]
    passed = sum(p.passed for p in probes)
    iv = wilson_interval(passed, len(probes)) if probes else None
    fams: dict[str, list[bool]] = {}
    for r in ok:
        fams.setdefault(r.family, []).extend(p.passed for p in r.probes)
    n = max(1, len(ok))
    return {
        "policy": results[0].policy if results else "", "tasks": len(results), "failed": len(results) - len(ok),
        "pass_rate": passed / len(probes) if probes else math.nan,
        "pass_rate_ci95": [iv.low, iv.high] if iv else None,
        "scoring": config.scoring,
        "exact_match": (sum(p.exact for p in probes) / len(probes) if probes else math.nan) if config.generate
        else None,
        "contains_match": (sum(p.contains for p in probes) / len(probes) if probes else math.nan) if config.generate
        else None,
        "mc_accuracy": sum(p.mc_correct for p in probes) / len(probes) if probes else math.nan,
        "mc_norm_accuracy": sum(p.mc_norm_correct for p in probes) / len(probes) if probes else math.nan,
        "cost_cents_mean": sum(r.cost_cents for r in ok) / n,
        "cost_by_category_cents": {k: sum(getattr(r.cost, k) for r in ok) * 100 / n
                                   for k in ("input", "cached", "repos", "output", "summary")},
        "tokens": {k: sum(sum(q.usage[k] for q in r.requests) for r in ok) / n
                   for k in ("prompt_tokens", "prefill_tokens", "cached_tokens", "drop_skipped_tokens",
                             "repos_tokens", "completion_tokens")},
        "per_family": {f: sum(v) / len(v) for f, v in sorted(fams.items()) if v},
        "errors": sorted({r.error for r in results if r.error})[:5],
    }


def _print_table(rows: list[dict[str, Any]], scoring: str) -> None:
    print(f"pass: probes passed by {scoring} scoring")
    print(f"{'policy':26s} {'pass':>6s} {'95% CI':>13s} {'cost (c)':>9s} {'input':>7s} {'cached':>7s} "
          f"{'repos':>6s} {'output':>7s} {'summary':>7s} {'prefill tok':>11s} {'failed':>6s}")
    for s in rows:
        ci = s["pass_rate_ci95"] or [math.nan, math.nan]
        c = s["cost_by_category_cents"]
        print(f"{s['policy'][:26]:26s} {s['pass_rate']:6.3f} [{ci[0]:.2f}, {ci[1]:.2f}] {s['cost_cents_mean']:9.4f} "
              f"{c['input']:7.4f} {c['cached']:7.4f} {c['repos']:6.4f} {c['output']:7.4f} {c['summary']:7.4f} "
              f"{s['tokens']['prefill_tokens']:11.0f} {s['failed']:6d}")
    for s in rows:
        if s["failed"]:
            print(f"{s['policy']}: {s['failed']} of {s['tasks']} evaluations failed (no score), e.g. {s['errors'][0]}")


PLOT_SUFFIXES = (".png", ".pdf", ".svg", ".jpg")


def _plot(rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for s in rows:
        ci = s["pass_rate_ci95"] or [s["pass_rate"]] * 2
        ax.errorbar([s["cost_cents_mean"]], [s["pass_rate"]], yerr=[[s["pass_rate"] - ci[0]], [ci[1] - s["pass_rate"]]],
                    fmt="o", capsize=3, label=s["policy"])
    ax.set_xlabel("mean cost per task (cents)")
    ax.set_ylabel("pass rate (95% CI)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


EVAL_DEFAULTS: dict[str, Any] = {"suite": "default", "model": "gemma-3-270m", "rates": "gpt-oss-120b",
                                 "dtype": "float32", "scoring": "loglik", "limit": 0, "offset": 0}
"""``akv eval``'s settings when neither the command line nor ``--run``'s config gives them."""


def fill_eval_defaults(args: argparse.Namespace) -> None:
    """Set every ``akv eval`` option the command line left at ``None`` to :data:`EVAL_DEFAULTS`."""
    for key, value in EVAL_DEFAULTS.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)


def run_eval(args: argparse.Namespace, params: dict[str, Any], picked: PolicySpec | None = None) -> int:
    """``akv eval`` (see the module docstring); ``picked``: the policy of ``--run``/``--pick``.

    Raises:
        AKVError: see :func:`policy_specs` and :func:`load_tasks`; an unknown model or rate table;
            ``drop_other`` (a control of the BFCL judge only).
    """
    import torch

    from engine.engine import Engine
    from evals.rates import load_rates

    fill_eval_defaults(args)
    program = read_program_file(args.program) if getattr(args, "program", None) and picked is None else None
    guard = bool(getattr(args, "frame_guard", False))
    if not guard and program is not None and program.frame_guard:
        guard = True
        print(f"{args.program} was exported with the frame guard: evaluating under it (--frame-guard)")
    config = EvalConfig(rates=args.rates, scoring=args.scoring, probe=probe_format_for(args.model),
                        generate=bool(args.generate) or args.scoring == "generate", frame_guard=guard)
    load_rates(config.rates)
    out = Path(args.out or "eval-results.json")
    if out.is_dir():  # found now, not after the evaluation
        raise AKVError(f"--out {out} is a directory; give a file name such as {out / 'results.json'}", field="out",
                       value=str(out))
    plot = Path(args.plot) if args.plot else out.with_suffix(".png") if args.compare else None
    if plot is not None and (plot.is_dir() or plot.suffix.lower() not in PLOT_SUFFIXES):
        raise AKVError(f"--plot {plot} must be a file name ending in {', '.join(PLOT_SUFFIXES)}", field="plot",
                       value=str(plot))
    existing = [p for p in (out, out.with_suffix(".parquet"), plot) if p is not None and p.exists()]
    if existing and not getattr(args, "force", False):
        raise AKVError(f"{existing[0]} exists: give another --out, or --force to overwrite it", field="out",
                       value=str(existing[0]))
    specs = policy_specs(args, params, picked, program)
    if any(s.name == OTHER_CONTROL for s in specs):  # (said now, before the tasks and the model load)
        raise AKVError(f"{OTHER_CONTROL} is a control of the BFCL judge only: give --suite bfcl-base or bfcl-long",
                       field="policy", value=OTHER_CONTROL)
    selection = load_tasks(args.suite, args.split, args.limit, args.offset)
    tasks = selection.tasks
    if tasks and not any(t.probes for t in tasks):  # agent logs: probe-free fidelity (evals.cache.log_fidelity)
        return run_log_eval(args, specs, tasks, config, out, selection.split)
    bare = [t.id for t in tasks if any(not p.candidates for p in t.probes)]
    if bare and config.scoring != "generate":
        raise TaskError(f"{len(bare)} task(s) have probes without candidates (first: {bare[0]}); "
                        f"--scoring {config.scoring} ranks candidates: give them, or use --scoring generate",
                        field="candidates", value=bare[0])
    dtype = getattr(args, "dtype", None) or "float32"
    weights = getattr(args, "weights", None) or "dense"
    eng = Engine.from_pretrained(args.model, template=args.template, dtype=getattr(torch, dtype), weights=weights)
    bar = tqdm(total=len(tasks) * len(specs), desc="evaluating", unit="eval")
    replay = Replay(eng, config, BatchGeneration(check=bool(getattr(args, "check_generation", False))))
    results = evaluate_with(replay, specs, tasks, on_result=lambda r: bar.update(1))
    bar.close()
    if config.generate:
        print(replay.generation_tally.summary())
    rows = [summarize([r for r in results if r.policy == s.display], config) for s in specs]
    _print_table(rows, config.scoring)
    paired = paired_rows(specs, results) if len(specs) > 1 else []
    _print_paired(paired)
    payload: dict[str, Any] = {"suite": args.suite, "split": selection.split, "model": args.model,
                               "dtype": dtype, "weights": weights, "template": args.template,
                               "scoring": config.scoring,
                               "config": config.as_dict(),
                               "generator": sorted({f"{r.generator} {r.generator_version}" for r in results})}
    if len(rows) == 1:
        payload.update(rows[0])
    payload["policies"] = rows
    if paired:
        payload["paired"] = paired
    if config.generate:
        payload["generation"] = replay.generation_tally.as_dict()
    payload["tasks"] = [json.loads(json.dumps(r.to_row())) for r in results]
    atomic_write(out, json.dumps(payload, indent=1, default=str).encode())  # a crash leaves the old file or this one
    import io

    import pandas as pd

    table = io.BytesIO()
    pd.DataFrame([r.to_row() for r in results]).to_parquet(table)
    atomic_write(out.with_suffix(".parquet"), table.getvalue())
    if plot is not None:
        _plot(rows, str(plot))
    print(f"results: {out.resolve()} (per task: {out.with_suffix('.parquet')}"
          + (f"; plot: {plot})" if plot is not None else ")"))
    return 0


def run_log_eval(args: argparse.Namespace, specs: Sequence[PolicySpec], tasks: Sequence[Task], config: EvalConfig,
                 out: Path, split: str) -> int:
    """``akv eval`` on tasks without probes (agent logs): each policy's probe-free fidelity against
    the full cache, per conversation and summarized with 95% intervals over conversations."""
    import torch

    from engine.engine import Engine
    from evals.cache.log_fidelity import measure, summarize

    bound = float(getattr(args, "fidelity_bound", 0.5))
    if not 0 <= bound < math.inf:
        raise AKVError(f"--fidelity-bound must be a finite number >= 0, got {bound}", field="fidelity_bound",
                       value=bound)
    dtype = getattr(args, "dtype", None) or "float32"
    weights = getattr(args, "weights", None) or "dense"
    eng = Engine.from_pretrained(args.model, template=args.template, dtype=getattr(torch, dtype), weights=weights)
    replay = Replay(eng, config)
    per: dict[str, list[Any]] = {s.display: [] for s in specs}
    for task in tqdm(tasks, desc="fidelity", unit="conversation"):
        for f in measure(replay, specs, task):
            per[f.policy].append(f)
    rows = [summarize(per[s.display], bound) for s in specs]
    print(f"probe-free fidelity on {len(tasks)} conversations ({sum(r['turns'] for r in rows[:1])} assistant turns): "
          "change of each recorded turn's log-likelihood per token against the full cache")
    print(f"{'policy':34s} {'cost c':>8s} {'vs full (95% CI)':>24s} {'mean dLL/tok (95% CI)':>30s} "
          f"{'worst':>8s} {'1st tok':>8s} {'pass@' + format(bound, 'g'):>8s}")
    for r in rows:
        lo, hi = r["cost_delta_ci95"]
        mlo, mhi = r["mean_delta_ci95"]
        print(f"{r['policy'][:34]:34s} {r['cost_cents_mean']:8.4f} "
              f"{r['cost_delta_pct']:+7.1f}% [{lo:+6.1f}, {hi:+6.1f}] "
              f"{r['mean_delta_per_token']:+9.4f} [{mlo:+8.4f}, {mhi:+8.4f}] {r['worst_delta_per_token']:+8.3f} "
              f"{r['first_token_changed_share']:8.2f} {r['pass_rate']:8.2f}")
    payload = {"suite": args.suite, "split": split, "model": args.model, "dtype": dtype, "weights": weights,
               "template": args.template,
               "mode": "fidelity", "config": config.as_dict(), "policies": rows,
               "conversations": [f.to_row() for fs in per.values() for f in fs]}
    atomic_write(out, json.dumps(payload, indent=1, default=str).encode())
    print(f"results: {out.resolve()}")
    return 0


def live_cli(args: Any, params: Mapping[str, Any], picked: PolicySpec | None = None, frame_guard: bool = False) -> int:
    """``akv live``: episodes of one policy or several against an endpoint, ``args.concurrency`` in
    flight at once; prints a summary per policy, writes each policy's ``live.json``.

    ``picked``: a run's candidate in place of ``args.policy`` and ``params``; ``frame_guard``: every
    decision guarded as the run evaluated it (``evals.cache.guard``). Each turn's schedule is the
    policy's replay over the session so far with the served model's token counts
    (``evals.cache.served.CountedPolicy``): what the replay evaluator and a server's ``MODEL@NAME`` decide.
    ``args.reference``: a run of the same policies to compare with, reply by reply (``versus_reference``
    in the summary: answers, verdicts and tokens that differ)."""
    from engine.remote.wire import check_endpoint, reach_endpoint
    from engine.settings import settings
    from evals.tasks.storage import check_suite_name

    # the caller's mistakes first, then the endpoint, before the suite and the tokenizer (whose first use
    # converts the model): each is one line, at once
    check_endpoint(args.endpoint)
    if args.probes < 1:
        raise AKVError(f"--probes must be >= 1 (episodes per task), got {args.probes}", field="probes",
                       value=args.probes)
    check_suite_name(args.suite)
    if str(args.suite).startswith("bfcl-"):  # BFCL's tasks and checker, turn by turn (evals.bfcl.live)
        from evals.bfcl.cli import run_bfcl_live

        return run_bfcl_live(args, dict(params), picked, frame_guard)
    from engine.remote import RemoteEngine
    from evals.cache.live import LiveConfig, summary
    from evals.cache.live_runs import LivePolicy, check_concurrency, compare_runs, run_policies
    from evals.cache.served import CountedPolicy, ReplayPolicy

    concurrency = check_concurrency(getattr(args, "concurrency", 1))
    config = LiveConfig(max_steps=args.max_steps, max_tokens=args.max_tokens, rates=args.rates,
                        tool_choice=args.tool_choice)
    named = live_policies(args.policy, params, picked, frame_guard)
    several = len(named) > 1
    if several and args.out:
        raise AKVError("--out names one results file; with several policies each writes RUN_DIR/POLICY/live.json",
                       field="out", value=args.out)

    def where(base: str | None, label: str) -> Path | None:  # one policy: the directory; several: one below it
        return None if base is None else Path(base) / label if several else Path(base)

    api_key = settings().client_api_key  # AKV_API_KEY: never a command-line argument (it would show in ps)
    reach_endpoint(args.endpoint, api_key=api_key)
    tasks = select_suite(args.suite, args.split, args.limit)
    reference = getattr(args, "reference", None)
    with RemoteEngine(args.endpoint, args.model, template=args.template, served_model=args.served_model,
                      api_key=api_key) as engine:
        engine.akv_extensions  # noqa: B018 -- reach the endpoint once before any episode (one error, not N)
        # each turn's schedule is the replay's, counted with the served model's tokenizer (as the server
        # and the evaluator count), under the frame guard where the run had one
        entries = [LivePolicy(label, CountedPolicy(ReplayPolicy(label, policy, frame_guard=frame_guard), engine.render)
                              if policy is not None else None, where(args.run_dir, label) or Path(f"runs/live-{label}"))
                   for label, policy in named]
        runs = run_policies(engine, entries, tasks, config, probes_per_task=args.probes, concurrency=concurrency)
        tokenize = engine.tokenizer.encode
    from evals.cache.live_export import export_run

    errors = 0
    for entry in entries:
        results = runs[entry.label]
        logs = export_run(entry.run_dir, args.served_model or args.model)
        s = summary(results)
        print(f"{entry.label}: {s['episodes']} episodes, pass {s['pass_rate']:.3f} "
              f"[{s['pass_rate_ci95'][0]:.3f}, {s['pass_rate_ci95'][1]:.3f}], contains {s['contains_rate']:.3f}, "
              f"cost {s['cost_cents_mean']:.4f} c/episode, {s['steps_mean']:.1f} steps, tools {s['tool_calls']}, "
              f"invalid calls {s['invalid_calls']}, errors {s['errors']}")
        ref = where(reference, entry.label)
        if ref is not None:
            diff = compare_runs(ref, entry.run_dir, results, lambda text: tokenize(text, add_special_tokens=False))
            s["versus_reference"] = {"run_dir": str(ref), **diff.to_row()}
            print(f"  versus {ref}: {diff.episodes} episodes paired, answers differ {diff.answers_differ}, verdicts "
                  f"differ {diff.verdicts_differ}, replies differ {diff.turns_differ} of {diff.turns} "
                  f"({diff.tokens_differ} tokens)")
        out = Path(args.out or entry.run_dir / "live.json")
        atomic_write(out, json.dumps({"summary": s, "config": asdict(config), "policy": entry.label,
                                      "endpoint": args.endpoint, "concurrency": concurrency,
                                      "episodes": [r.to_row() for r in results]}, indent=1).encode())
        print(f"episodes and checkpoints in {entry.run_dir}; results: {out}; as agent logs: {logs[0]}, {logs[1]}")
        errors += s["errors"]
    return 1 if errors else 0


def live_policies(policy: str, params: Mapping[str, Any], picked: PolicySpec | None = None,
                  frame_guard: bool = False) -> list[tuple[str, Any]]:
    """The (label, policy) pairs of ``akv live``: ``picked`` (a run's candidate), or ``policy`` with
    ``params``, or several policies in ``--compare``'s notation (``full,rolling_drop:keep_tool_responses=2``).
    A label is the name and its sorted ``-k=v`` parameters (``-guarded`` under the frame guard); the
    policy is ``None`` for ``full``.

    Raises:
        AKVError: ``params`` with several policies, a label given twice, or what building a policy raises.
    """
    from search_spaces import get_policy

    if picked is not None:
        chosen = [(picked.build(), re.sub(r"[^A-Za-z0-9_.=-]+", "-", picked.display).strip("-"))]
    else:
        if "," in policy or ";" in policy or ":" in policy:
            specs = [PolicySpec.parse(x) for x in split_compare(policy)]
            if params and len(specs) > 1:
                raise AKVError("--params goes with one --policy; with several, write NAME:k=v,k=v",
                               field="params", value=dict(params))
            pairs = [(s.name, {**dict(s.params), **params}) for s in specs]
        else:
            pairs = [(policy, dict(params))]
        chosen = [(None if name == "full" else get_policy(name, **ps), name + "".join(f"-{k}={v}" for k, v in
                                                                                     sorted(ps.items())))
                  for name, ps in pairs]
    out = [(label + "-guarded" if frame_guard and p is not None else label, p) for p, label in chosen]
    labels = [label for label, _ in out]
    if len(set(labels)) < len(labels):
        raise AKVError(f"--policy names a policy twice: {', '.join(labels)}", field="policy", value=policy)
    return out
