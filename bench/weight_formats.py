"""Weight formats on this CPU: ``python -m bench.weight_formats [--model gemma-3-270m] [--tasks 6]
[--repeats 3]``.

What each format buys and what it costs, all measured in one run:

- prefill tokens/s at 512 and 2,048 tokens, interleaved: the engine in float32 (the default, exact),
  the engine in bfloat16 (``dtype=torch.bfloat16``, the opt-in format: weights and KV), and plain
  transformers in float32, the baseline of the engine's speed goals; greedy decode tokens/s of the
  two engines after a cached 512-token prompt;
- two int8 forms of the projections, run inside the float32 engine here only to decide whether an
  int8 format is worth offering: torch's dynamic quantization (int8 weights per output channel,
  activations quantized per tensor) and int8 weights and activations per row through
  ``torch._int_mm``;
- each format's next-token distributions against float32's on a real history (the first tasks of
  ``--suite``, rendered): top-1 agreement, mean KL(float32 || format), and the mean negative
  log-likelihood of the tokens that follow;
- the evaluation itself: two policies (full, rolling drop K=2) replayed with the model on the first
  ``--tasks`` train tasks in float32 and in bfloat16: seconds per policy-task, every probe's pass,
  and per policy the paired bootstrap of pass and cost over tasks (cost does not depend on the
  format: it counts tokens).

Prints tables and writes ``bench/results/weight-formats-<model>.json``. Not a timed test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bench import RESULTS, write_result
from bench.engine_speed import _interleaved, _median_ratio, _no_store, _random_ids, _timed, machine_info
from engine.engine import Engine
from engine.history import replay
from engine.models.lean import LeanModel
from engine.prefill import batched_prefill, history_jobs
from evals.cache.evaluator import EvalConfig, PolicySpec, Replay, TaskResult
from evals.paired import pair_results, paired_bootstrap
from evals.tasks import load_suite, select_tasks
from evals.tasks.schema import Task

MEASURES = ["engine", "evals/cache"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""


class _Int8PerTensor:
    """torch's dynamic int8 linear: weights per output channel, activations per tensor."""

    def __init__(self, weight: torch.Tensor):
        w = weight.detach().float()
        scale = (w.abs().amax(dim=1) / 127).clamp_min(1e-12).double()
        zero = torch.zeros(w.shape[0], dtype=torch.int64)
        self.packed = torch.ops.quantized.linear_prepack(
            torch.quantize_per_channel(w, scale, zero, 0, torch.qint8), None)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic(x.contiguous(), self.packed, True)


class _Int8PerRow:
    """int8 weights per output channel and activations per row, int32 accumulation (``_int_mm``)."""

    def __init__(self, weight: torch.Tensor):
        w = weight.detach().float()
        self.scale = (w.abs().amax(dim=1) / 127).clamp_min(1e-12)
        self.q_t = (w / self.scale[:, None]).round().to(torch.int8).t().contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        sx = (x.abs().amax(dim=1, keepdim=True) / 127).clamp_min(1e-12)
        xq = (x / sx).round_().to(torch.int8)
        return torch._int_mm(xq, self.q_t).float().mul_(sx).mul_(self.scale)  # noqa: SLF001 -- no public int8 matmul


def _int8_model(model: LeanModel, kind: type[_Int8PerTensor] | type[_Int8PerRow]) -> LeanModel:
    """A shallow copy of ``model`` whose four projections per layer run in int8 (``kind``)."""

    def project(hl: Any) -> dict[str, Any]:
        a, m = hl.self_attn, hl.mlp
        return {"qkv": kind(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])),
                "o": kind(a.o_proj.weight), "down": kind(m.down_proj.weight),
                "gate_up": kind(torch.cat([m.gate_proj.weight, m.up_proj.weight]))}

    return model.with_projections(project)


def _prefill(model: LeanModel, ids: list[int], rows: list[int]) -> Callable[[], torch.Tensor]:
    hist = replay(ids)
    everything = np.ones(len(ids), dtype=bool)

    def run() -> torch.Tensor:
        out = batched_prefill(model, hist.token_ids, hist.compute_pos, history_jobs(hist, everything), _no_store,
                              rows)
        assert out.logits is not None
        return out.logits.float()
    return run


