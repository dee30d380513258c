"""Engine benchmarks: ``python -m bench.engine_speed [--model gemma-3-270m] [--only NAME ...] [--peak]``.

Prints tables and writes ``bench/results/engine-<name>.json`` with the machine it ran on (CPU
model, the CPU flags that matter to matmul, torch threads), so that numbers from different
machines are not compared as if equal. Everything compared is measured in the same run on the
same machine, interleaved (ours, theirs, ours, ...), and each ratio is the median of the
per-repeat ratios: timings on a shared machine are noisy, the ratios less so.

- ``--peak``: this machine's sustained fp32 matmul throughput at the model's own GEMM shapes
  (fused Q/K/V, O, fused gate/up, down; every layer's weights in turn, at 512 and 2,048 rows, at
  torch's thread count) and its streaming read bandwidth; prefill is then also reported as a
  share of that peak, beside the FLOPs counted by ``engine.models.flops`` (projections,
  attention over the keys each query may see, the LM head for the last position only).
- ``throughput``: prefill tokens/s at 512 / 2,048 / 4,096 tokens and decode tokens/s at those
  contexts, for this engine and for plain transformers (one-shot forward; ``generate`` with its
  own cache, decode time = generate(1 + n) - generate(1)).
- ``sweep``: the 16 schedules of a rolling-drop sweep (K = 1..16) over one trajectory with 24
  tool responses, replayed turn by turn; tokens prefilled and wall time with the radix tree vs
  without, against the token count of the union trie of all the requests' event histories.
- ``restore``: rebuild a ~3,000-token history with 10 drop events by one segment-batched prefill,
  vs the step-by-step reference executor, vs a plain prefill of the same number of tokens.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench import RESULTS, write_result
from engine.engine import Engine
from engine.history import Drop, replay
from engine.models.flops import DecoderShape, forward_flops
from engine.models.lean import Projection, packs_projections
from engine.oracle.reference import ReferenceExecutor
from engine.prefill import batched_prefill, history_jobs

MEASURES = ["engine"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""


def _sync() -> None:
    """Wait for queued GPU work, so that wall-clock timings cover it (no-op on CPU)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _random_ids(n: int, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(1000, 100_000, (n,), generator=gen).tolist()


def _fresh(eng: Engine, **kw: Any) -> Engine:
    return Engine(eng.model, eng.tokenizer, eng.renderer.template.name, name=eng.name, **kw)


def _no_store(tokens: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    raise AssertionError("nothing stored")


def _interleaved(fns: Sequence[Callable[[], float]], repeats: int) -> list[list[float]]:
    """Run each of ``fns`` (each returns a duration or a rate) ``repeats`` times, alternating the
    order every repeat (a, b, b, a, ...), so that a burst of load on a shared machine falls on all
    of them alike; returns the values per function."""
    out: list[list[float]] = [[] for _ in fns]
    for r in range(repeats):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            _sync()
            out[i].append(fns[i]())
    return out


def _timed(fn: Callable[[], Any]) -> Callable[[], float]:
    def run() -> float:
        t = time.perf_counter()
        fn()
        _sync()
        return time.perf_counter() - t
    return run


def _median_ratio(num: Sequence[float], den: Sequence[float]) -> float:
    return statistics.median(a / b for a, b in zip(num, den))


def rss_now_gb() -> float:
    """This process's resident memory now, in GB (``VmRSS``; NaN where /proc does not say)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1e6
    return float("nan")


def machine_info() -> dict[str, Any]:
    """The CPU and torch set-up the numbers were measured on."""
    info: dict[str, Any] = {"machine": platform.platform(), "torch": torch.__version__,
                            "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
                            "mkl": torch.backends.mkl.is_available(), "mkldnn": torch.backends.mkldnn.is_available()}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info | {"cpu_model": platform.processor() or "unknown", "cpu_flags": []}
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("flags", "").split())
    wanted = ("fma", "f16c", "avx", "avx2", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
              "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
    return info | {"cpu_model": fields.get("model name", "unknown"), "cpu_mhz": fields.get("cpu MHz"),
                   "cpu_flags": [f for f in wanted if f in flags]}


def _gemm_seconds(x: torch.Tensor, projections: list[Projection], repeats: int, seconds: float) -> float:
    """Median seconds of one pass of ``x`` through every projection in turn, timed over loops of
    about ``seconds``."""

    def layers() -> None:
        for p in projections:
            p(x)

    layers()
    one = _timed(layers)()
    loops = max(1, int(seconds / max(one, 1e-6)))

    def many() -> None:
        for _ in range(loops):
            layers()

    return statistics.median(_timed(many)() / loops for _ in range(repeats))


def bench_peak(eng: Engine, repeats: int, rows: tuple[int, ...] = (512, 2048), seconds: float = 0.3) -> dict[str, Any]:
    """Sustained GEMM GFLOP/s at the model's projection shapes (its dtype and device: fp32 on CPU by
    default), and streaming read GB/s.

    Each shape runs over ``n_layers`` distinct weight matrices in turn (as a forward does), for
    about ``seconds`` per measurement; the figure per row count is the projections of all layers
    (total FLOPs / total time), the median of ``repeats`` measurements, with the faster of the two
    kernels torch offers here: ``F.linear`` and oneDNN over packed weights (what the engine's
    projections use where :func:`packs_projections`). ``peak_gflops`` is the best of those: the
    rate the prefill's projections could reach on this machine.
    """
    shape = DecoderShape.from_config(eng.model.config)
    dtype, device = eng.model.dtype, eng.model.device
    gen = torch.Generator().manual_seed(0)
    weights = {name: [torch.randn(o, i, generator=gen, dtype=dtype).to(device) for _ in range(shape.n_layers)]
               for name, (o, i) in shape.gemm_shapes().items()}
    kernels = {"F.linear": False, **({"oneDNN packed": True} if packs_projections(device, dtype) else {})}
    per_rows: dict[str, Any] = {}
    for n in rows:
        per_shape, total_flops, total_s = {}, 0, 0.0
        for name, ws in weights.items():
            x = torch.randn(n, ws[0].shape[1], generator=gen, dtype=dtype).to(device)
            flops = 2 * n * ws[0].shape[0] * ws[0].shape[1] * len(ws)
            t = min(_gemm_seconds(x, [Projection.of(w, None, pack) for w in ws], repeats, seconds)
                    for pack in kernels.values())
            per_shape[name] = flops / t / 1e9
            total_flops += flops
            total_s += t
        per_rows[str(n)] = {"gflops": total_flops / total_s / 1e9, "per_shape_gflops": per_shape,
                            "kernels": list(kernels)}
        print(f"peak {dtype} GEMM, {n} rows: {per_rows[str(n)]['gflops']:.1f} GFLOP/s  ("
              + ", ".join(f"{k} {v:.0f}" for k, v in per_shape.items()) + ")", flush=True)
    buf = torch.ones(128 * 2**20, dtype=torch.float32, device=device)  # 512 MiB, far beyond the caches
    buf.sum()
    read_s = statistics.median(_timed(buf.sum)() for _ in range(max(3, repeats)))
    bandwidth = buf.numel() * 4 / read_s / 1e9
    del buf
    print(f"streaming read (torch sum over 512 MiB): {bandwidth:.1f} GB/s", flush=True)
    return {"rows": per_rows, "peak_gflops": max(v["gflops"] for v in per_rows.values()),
            "read_gb_s": bandwidth, "dtype": str(dtype)}


def bench_throughput(eng: Engine, repeats: int, contexts: tuple[int, ...] = (512, 2048, 4096),
                     new_tokens: int = 32, peak_gflops: float | None = None) -> list[dict[str, Any]]:
    hf = eng.model.hf
    shape = DecoderShape.from_config(eng.model.config)
    rows = []
    for n in contexts:
        ids = _random_ids(n, seed=n)
        hist = replay(ids)
        compute = np.ones(n, dtype=bool)

        def ours_prefill(h: Any = hist, c: np.ndarray = compute, n: int = n) -> None:
            batched_prefill(eng.model, h.token_ids, h.compute_pos, history_jobs(h, c), _no_store, [n - 1])

        def hf_prefill(ids: list[int] = ids) -> None:
            with torch.no_grad():
                hf(torch.tensor([ids], device=hf.device), logits_to_keep=1)

        ours_prefill()
        hf_prefill()
        t_ours, t_hf = _interleaved([_timed(ours_prefill), _timed(hf_prefill)], repeats)
        # Decode: our engine from a cached prompt (only decode is timed); HF generate difference.
        msgs = [{"role": "user", "content": eng.tokenizer.decode(ids[: n - 8])}]
        warm = _fresh(eng)
        warm.chat(msgs, max_tokens=1)

        def ours_decode(msgs: list[dict[str, Any]] = msgs, warm: Engine = warm) -> float:
            r = warm.chat(msgs, max_tokens=new_tokens, temperature=0.0, stop=[], ignore_eos=True)
            return (len(r.token_ids) - 1) / r.timings.decode_s

        inp = torch.tensor([ids], device=hf.device)
        kw = {"do_sample": False, "pad_token_id": 0, "eos_token_id": None}

        def gen(k: int, inp: torch.Tensor = inp, kw: dict[str, Any] = kw) -> None:
            with torch.no_grad():
                hf.generate(inp, max_new_tokens=k, min_new_tokens=k, **kw)

        def hf_decode() -> float:
            t1, tk = _timed(lambda: gen(1))(), _timed(lambda: gen(1 + new_tokens))()
            return new_tokens / max(tk - t1, 1e-9)

        d_ours, d_hf = _interleaved([ours_decode, hf_decode], repeats)
        flops = forward_flops(shape, n)
        row: dict[str, Any] = {
            "context": n,
            "prefill_tok_s_ours": n / statistics.median(t_ours), "prefill_tok_s_hf": n / statistics.median(t_hf),
            "prefill_ratio": _median_ratio(t_hf, t_ours),
            "prefill_gflop_per_pass": flops.total / 1e9,
            "prefill_gflop_parts": {"projections": flops.projections / 1e9, "attention": flops.attention / 1e9,
                                    "lm_head_last_position": flops.lm_head / 1e9},
            "prefill_gflops_ours": flops.total / statistics.median(t_ours) / 1e9,
            "decode_tok_s_ours": statistics.median(d_ours), "decode_tok_s_hf": statistics.median(d_hf),
            "decode_ratio": _median_ratio(d_ours, d_hf),
        }
        if peak_gflops:
            row["prefill_share_of_peak"] = row["prefill_gflops_ours"] / peak_gflops
        rows.append(row)
        share = f"  ({row['prefill_share_of_peak']:.0%} of peak)" if peak_gflops else ""
        print(f"ctx {n:5d}  prefill ours {row['prefill_tok_s_ours']:7.1f} tok/s  hf {row['prefill_tok_s_hf']:7.1f}"
              f"  ratio {row['prefill_ratio']:.2f}x  {row['prefill_gflops_ours']:.1f} GFLOP/s{share}"
              f"  | decode ours {row['decode_tok_s_ours']:6.2f} tok/s  hf {row['decode_tok_s_hf']:6.2f}"
              f"  ratio {row['decode_ratio']:.2f}x", flush=True)
    return rows


def sweep_trajectory(n_tools: int = 24, seed: int = 0) -> list[dict[str, Any]]:
    """One agent trajectory with ``n_tools`` tool responses (~3,000 tokens under gemma)."""
    rng = np.random.default_rng(seed)
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a research agent. Tools: search(query), open(url)."},
        {"role": "user", "content": "Compile the shipping status of the open orders."},
    ]
    for i in range(n_tools):
        msgs.append({"role": "assistant", "content": f"Checking batch {i}.",
                     "tool_calls": [{"function": {"name": "search", "arguments": {"batch": i}}}]})
        rows = "; ".join(f"#{int(rng.integers(1000, 9999))} {['ok', 'held', 'late'][int(rng.integers(3))]}"
                         for _ in range(9))
        msgs.append({"role": "tool", "name": "search", "content": f"Batch {i}: {rows}."})
    return msgs


def rolling_schedule(n_msgs: int, keep: int) -> dict[str, Any]:
    tools = [i for i in range(3, n_msgs, 2)]
    return {"drop_message": {str(t): [tools[j - keep]] for j, t in enumerate(tools) if j >= keep}}


def _union_trie_tokens(histories: list[list[Any]]) -> int:
    root: dict[Any, dict] = {}
    count = 0
    for items in histories:
        node = root
        for it in items:
            if it not in node:
                node[it] = {}
                count += isinstance(it, int)
            node = node[it]
    return count


def bench_sweep(eng: Engine, no_tree_schedules: int = 2, n_tools: int = 24, schedules: int = 16) -> dict[str, Any]:
    msgs = sweep_trajectory(n_tools)
    turns = list(range(4, len(msgs) + 1, 2))
    requests = [(k, t) for k in range(1, schedules + 1) for t in turns]
    layouts = [eng.layout(msgs[:t], rolling_schedule(t, k)).items for k, t in requests]
    union = _union_trie_tokens(layouts)
    single = _union_trie_tokens(layouts[: len(turns)])
    tree_eng = _fresh(eng)
    t0 = time.perf_counter()
    prefilled = 0
    for k, t in requests:
        prefilled += tree_eng.chat(msgs[:t], rolling_schedule(t, k), max_tokens=1).usage.prefill_tokens
    t_tree = time.perf_counter() - t0
    # Without the tree: every request computes its whole prompt (pool of 0 bytes). Measured on the
    # first `no_tree_schedules` schedules; all 16 are counted exactly by the dry run.
    cold = _fresh(eng, pool_bytes=0)
    t0 = time.perf_counter()
    for k, t in requests[: no_tree_schedules * len(turns)]:
        cold.chat(msgs[:t], rolling_schedule(t, k), max_tokens=1)
    t_cold_part = time.perf_counter() - t0
    acc = eng.accountant(pool_bytes=0)
    cold_tokens = sum(acc.request(msgs[:t], rolling_schedule(t, k)).prefill_tokens for k, t in requests)
    out = {
        "requests": len(requests), "trajectory_tokens": len(eng.render(msgs).token_ids),
        "union_trie_tokens": union, "single_schedule_tokens": single,
        "prefilled_with_tree": prefilled, "prefilled_without_tree": cold_tokens,
        "seconds_with_tree": t_tree,
        "seconds_without_tree_measured": t_cold_part, "schedules_measured_without_tree": no_tree_schedules,
        "seconds_without_tree_extrapolated": t_cold_part * schedules / no_tree_schedules,
        "schedules": schedules, "tool_responses": n_tools,
    }
    print(f"sweep: {len(requests)} requests, union trie {union} tokens ({union / single:.2f}x one schedule)")
    print(f"  with tree    prefilled {prefilled:7d}  in {t_tree:7.1f}s")
    print(f"  without tree prefilled {cold_tokens:7d}  in ~{out['seconds_without_tree_extrapolated']:7.1f}s "
          f"(measured {t_cold_part:.1f}s on {no_tree_schedules}/{schedules} schedules)")
    return out


def bench_restore(eng: Engine, repeats: int, n_tokens: int = 3000, n_drops: int = 10) -> dict[str, Any]:
    ids = _random_ids(n_tokens, seed=7)
    seg = n_tokens // (n_drops + 1)
    items: list[Any] = []
    for d in range(n_drops + 1):
        items.extend(ids[d * seg:(d + 1) * seg] if d < n_drops else ids[d * seg:])
        if d < n_drops:
            start = d * seg + seg // 4
            items.append(Drop(((start, start + seg // 3),)))
    hist = replay(items)
    plain = replay(ids)
    everything = np.ones(n_tokens, dtype=bool)

    def batched() -> None:
        batched_prefill(eng.model, hist.token_ids, hist.compute_pos, history_jobs(hist, everything), _no_store,
                        [n_tokens - 1])

    def reference() -> None:
        ReferenceExecutor(eng.model).run(items)

    def plain_prefill() -> None:
        batched_prefill(eng.model, plain.token_ids, plain.compute_pos, history_jobs(plain, everything), _no_store,
                        [n_tokens - 1])

    batched()
    plain_prefill()
    t_b, t_r, t_p = _interleaved([_timed(batched), _timed(reference), _timed(plain_prefill)], repeats)
    out = {"tokens": n_tokens, "drop_events": n_drops, "segments": len(hist.segments),
           "seconds_batched": statistics.median(t_b), "seconds_reference": statistics.median(t_r),
           "seconds_plain_prefill": statistics.median(t_p),
           "speedup_vs_reference": _median_ratio(t_r, t_b), "ratio_to_plain_prefill": _median_ratio(t_b, t_p)}
    print(f"restore {n_tokens} tokens / {n_drops} drops: batched {out['seconds_batched']:.2f}s  reference "
          f"{out['seconds_reference']:.2f}s ({out['speedup_vs_reference']:.2f}x)  plain prefill "
          f"{out['seconds_plain_prefill']:.2f}s (batched/plain {out['ratio_to_plain_prefill']:.2f}x)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--only", nargs="*", default=["throughput", "sweep", "restore"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--peak", action="store_true", help="measure the fp32 matmul peak first")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    eng = Engine.from_pretrained(args.model, keep_source=True)  # its HF forward is measured too
    report: dict[str, Any] = {"model": args.model, **machine_info(), "repeats": args.repeats,
                              "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "load_average_start": os.getloadavg()}
    print(f"{report['cpu_model']}, {report['cpus']} CPUs, torch {report['torch']} with {report['torch_threads']} "
          f"threads, flags: {' '.join(report['cpu_flags'])}", flush=True)
    peak = None
    if args.peak:
        report["peak"] = bench_peak(eng, args.repeats)
        peak = report["peak"]["peak_gflops"]
    if "throughput" in args.only:
        report["throughput"] = bench_throughput(eng, args.repeats, peak_gflops=peak)
    if "sweep" in args.only:
        report["sweep"] = bench_sweep(eng)
    if "restore" in args.only:
        report["restore"] = bench_restore(eng, args.repeats)
    report["load_average_end"] = os.getloadavg()  # other processes on a shared machine skew the timings
    out = Path(args.out) if args.out else RESULTS / f"engine-{args.model.replace('/', '_')}.json"
    write_result(out, report, measures=MEASURES)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
