"""Qwen2.5-Coder-1.5B on the engine: exactness, speed against transformers and llama.cpp, memory.

    python -m bench.qwen_engine [--only exact speed memory | --only throughput] [--repeats 3] [--weights gguf]

Needs the model (``make qwen``) and, for the llama.cpp column, the ``bench`` extra
(``llama-cpp-python``, built from source where no wheel fits); without it that column is left
out and the JSON says why. Writes ``bench/results/engine-qwen2.5-coder-1.5b.json``.

- ``exact``: the lean forward against transformers' forward (float32 and bfloat16, 96 random
  tokens, max |a - b| / max |b| over all logits); the engine's prefill of a ChatML agent
  conversation with tools, under a schedule that drops two tool results and repositions, against
  the step-by-step reference executor (``engine.oracle.reference``), and then the full cache of
  the same conversation, which computes what the first request dropped beside what it reuses;
  and the template's part-by-part tokens against
  the tokenizer's encoding of the same text in one piece.
- ``speed``: prefill tokens/s at 512, 2,048 and 4,096 tokens and greedy decode tokens/s after
  them, for this engine (bfloat16 packed weights), transformers (bfloat16) and llama.cpp (the
  same Q4_K_M GGUF, as many threads as torch), interleaved, medians of ``--repeats``.
- ``memory``: a child process loads the engine in bfloat16 as ``akv eval`` does and evaluates one
  full-cache task of about 4,200 tokens (``mixed``, train split): its peak RSS and seconds.
- ``throughput`` (opt-in, run alone; ``--weights gguf`` too): batched decode tokens/s of 1, 2, 4 and 8
  distinct conversations of about 512 prompt tokens decoded together (``Engine.generate_many``),
  beside the copy-bandwidth ceiling, and the goal of 4 at 3x 1 (``bench.qwen_throughput``); writes
  ``bench/results/engine-<model>-throughput[-gguf].json`` (``--model tiny-random`` for a smoke test).

``--weights gguf`` measures the decode forms in the GGUF's own bits against bfloat16 instead
(``bench.qwen_gguf``: exactness over real conversations, per-projection kernels, decode tokens/s,
memory) and writes ``bench/results/engine-qwen2.5-coder-1.5b-gguf.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from bench import RESULTS, qwen_gguf, qwen_throughput, write_result
from bench.engine_speed import _interleaved, _median_ratio, _no_store, _random_ids, _timed, machine_info, rss_now_gb
from engine.engine import Engine
from engine.history import replay
from engine.oracle.reference import ReferenceExecutor
from engine.prefill import batched_prefill, history_jobs

MEASURES = ["engine"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""

MODEL = "qwen2.5-coder-1.5b"
TOOLS = [{"type": "function", "function": {
    "name": "read_page", "description": "Read one page of a document.",
    "parameters": {"type": "object", "properties": {"doc": {"type": "string"}, "cursor": {"type": "integer"}},
                   "required": ["doc"]}}}]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-12))


def _conversation(pages: int = 4, lines: int = 30, variant: int = 0) -> list[dict[str, Any]]:
    """An agent conversation reading ``pages`` tool results of ``lines`` lines; each ``variant``
    reads another document (it differs from the first user message on)."""
    doc = "runbook" if variant == 0 else f"runbook-{variant}"
    msgs: list[dict[str, Any]] = [{"role": "user", "content": f"Find when the {doc} says the deploy happens.",
                                   "tools": TOOLS}]
    for i in range(pages):
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": "read_page", "arguments": {"doc": doc, "cursor": i}}}
        msgs.append({"role": "assistant", "content": "", "tool_calls": [call]})
        body = " ".join(f"Line {i}.{j}: step {j} of section {i} checks service-{(i * 7 + j + 5 * variant) % 13}."
                        for j in range(lines))
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": body})
    msgs.append({"role": "user", "content": "So, when is the deploy?"})
    return msgs


def _throughput_prompts(eng: Engine, n: int, tokens: int) -> list[list[dict[str, Any]]]:
    """``n`` distinct one-page conversations (variants 1 to ``n``), each with the fewest page lines
    that bring its prompt to at least ``tokens`` tokens under ``eng``'s template."""
    def sized(variant: int) -> list[dict[str, Any]]:
        for lines in range(1, 1000):
            msgs = _conversation(pages=1, lines=lines, variant=variant)
            if len(eng.render(msgs).token_ids) >= tokens:
                return msgs
        raise ValueError(f"no conversation of up to 1,000 lines reaches {tokens} tokens")
    return [sized(v) for v in range(1, n + 1)]