def agreement(reference: torch.Tensor, other: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """Top-1 agreement, mean KL(reference || other) and both NLLs of ``targets`` (next tokens)."""
    lp_ref, lp = F.log_softmax(reference, -1), F.log_softmax(other, -1)
    n = targets.shape[0]
    return {"top1_agreement": float((reference.argmax(-1) == other.argmax(-1)).float().mean()),
            "kl": float((lp_ref.exp() * (lp_ref - lp)).sum(-1).mean()),
            "nll_reference": float(-lp_ref[:n].gather(1, targets[:, None]).mean()),
            "nll": float(-lp[:n].gather(1, targets[:, None]).mean())}


def _history_ids(eng: Engine, tasks: list[Task], n_tokens: int) -> list[int]:
    ids: list[int] = []
    for task in tasks:
        ids += [int(t) for t in eng.render(task.messages).token_ids]
        if len(ids) >= n_tokens:
            break
    if len(ids) < n_tokens:
        raise SystemExit(f"the tasks render to {len(ids)} tokens, fewer than the {n_tokens} measured")
    return ids[:n_tokens]


def decode(engines: dict[str, Engine], repeats: int, context: int = 512, new_tokens: int = 32) -> dict[str, Any]:
    """Greedy decode tokens/s of each engine after a cached ``context``-token prompt, interleaved."""
    ids = _random_ids(context, seed=context)
    msgs = [{"role": "user", "content": next(iter(engines.values())).tokenizer.decode(ids[:context - 8])}]

    def rate(eng: Engine) -> Callable[[], float]:
        def run() -> float:
            r = eng.chat(msgs, max_tokens=new_tokens, temperature=0.0, stop=[], ignore_eos=True)
            return (len(r.token_ids) - 1) / r.timings.decode_s
        return run

    for eng in engines.values():
        eng.chat(msgs, max_tokens=1)  # the prompt is cached: only decode is timed
    rates = _interleaved([rate(e) for e in engines.values()], repeats)
    first = next(iter(engines))
    out: dict[str, Any] = {"context": context, "new_tokens": new_tokens,
                           **{n: {"tok_s": statistics.median(r), "vs_" + first: _median_ratio(r, rates[0])}
                              for n, r in zip(engines, rates)}}
    print(f"decode after {context} tokens: " + "; ".join(
        f"{n} {out[n]['tok_s']:.1f} tok/s ({out[n]['vs_' + first]:.2f}x)" for n in engines), flush=True)
    return out


def evaluation(engines: dict[str, Engine], tasks: list[Task]) -> dict[str, Any]:
    """Both policies on every task in each format, interleaved task by task: seconds, every probe's
    pass, and per policy the second format against the first with the project's paired bootstrap
    (:func:`evals.paired.paired_bootstrap`, over tasks)."""
    specs = [PolicySpec("full"), PolicySpec("rolling_drop", {"keep_tool_responses": 2})]
    replays = {name: Replay(e, EvalConfig(generate=False)) for name, e in engines.items()}
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    results: dict[str, dict[str, list[TaskResult]]] = {name: {s.display: [] for s in specs} for name in engines}
    for i, task in enumerate(tasks):
        names = list(engines) if i % 2 == 0 else list(reversed(engines))
        for spec in specs:
            for name in names:
                t = time.perf_counter()
                r = replays[name].evaluate(spec, task)
                seconds[name].append(time.perf_counter() - t)
                if not r.ok:
                    raise SystemExit(f"{task.id} {spec.display} failed in {name}: {r.error}")
                results[name][spec.display].append(r)
        print(f"  {task.id}: " + "  ".join(f"{n} {sum(seconds[n][-2:]):.1f}s" for n in engines), flush=True)
    base, other = list(engines)
    pairs = [(a.passed, b.passed) for s in specs
             for ra, rb in zip(results[base][s.display], results[other][s.display])
             for a, b in zip(ra.probes, rb.probes, strict=True)]
    flips = [(a, b) for a, b in pairs if a != b]
    paired = {}
    for s in specs:
        d = paired_bootstrap(pair_results(results[other][s.display], results[base][s.display]))
        paired[s.display] = {"cost_delta_pct": d.cost_delta_pct, "cost_delta_ci95": list(d.cost_delta_ci95),
                             "pass_delta": d.pass_delta, "pass_delta_ci95": list(d.pass_delta_ci95),
                             "tasks": d.n_tasks}
    return {"policies": [s.display for s in specs], "tasks": [t.id for t in tasks],
            "seconds_per_policy_task": {n: statistics.median(s) for n, s in seconds.items()},
            "speedup": _median_ratio(seconds[base], seconds[other]),
            "pass_rate": {n: sum(b if n == other else a for a, b in pairs) / len(pairs) for n in engines},
            "probes": len(pairs), "probes_flipped": len(flips),
            "probes_lost": sum(1 for a, _ in flips if a), "probes_gained": sum(1 for _, b in flips if b),
            f"paired_{other}_vs_{base}": paired}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--suite", default="horizon")
    p.add_argument("--tasks", type=int, default=6, help="train tasks for the evaluation (0: skip it)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.tasks < 0 or args.repeats < 1:
        p.error(f"--tasks must be at least 0 and --repeats at least 1, got {args.tasks} and {args.repeats}")
    report: dict[str, Any] = {"model": args.model, **machine_info(), "repeats": args.repeats,
                              "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "load_average_start": os.getloadavg()}
    fp32 = Engine.from_pretrained(args.model, keep_source=True)  # the HF baseline and the int8 forms read it
    bf16 = Engine.from_pretrained(args.model, dtype=torch.bfloat16)
    models = {"float32": fp32.model, "bfloat16": bf16.model, "int8 per tensor": _int8_model(fp32.model, _Int8PerTensor),
              "int8 per row": _int8_model(fp32.model, _Int8PerRow)}
    hf = fp32.model.hf

    speed = []
    for n in (512, 2048):
        ids = _random_ids(n, seed=n)
        fns = [_timed(_prefill(m, ids, [n - 1])) for m in models.values()]

        def hf_prefill(ids: list[int] = ids) -> None:
            with torch.no_grad():
                hf(torch.tensor([ids]), logits_to_keep=1)

        fns.append(_timed(hf_prefill))
        for f in fns:
            f()  # warm-up
        times = _interleaved(fns, args.repeats)
        row: dict[str, Any] = {"tokens": n, "hf_float32_tok_s": n / statistics.median(times[-1])}
        for name, t in zip(models, times):
            row[name] = {"tok_s": n / statistics.median(t), "vs_float32": _median_ratio(times[0], t),
                         "vs_hf_float32": _median_ratio(times[-1], t)}
        speed.append(row)
        print(f"prefill {n} tokens: HF float32 {row['hf_float32_tok_s']:.0f} tok/s; " + "; ".join(
            f"{k} {row[k]['tok_s']:.0f} tok/s ({row[k]['vs_float32']:.2f}x float32, {row[k]['vs_hf_float32']:.2f}x HF)"
            for k in models), flush=True)
    report["prefill"] = speed
    report["decode"] = decode({"float32": fp32, "bfloat16": bf16}, args.repeats)

    tasks = select_tasks(load_suite(args.suite, "train"), max(args.tasks, 8))
    ids = _history_ids(fp32, tasks, 1024)
    positions = list(range(1024 - 300, 1024))
    targets = torch.tensor(ids[positions[0] + 1:])
    logits = {name: _prefill(m, ids, positions)() for name, m in models.items()}
    report["agreement"] = {"tokens": 1024, "positions": len(positions), "source": f"{args.suite} train tasks, rendered",
                           **{name: agreement(logits["float32"], lg, targets) for name, lg in logits.items()
                              if name != "float32"}}
    print(f"{'format':<16} {'top-1 agree':>11} {'KL':>8} {'NLL':>7} (float32 NLL "
          f"{report['agreement']['bfloat16']['nll_reference']:.3f})")
    for name in list(models)[1:]:
        a = report["agreement"][name]
        print(f"{name:<16} {a['top1_agreement']:>11.3f} {a['kl']:>8.4f} {a['nll']:>7.3f}")

    if args.tasks:
        print(f"evaluation: {args.tasks} {args.suite} train tasks x 2 policies, float32 and bfloat16", flush=True)
        ev = evaluation({"float32": fp32, "bfloat16": bf16}, tasks[:args.tasks])
        report["evaluation"] = ev
        print(f"seconds per policy-task: float32 {ev['seconds_per_policy_task']['float32']:.2f}, bfloat16 "
              f"{ev['seconds_per_policy_task']['bfloat16']:.2f} ({ev['speedup']:.2f}x); pass rate "
              f"{ev['pass_rate']['float32']:.3f} -> {ev['pass_rate']['bfloat16']:.3f}, {ev['probes_flipped']} of "
              f"{ev['probes']} probes flipped")
        for policy, d in ev["paired_bfloat16_vs_float32"].items():
            print(f"  {policy}: bfloat16 vs float32 over {d['tasks']} tasks: pass {d['pass_delta']:+.3f} "
                  f"[{d['pass_delta_ci95'][0]:+.3f}, {d['pass_delta_ci95'][1]:+.3f}], cost "
                  f"{d['cost_delta_pct']:+.1f}% [{d['cost_delta_ci95'][0]:+.1f}, {d['cost_delta_ci95'][1]:+.1f}]")
    report["load_average_end"] = os.getloadavg()
    write_result(args.out or RESULTS / f"weight-formats-{args.model.replace('/', '_')}.json", report, measures=MEASURES)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
