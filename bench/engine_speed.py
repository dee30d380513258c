"""Engine benchmarks: ``python -m bench.engine_speed [--model gemma-3-270m] [--only NAME ...]``.

Prints tables and writes ``bench/results/engine-<name>.json``. Everything compared is measured in
the same run on the same machine; timings on a shared machine are noisy, so each point is the
median of ``--repeats`` runs and the ratios matter more than the absolute numbers.

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
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench import RESULTS, write_result
from engine.engine import Engine
from engine.history import Drop, replay
from engine.oracle.reference import ReferenceExecutor
from engine.prefill import batched_prefill, history_jobs


def _sync() -> None:
    """Wait for queued GPU work, so that wall-clock timings cover it (no-op on CPU)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _median_time(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        _sync()
        t = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _random_ids(n: int, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(1000, 100_000, (n,), generator=gen).tolist()


def _fresh(eng: Engine, **kw: Any) -> Engine:
    return Engine(eng.model, eng.tokenizer, eng.renderer.template.name, name=eng.name, **kw)


def _no_store(tokens: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    raise AssertionError("nothing stored")


def bench_throughput(eng: Engine, repeats: int, contexts: tuple[int, ...] = (512, 2048, 4096),
                     new_tokens: int = 32) -> list[dict[str, Any]]:
    hf = eng.model.hf
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

        t_ours = _median_time(ours_prefill, repeats)
        t_hf = _median_time(hf_prefill, repeats)
        # Decode: our engine from a cached prompt (only decode is timed); HF generate difference.
        msgs = [{"role": "user", "content": eng.tokenizer.decode(ids[: n - 8])}]
        warm = _fresh(eng)
        warm.chat(msgs, max_tokens=1)
        dec = []
        for _ in range(repeats):
            r = warm.chat(msgs, max_tokens=new_tokens, temperature=0.0, stop=[])
            if len(r.token_ids) > 1:
                dec.append((len(r.token_ids) - 1) / r.timings.decode_s)
        ours_dec = statistics.median(dec) if dec else float("nan")
        inp = torch.tensor([ids], device=hf.device)
        kw = {"do_sample": False, "pad_token_id": 0, "eos_token_id": None}

        def gen(k: int, inp: torch.Tensor = inp, kw: dict[str, Any] = kw) -> None:
            with torch.no_grad():
                hf.generate(inp, max_new_tokens=k, min_new_tokens=k, **kw)

        t1 = _median_time(lambda: gen(1), repeats)
        tk = _median_time(lambda: gen(1 + new_tokens), repeats)
        hf_dec = new_tokens / max(tk - t1, 1e-9)
        rows.append({
            "context": n,
            "prefill_tok_s_ours": n / t_ours, "prefill_tok_s_hf": n / t_hf,
            "decode_tok_s_ours": ours_dec, "decode_tok_s_hf": hf_dec,
            "decode_ratio": ours_dec / hf_dec,
        })
        r_ = rows[-1]
        print(f"ctx {n:5d}  prefill ours {r_['prefill_tok_s_ours']:7.1f} tok/s  hf {r_['prefill_tok_s_hf']:7.1f}"
              f"  | decode ours {ours_dec:6.2f} tok/s  hf {hf_dec:6.2f}  ratio {r_['decode_ratio']:.2f}x", flush=True)
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

    t_b = _median_time(batched, repeats)
    t_r = _median_time(reference, max(1, repeats - 1))
    t_p = _median_time(plain_prefill, repeats)
    out = {"tokens": n_tokens, "drop_events": n_drops, "segments": len(hist.segments),
           "seconds_batched": t_b, "seconds_reference": t_r, "seconds_plain_prefill": t_p,
           "speedup_vs_reference": t_r / t_b, "ratio_to_plain_prefill": t_b / t_p}
    print(f"restore {n_tokens} tokens / {n_drops} drops: batched {t_b:.2f}s  reference {t_r:.2f}s "
          f"({t_r / t_b:.2f}x)  plain prefill {t_p:.2f}s (batched/plain {t_b / t_p:.2f}x)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--only", nargs="*", default=["throughput", "sweep", "restore"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    eng = Engine.from_pretrained(args.model)
    report: dict[str, Any] = {"model": args.model, "torch_threads": torch.get_num_threads(),
                              "machine": platform.platform(), "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if "throughput" in args.only:
        report["throughput"] = bench_throughput(eng, args.repeats)
    if "sweep" in args.only:
        report["sweep"] = bench_sweep(eng)
    if "restore" in args.only:
        report["restore"] = bench_restore(eng, args.repeats)
    out = Path(args.out) if args.out else RESULTS / f"engine-{args.model.replace('/', '_')}.json"
    write_result(out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