def _engine_vs_reference(eng: Engine, msgs: list[dict[str, Any]], schedule: dict[str, Any]) -> float:
    items = eng.layout(msgs, schedule).items
    g = eng.start(msgs, schedule, max_tokens=1, stop=[], ignore_eos=True)
    try:
        logits = eng.model.logits(g.hidden[None])[0]
    finally:
        eng.finish(g)
    return _rel(logits, ReferenceExecutor(eng.model).run(items).last_logits)


def bench_exact(repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ids = torch.randint(1000, 100_000, (96,), generator=torch.Generator().manual_seed(1))
    ref32: torch.Tensor | None = None
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        eng = Engine.from_pretrained(MODEL, dtype=dtype, keep_source=True)
        m = eng.model
        hist = replay(ids.tolist())
        pre = batched_prefill(m, hist.token_ids, hist.compute_pos, history_jobs(hist, np.ones(96, dtype=bool)),
                              _no_store, list(range(96)))
        assert pre.logits is not None
        lean = pre.logits.float()
        with torch.no_grad():
            hf = m.hf(ids[None]).logits[0].float()
        row: dict[str, Any] = {"lean_vs_transformers_rel": _rel(lean, hf)}
        if ref32 is None:
            ref32 = hf
            msgs = _conversation()
            n = len(msgs)
            first: dict[str, Any] = {"drop_message": {}, "reposition": []}
            dropped: dict[str, Any] = {"drop_message": {str(n - 2): [2, 4]}, "reposition": [n - 2]}
            fresh = Engine(m, eng.tokenizer, "chatml", name=eng.name)
            row["engine_vs_reference_rel"] = {  # the second request computes what the first dropped
                "drop_two_tool_results_and_reposition": _engine_vs_reference(fresh, msgs, dropped),
                "full_cache_after_the_drop": _engine_vs_reference(fresh, msgs, first)}
            text = _qwen_text(eng, msgs)
            whole = eng.tokenizer.encode(text, add_special_tokens=False)
            parts = [int(t) for t in eng.render(msgs).token_ids]
            row["template_tokens"] = {"part_by_part": len(parts), "one_piece": len(whole),
                                      "equal": parts == whole}
        else:
            same = (lean.argmax(-1) == ref32.argmax(-1)).float().mean()
            row["top1_agreement_with_float32_transformers"] = float(same)
        out[name] = row
        print(f"{name}: {json.dumps(row)}", flush=True)
        del eng, m, lean, hf
    return out


def _qwen_text(eng: Engine, msgs: list[dict[str, Any]]) -> str:
    """The conversation as text, part by part as the template writes it (BOS-free, as Qwen's)."""
    from engine.template import normalize_message

    t = eng.renderer.template
    norm = [normalize_message(msg, i) for i, msg in enumerate(msgs)]
    return "".join(p.text for i, msg in enumerate(norm) for p in t.parts(msg, i)) + t.generation_prompt


def _llama(threads: int, n_ctx: int) -> Any:
    from llama_cpp import Llama

    from engine.models.catalog import QWEN_CODER
    from engine.settings import settings

    path = settings().cache_dir / "gguf" / QWEN_CODER.gguf_name
    return Llama(model_path=str(path), n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=threads,
                 n_threads_batch=threads, logits_all=False, verbose=False)


def bench_speed(repeats: int, contexts: tuple[int, ...] = (512, 2048, 4096), new_tokens: int = 32) -> dict[str, Any]:
    eng = Engine.from_pretrained(MODEL, dtype=torch.bfloat16, keep_source=True)
    hf = eng.model.hf
    threads = torch.get_num_threads()
    try:
        llm: Any = _llama(threads, max(contexts) + new_tokens + 16)
        llama_note = "llama-cpp-python " + __import__("llama_cpp").__version__
    except ImportError as err:
        llm, llama_note = None, f"not measured: {err} (pip install -e '.[bench]')"
    rows = []
    for n in contexts:
        ids = _random_ids(n, seed=n)
        hist = replay(ids)

        def ours(h: Any = hist, n: int = n) -> None:
            batched_prefill(eng.model, h.token_ids, h.compute_pos, history_jobs(h, np.ones(n, dtype=bool)), _no_store,
                            [n - 1])

        def theirs(ids: list[int] = ids) -> None:
            with torch.no_grad():
                hf(torch.tensor([ids]), logits_to_keep=1)

        def llama(ids: list[int] = ids) -> None:
            llm.reset()
            llm.eval(ids)

        fns: list[Callable[[], None]] = [ours, theirs]
        if llm is not None:
            fns.append(llama)
        for f in fns:
            f()
        times = _interleaved([_timed(f) for f in fns], repeats)
        msgs = [{"role": "user", "content": eng.tokenizer.decode(ids[: n - 24])}]
        warm = Engine(eng.model, eng.tokenizer, "chatml", name=eng.name)
        warm.chat(msgs, max_tokens=1)

        def ours_decode(warm: Engine = warm, msgs: list[dict[str, Any]] = msgs) -> float:
            r = warm.chat(msgs, max_tokens=new_tokens + 1, temperature=0.0, stop=[], ignore_eos=True)
            return (len(r.token_ids) - 1) / r.timings.decode_s

        inp = torch.tensor([ids])

        def gen(k: int, inp: torch.Tensor = inp) -> None:
            with torch.no_grad():
                hf.generate(inp, max_new_tokens=k, min_new_tokens=k, do_sample=False, pad_token_id=0, eos_token_id=None)

        def hf_decode(gen: Callable[[int], None] = gen) -> float:
            t1, tk = _timed(lambda: gen(1))(), _timed(lambda: gen(1 + new_tokens))()
            return new_tokens / max(tk - t1, 1e-9)

        def llama_decode(ids: list[int] = ids) -> float:
            llm.reset()
            llm.eval(ids)
            t = time.perf_counter()
            for _ in range(new_tokens):
                llm.eval([llm.sample(temp=0.0)])
            return new_tokens / (time.perf_counter() - t)

        dec: list[Callable[[], float]] = [ours_decode, hf_decode]
        if llm is not None:
            dec.append(llama_decode)
        rates = _interleaved(dec, repeats)
        row: dict[str, Any] = {"context": n,
                               "prefill_tok_s": {"ours": n / statistics.median(times[0]),
                                                 "transformers": n / statistics.median(times[1])},
                               "decode_tok_s": {"ours": statistics.median(rates[0]),
                                                "transformers": statistics.median(rates[1])},
                               "prefill_vs_transformers": _median_ratio(times[1], times[0]),
                               "decode_vs_transformers": _median_ratio(rates[0], rates[1])}
        if llm is not None:
            row["prefill_tok_s"]["llama.cpp"] = n / statistics.median(times[2])
            row["decode_tok_s"]["llama.cpp"] = statistics.median(rates[2])
            row["prefill_vs_llama_cpp"] = _median_ratio(times[2], times[0])
            row["decode_vs_llama_cpp"] = _median_ratio(rates[0], rates[2])
        rows.append(row)
        print(f"ctx {n:5d}  prefill tok/s " + ", ".join(f"{k} {v:.0f}" for k, v in row["prefill_tok_s"].items())
              + "  | decode tok/s " + ", ".join(f"{k} {v:.2f}" for k, v in row["decode_tok_s"].items()), flush=True)
    return {"threads": threads, "new_tokens": new_tokens, "llama_cpp": llama_note, "rows": rows}


def _memory_child(target_tokens: int) -> dict[str, Any]:
    """In a fresh process: what one bfloat16 evaluation process holds, and one task's seconds."""
    from evals.cache.evaluator import EvalConfig, PolicySpec, Replay
    from evals.tasks import load_suite

    t = time.perf_counter()
    eng = Engine.from_pretrained(MODEL, dtype=torch.bfloat16)
    load_s = time.perf_counter() - t
    rss_load = rss_now_gb()
    tasks = load_suite("mixed", "train")
    sizes = [(len(eng.render(task.messages).token_ids), task) for task in tasks[:60]]
    tokens, task = min(sizes, key=lambda s: abs(s[0] - target_tokens))
    replay_ = Replay(eng, EvalConfig(generate=False))
    t = time.perf_counter()
    result = replay_.evaluate(PolicySpec("full"), task)
    seconds = time.perf_counter() - t
    return {"task": task.id, "tokens": tokens, "probes": len(result.probes),
            "passed": sum(p.passed for p in result.probes), "load_s": load_s, "eval_s": seconds,
            "rss_after_load_gb": rss_load, "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}


def bench_memory(target_tokens: int = 4200) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.qwen_engine", "--memory-child", str(target_tokens)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=os.environ.copy())
    if proc.returncode != 0:
        raise SystemExit(f"the memory child failed:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"one bfloat16 evaluation process: load {out['load_s']:.1f}s, RSS after load {out['rss_after_load_gb']:.2f} "
          f"GB, peak {out['peak_rss_gb']:.2f} GB; full cache on {out['task']} ({out['tokens']} tokens) "
          f"{out['eval_s']:.1f}s, {out['passed']}/{out['probes']} probes", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", default=["exact", "speed", "memory"],
                   choices=["exact", "speed", "memory", "throughput"],
                   help="throughput (opt-in, run alone: its own result file): batched decode tokens/s")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None, help="default: bench/results/engine-<model>[-throughput][-gguf].json")
    p.add_argument("--model", default=MODEL, help=f"throughput only: the model (default {MODEL}; tiny-random "
                   "for a smoke test)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8],
                   help="throughput: sequences decoded together, one row each")
    p.add_argument("--new-tokens", type=int, default=32, help="throughput: decode steps per sequence")
    p.add_argument("--prompt-tokens", type=int, default=512, help="throughput: each request's prompt, at least")
    p.add_argument("--copy-mb", type=int, default=1024, help="throughput: the buffer the copy bandwidth is timed on")
    p.add_argument("--weights", default="dense", choices=["dense", "gguf"],
                   help="gguf: decode in the GGUF's own bits against bfloat16 (bench.qwen_gguf; its own result file)")
    p.add_argument("--positions", type=int, default=2048, help="--weights gguf: positions of the exactness check")
    p.add_argument("--q6k-forms", default="dense,int8",
                   help="--weights gguf: the Q6_K forms compared with bfloat16 (comma-separated: dense, int8)")
    p.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--q6k", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.memory_child is not None:
        if args.weights == "gguf":
            print(json.dumps(qwen_gguf.memory_child(args.memory_child, None if args.q6k == "none" else args.q6k)))
        else:
            print(json.dumps(_memory_child(args.memory_child)))
        return 0
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, got {args.repeats}")
    if "throughput" in args.only:
        if len(args.only) > 1:
            p.error(f"--only throughput writes its own result file: run it alone, not with {args.only}")
        if min(args.batches) < 1 or args.new_tokens < 1 or args.prompt_tokens < 1 or args.copy_mb < 1:
            p.error("--batches, --new-tokens, --prompt-tokens and --copy-mb must be at least 1, got "
                    f"{args.batches}, {args.new_tokens}, {args.prompt_tokens}, {args.copy_mb}")
        return _main_throughput(args, argv)
    if args.model != MODEL:
        p.error(f"--model is for --only throughput; the other sections measure {MODEL}")
    if args.weights == "gguf":
        return _main_gguf(args, argv)
    report: dict[str, Any] = {"model": MODEL, **machine_info(), "repeats": args.repeats,
                              "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "load_average_start": os.getloadavg(),
                              "command": "python -m bench.qwen_engine " + " ".join(argv or sys.argv[1:])}
    if "memory" in args.only:  # first: a fresh machine state, no other model in this process
        report["memory"] = bench_memory()
    if "exact" in args.only:
        report["exact"] = bench_exact(args.repeats)
    if "speed" in args.only:
        report["speed"] = bench_speed(args.repeats)
    write_result(args.out or RESULTS / f"engine-{MODEL}.json", report, measures=MEASURES)
    return 0


def _main_throughput(args: argparse.Namespace, argv: list[str] | None) -> int:
    gguf = args.weights == "gguf"
    out = args.out or RESULTS / f"engine-{args.model}-throughput{'-gguf' if gguf else ''}.json"
    eng = Engine.from_pretrained(args.model, dtype=torch.bfloat16, weights=args.weights)
    prompts = _throughput_prompts(eng, max(args.batches), args.prompt_tokens)
    report: dict[str, Any] = {"model": args.model, "dtype": "bfloat16", "weights": args.weights, **machine_info(),
                              "repeats": args.repeats, "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                              "load_average_start": os.getloadavg(), "prompt_tokens_target": args.prompt_tokens,
                              "command": "python -m bench.qwen_engine " + " ".join(argv or sys.argv[1:])}
    report["throughput"] = qwen_throughput.bench_throughput(eng, prompts, args.batches, args.new_tokens,
                                                            args.repeats, args.copy_mb << 20)
    report["load_average_end"] = os.getloadavg()
    write_result(out, report, measures=qwen_throughput.MEASURES)
    return 0


def _main_gguf(args: argparse.Namespace, argv: list[str] | None) -> int:
    out = args.out or str(RESULTS / f"engine-{MODEL}-gguf.json")
    report: dict[str, Any] = {"model": MODEL, "dtype": "bfloat16", "weights": "gguf", **machine_info(),
                              "repeats": args.repeats, "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                              "load_average_start": os.getloadavg(),
                              "command": "python -m bench.qwen_engine " + " ".join(argv or sys.argv[1:])}
    forms = tuple(args.q6k_forms.split(","))
    report["q6k_forms"] = list(forms)
    sections = {"memory": qwen_gguf.bench_memory,
                "exact": lambda: qwen_gguf.bench_exact(args.positions, q6k_forms=forms),
                "speed": lambda: qwen_gguf.bench_speed(args.repeats, q6k_forms=forms)}
    for name, run in sections.items():
        if name in args.only:
            report[name] = run()
            report["load_average_end"] = os.getloadavg()
            write_result(out, report, measures=MEASURES)  # after each section: a crash keeps what was measured
    return 0


if __name__ == "__main__":
    sys.exit(main())
