"""Batched decode throughput: tokens/s of 1, 2, 4 and 8 sequences decoded together (issue 52, item 4).

    python -m bench.qwen_engine --only throughput [--weights gguf] [--batches 1 2 4 8] [--new-tokens 32]

Writes ``bench/results/engine-<model>-throughput[-gguf].json`` (``bench.qwen_engine`` runs it, with
the workload: distinct agent conversations of about ``--prompt-tokens`` tokens each). The goal: 4
sequences at least 3x the tokens/s of 1. Not a latency benchmark (no arrivals, no server).

For each batch size B and each repeat: the prefix cache is cleared (every prompt is prefilled anew),
then B requests go through :meth:`engine.engine.Engine.generate_many` with ``batch_size=B``: prefilled
one after another, then decoded in shared steps (one forward pass for all B per token), greedy,
``ignore_eos`` and no stop strings, ``new_tokens + 1`` tokens each. ``min_tokens`` is not set: a row
it holds leaves the batched greedy pick and is sampled alone (``engine.decode.Decoder.step``).

Timing, from the engine's own :class:`engine.results.Timings`::

    request 0   [prefill]----------------- decode_s (includes the later prefills) ---------|
    request B-1                 [prefill]------ decode_s: the B sequences' shared steps ---|
                                         ^ last prefill ends          last finish ends ^

The last request starts after every other prefill and finishes last (requests ending at the same
step finish in order), so its ``decode_s`` is the batch's decode alone (with the finishes that store
each reply's KV). Decode tokens/s = B * new_tokens / that: the first token of each reply comes from
the prefill's last hidden state, as in ``bench.qwen_engine``'s speed section. Prefill seconds are
the requests' ``prefill_s`` summed. Medians over repeats, the batch sizes interleaved.

The ceiling beside each row: the machine's copy bandwidth (a torch ``copy_`` of a large buffer, bytes
read plus written per second, median of 3) over the weight bytes one decode step of B rows reads
(:func:`engine.models.gguf_weights.decode_bytes`: the GGUF's decode forms up to its ``DECODE_ROWS``
rows, the dense weights beyond), times B. It leaves out the KV and embedding reads, so it is an upper
bound.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bench.engine_speed import _timed
from engine.engine import Engine
from engine.models import gguf_weights as gw

MEASURES = ["engine", "bench/qwen_throughput.py"]
"""What a throughput result depends on (``bench.qwen_engine``, which runs it, is added by ``write_result``)."""

GOAL_BATCH, GOAL_SPEEDUP = 4, 3.0
"""Issue 52: decode tokens/s of 4 sequences at least 3x that of 1."""


@dataclass(frozen=True)
class BatchRun:
    """One :meth:`Engine.generate_many` of ``batch`` requests decoded together.

    Attributes:
        steps: decode steps each reply ran (``new_tokens``; its first token comes from the prefill).
        tokens: each reply's generated tokens (``steps + 1``).
        prompt_tokens / prefill_tokens: each request's prompt, and the part of it computed (the rest
            was in the prefix cache: the template's opening the conversations share).
        prefill_s: the requests' prefill seconds, summed. decode_s: the batch's decode seconds.
    """

    batch: int
    steps: int
    tokens: tuple[int, ...]
    prompt_tokens: tuple[int, ...]
    prefill_tokens: tuple[int, ...]
    prefill_s: float
    decode_s: float

    def __post_init__(self) -> None:
        assert len(self.tokens) == self.batch and all(t == self.steps + 1 for t in self.tokens), self

    @property
    def decode_tok_s(self) -> float:
        return self.batch * self.steps / max(self.decode_s, 1e-9)


def run_batch(eng: Engine, prompts: Sequence[list[dict[str, Any]]], new_tokens: int) -> BatchRun:
    """Generate ``new_tokens + 1`` greedy tokens for each of ``prompts`` together (one batch of
    ``len(prompts)``), after clearing the prefix cache.

    Raises:
        RuntimeError: a reply ended early (the count of tokens would no longer be the batch's).
    """
    eng.clear_cache()
    requests = [eng.request(m, max_tokens=new_tokens + 1, temperature=0.0, stop=[], ignore_eos=True) for m in prompts]
    results = eng.generate_many(requests, batch_size=len(requests))
    short = [(i, r.finish_reason, len(r.token_ids)) for i, r in enumerate(results)
             if len(r.token_ids) != new_tokens + 1]
    if short:
        raise RuntimeError(f"replies ended before {new_tokens + 1} tokens (index, reason, tokens): {short}")
    return BatchRun(batch=len(prompts), steps=new_tokens, tokens=tuple(len(r.token_ids) for r in results),
                    prompt_tokens=tuple(r.usage.prompt_tokens for r in results),
                    prefill_tokens=tuple(r.usage.prefill_tokens for r in results),
                    prefill_s=sum(r.timings.prefill_s for r in results), decode_s=results[-1].timings.decode_s)


def copy_bandwidth(nbytes: int, repeats: int = 3) -> list[float]:
    """GB/s of a torch ``copy_`` between two ``nbytes`` buffers (bytes read plus written), one per repeat.

    Raises:
        ValueError: ``nbytes`` or ``repeats`` below 1.
    """
    if nbytes < 1 or repeats < 1:
        raise ValueError(f"nbytes and repeats must be at least 1, got {nbytes} and {repeats}")
    src = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.empty_like(src)
    dst.copy_(src)  # touch every page first
    copy = _timed(lambda: dst.copy_(src))
    return [2 * nbytes / copy() / 1e9 for _ in range(repeats)]


def bench_throughput(eng: Engine, prompts: Sequence[list[dict[str, Any]]], batches: Sequence[int] = (1, 2, 4, 8),
                     new_tokens: int = 32, repeats: int = 3, copy_bytes: int = 1 << 30) -> dict[str, Any]:
    """Decode tokens/s of each batch size in ``batches`` (the first B of ``prompts``), beside the
    bandwidth ceiling, and whether the goal (4 sequences >= 3x 1) is met; prints a table.

    Raises:
        ValueError: a batch size below 1 or above ``len(prompts)``, ``new_tokens`` or ``repeats`` below 1.
    """
    if not batches or min(batches) < 1 or max(batches) > len(prompts):
        raise ValueError(f"batch sizes must be from 1 to {len(prompts)} (the prompts given), got {list(batches)}")
    if new_tokens < 1 or repeats < 1:
        raise ValueError(f"new_tokens and repeats must be at least 1, got {new_tokens} and {repeats}")
    copy = copy_bandwidth(copy_bytes)
    bandwidth = statistics.median(copy)
    run_batch(eng, prompts[:1], 1)  # warm-up
    runs: dict[int, list[BatchRun]] = {b: [] for b in batches}
    for r in range(repeats):  # interleaved, the order reversed every repeat
        for b in (batches if r % 2 == 0 else list(reversed(batches))):
            runs[b].append(run_batch(eng, prompts[:b], new_tokens))
    rows = [_row(b, runs[b], gw.decode_bytes(eng.model, rows=b), bandwidth) for b in batches]
    base = next((row for row in rows if row["batch"] == 1), None)
    for row in rows:
        row["speedup_vs_1"] = row["decode_tok_s"] / base["decode_tok_s"] if base is not None else None
    goal = _goal(rows)
    print(f"copy bandwidth {bandwidth:.1f} GB/s; {new_tokens} decode steps, medians of {repeats}", flush=True)
    print(f"{'B':>3} {'tok/s':>9} {'vs B=1':>7} {'ceiling':>9} {'share':>6} {'prefill s':>9} {'step GB':>8}")
    for row in rows:
        speedup = f"{row['speedup_vs_1']:.2f}x" if row["speedup_vs_1"] is not None else "-"
        print(f"{row['batch']:>3} {row['decode_tok_s']:>9.2f} {speedup:>7} {row['ceiling_tok_s']:>9.1f} "
              f"{row['share_of_ceiling']:>6.1%} {row['prefill_s']:>9.2f} {row['step_weight_bytes'] / 1e9:>8.3f}")
    print(f"goal: {GOAL_BATCH} sequences >= {GOAL_SPEEDUP}x the tokens/s of 1: "
          + ("not measured (" + goal["reason"] + ")" if goal["met"] is None else
             f"{goal['speedup']:.2f}x, {'met' if goal['met'] else 'not met'}"), flush=True)
    return {"new_tokens": new_tokens, "decode_steps": new_tokens, "batches": list(batches),
            "decode_rows": gw.DECODE_ROWS, "copy_bandwidth_gb_s": bandwidth, "copy_gb_s_runs": copy,
            "copy_buffer_bytes": copy_bytes, "rows": rows, "goal": goal}


def _row(batch: int, runs: list[BatchRun], step_bytes: int, bandwidth_gb_s: float) -> dict[str, Any]:
    rate = statistics.median(r.decode_tok_s for r in runs)
    ceiling = bandwidth_gb_s * 1e9 / step_bytes * batch
    first = runs[0]
    return {"batch": batch, "sequences": batch, "tokens_per_sequence": first.steps + 1,
            "generated_tokens": sum(first.tokens), "decoded_tokens": batch * first.steps,
            "prompt_tokens": list(first.prompt_tokens), "prefill_tokens": list(first.prefill_tokens),
            "decode_tok_s": rate, "decode_tok_s_runs": [r.decode_tok_s for r in runs],
            "decode_s": statistics.median(r.decode_s for r in runs),
            "prefill_s": statistics.median(r.prefill_s for r in runs),
            "step_weight_bytes": step_bytes, "ceiling_tok_s": ceiling, "share_of_ceiling": rate / ceiling}


def _goal(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by = {row["batch"]: row for row in rows}
    goal: dict[str, Any] = {"batch": GOAL_BATCH, "vs_batch": 1, "speedup_at_least": GOAL_SPEEDUP}
    if GOAL_BATCH not in by or 1 not in by:
        return goal | {"speedup": None, "met": None, "reason": f"--batches lacks 1 or {GOAL_BATCH}"}
    speedup = by[GOAL_BATCH]["decode_tok_s"] / by[1]["decode_tok_s"]
    return goal | {"speedup": speedup, "met": speedup >= GOAL_SPEEDUP}
