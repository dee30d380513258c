"""Qwen2.5-Coder-1.5B with decode weights in the GGUF's own bits, against bfloat16 (issue 52).

    python -m bench.qwen_engine --weights gguf [--only exact speed memory] [--repeats 2]

Writes ``bench/results/engine-qwen2.5-coder-1.5b-gguf.json`` (the bfloat16 rows it compares with
are measured in the same run, not read from the dense file).

- ``exact``: the first train tasks of the ``mixed`` suite rendered with the model's template, cut
  to ``--positions`` (2,048) positions in pieces of 1,024 tokens; every position's logits from
  float32 transformers on the dequantized GGUF (the reference), from the bfloat16 engine and from
  each GGUF form (Q6_K dense, Q6_K int8) with its decode form forced onto every row (the kernels'
  rows are independent: ``tests/engine/test_gguf_weights.py`` checks one row against many). Per
  form: max |a - b| / max |b| over all logits (the dense file's measure), the relative L2 error, and
  top-1 agreement with the reference. The bar: no further than bfloat16 on both.
- ``speed``: per projection kind, summed over the 28 layers (so no weight stays in cache), seconds
  of the decode form against the dense bfloat16 weights at 1, 4 and 64 rows; the LM head likewise;
  then greedy decode tokens/s after 512, 2,048 and 4,096 tokens of context for the bfloat16 engine
  and each GGUF form, interleaved, medians of ``--repeats``. The engines share one prefix cache: a
  prompt is prefilled once, by the dense weights every form keeps for prefill (the same KV bits).
  llama.cpp's column is measured only when ``llama-cpp-python`` is installed.
- ``memory``: a child process loads the engine as ``akv eval`` does (bfloat16; then again with
  ``weights="gguf"``, Q6_K dense) and evaluates one full-cache task of about 4,200 tokens: RSS after
  load and peak; and the decode-only footprint (the bytes a decode step reads, plus embeddings and
  norms). The speed section gives every form's decode bytes.
"""

from __future__ import annotations

import functools
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

from bench.engine_speed import _interleaved, _random_ids, rss_now_gb
from engine.attention import attend_blocks, plan_blocks
from engine.engine import Engine
from engine.models import gguf_forms as gf
from engine.models import gguf_weights as gw
from engine.models.lean import LeanModel

MODEL = "qwen2.5-coder-1.5b"
EVERY_ROW = 1 << 30
"""``max_rows`` that forces the decode form onto every row (exactness only)."""


def _conversations(positions: int, piece: int) -> list[list[int]]:
    from engine.layout import Renderer
    from engine.models.loading import load_tokenizer
    from evals.tasks import load_suite

    renderer = Renderer(load_tokenizer(MODEL), "chatml")
    out: list[list[int]] = []
    for task in load_suite("mixed", "train"):
        ids = [int(t) for t in renderer.render(task.messages).token_ids]
        if len(ids) >= piece:
            out.append(ids[:piece])
        if len(out) * piece >= positions:
            return out
    raise SystemExit(f"the mixed suite has fewer than {positions} positions in pieces of {piece}")


def _hidden(model: LeanModel, ids: list[int]) -> torch.Tensor:
    """Last-layer hidden states (before the final norm) of every position, causal attention."""
    pos = np.arange(len(ids))
    plan = plan_blocks(pos, pos, None, model.dtype, model.device)
    out = model.forward(ids, pos, lambda li, q, k, v, rows: attend_blocks(q, k, v, plan, model.scaling),
                        logit_rows=pos, logits=False)
    assert out.hidden is not None
    return out.hidden


class _Agreement:
    """Running comparison of logits against the reference, chunk by chunk."""

    def __init__(self) -> None:
        self.max_diff = self.max_ref = self.sq_diff = self.sq_ref = 0.0
        self.same = self.n = 0

    def add(self, got: torch.Tensor, ref: torch.Tensor) -> None:
        diff = got.float() - ref
        self.max_diff = max(self.max_diff, float(diff.abs().max()))
        self.max_ref = max(self.max_ref, float(ref.abs().max()))
        self.sq_diff += float(diff.double().square().sum())
        self.sq_ref += float(ref.double().square().sum())
        self.same += int((got.argmax(-1) == ref.argmax(-1)).sum())
        self.n += ref.shape[0]

    def row(self) -> dict[str, Any]:
        return {"rel_max": self.max_diff / self.max_ref, "rel_l2": (self.sq_diff / self.sq_ref) ** 0.5,
                "top1_agreement": self.same / self.n, "positions": self.n}


def bench_exact(positions: int = 2048, piece: int = 1024, chunk: int = 128,
                q6k_forms: tuple[str, ...] = ("dense", "int8")) -> dict[str, Any]:
    import gc

    from engine.models.loading import load_model

    convs = _conversations(positions, piece)
    t = time.perf_counter()
    ref = load_model(MODEL, dtype=torch.float32).hf_model  # the float32 dequantized GGUF
    with torch.no_grad():
        ref_hidden = [ref.model(torch.tensor([ids])).last_hidden_state[0] for ids in convs]  # after the norm
    head = ref.lm_head.weight.detach()
    del ref
    gc.collect()
    eng = Engine.from_pretrained(MODEL, dtype=torch.bfloat16)  # after the float32 model is gone
    print(f"reference: float32 transformers over {len(convs)} x {piece} positions, {time.perf_counter() - t:.0f}s",
          flush=True)
    forms: dict[str, Callable[[], LeanModel]] = {
        "bfloat16": lambda: eng.model,
        **{f"gguf_q6k_{q}": functools.partial(gw.attach, eng.model, q, max_rows=EVERY_ROW) for q in q6k_forms}}
    out: dict[str, Any] = {"reference": "float32 transformers on the dequantized GGUF",
                           "conversations": f"{len(convs)} train tasks of the mixed suite, first {piece} tokens each",
                           "decode_form_rows": "every row (forced)"}
    for name, make in forms.items():
        t = time.perf_counter()
        model = make()
        agree = _Agreement()
        for ids, rh in zip(convs, ref_hidden):
            hidden = _hidden(model, ids)
            for a in range(0, len(ids), chunk):
                with torch.no_grad():
                    agree.add(model.logits(hidden[a:a + chunk]), torch.nn.functional.linear(rh[a:a + chunk], head))
        out[name] = {**agree.row(), "seconds": time.perf_counter() - t}
        print(f"{name}: {json.dumps(out[name])}", flush=True)
        del model
    base = out["bfloat16"]
    for name in (f"gguf_q6k_{q}" for q in q6k_forms):
        row = out[name]
        row["meets_bar"] = bool(row["rel_max"] <= base["rel_max"] and row["rel_l2"] <= base["rel_l2"]
                                and row["top1_agreement"] >= base["top1_agreement"])
    return out


def _kernel_rows(forms: dict[str, LeanModel], rows: tuple[int, ...], repeats: int) -> list[dict[str, Any]]:
    """Seconds per projection kind summed over all layers, decode form vs dense, at each row count."""
    dense = forms["bfloat16"]
    cfg = dense.config
    width = {"qkv": cfg.hidden_size, "o": dense.n_heads * dense.head_dim, "gate_up": cfg.hidden_size,
             "down": cfg.intermediate_size}
    out = []
    for r in rows:
        for kind in ("qkv", "o", "gate_up", "down", "head"):
            x = torch.randn(r, cfg.hidden_size if kind == "head" else width[kind]).bfloat16()
            fns = []
            for model in forms.values():
                if kind == "head":
                    calls = [_decode(model.logit_head())]
                else:
                    calls = [_decode(model.projections(i)[kind]) for i in range(len(model.layers))]

                def run(calls: list[Any] = calls, x: torch.Tensor = x) -> float:
                    t = time.perf_counter()
                    for c in calls:
                        c(x)
                    return time.perf_counter() - t
                fns.append(run)
            for f in fns:
                f()
            times = _interleaved(fns, repeats)
            row = {"rows": r, "projection": kind, **{f"{k}_ms": 1e3 * min(v) for k, v in zip(forms, times)}}
            out.append(row)
            print("  ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()),
                  flush=True)
    return out


def _decode(fn: Any) -> Any:
    return fn.decode if isinstance(fn, gf.ByRows) else fn


def bench_speed(repeats: int, contexts: tuple[int, ...] = (512, 2048, 4096), new_tokens: int = 32,
                q6k_forms: tuple[str, ...] = ("dense", "int8")) -> dict[str, Any]:
    base = Engine.from_pretrained(MODEL, dtype=torch.bfloat16)
    forms = {"bfloat16": base.model, **{f"gguf_q6k_{q}": gw.attach(base.model, q) for q in q6k_forms}}
    kernels = _kernel_rows(forms, (1, 4, 64), max(repeats, 3))
    try:
        import llama_cpp

        llama_note = f"llama-cpp-python {llama_cpp.__version__}: not compared here (bench.qwen_engine's dense run does)"
    except ImportError:
        llama_note = "not measured: llama-cpp-python is not installed (pip install -e '.[bench]')"
    rows = []
    for n in contexts:
        ids = _random_ids(n, seed=n)
        msgs = [{"role": "user", "content": base.tokenizer.decode(ids[: n - 24])}]
        first = Engine(base.model, base.tokenizer, "chatml", name=base.name)
        first.chat(msgs, max_tokens=1)  # the prefill, once, by the dense weights every form keeps for it
        engines = [first] + [Engine(m, base.tokenizer, "chatml", name=base.name) for m in list(forms.values())[1:]]
        for e in engines[1:]:
            e.tree = first.tree  # the same prompt KV bits: prefill runs the same dense weights in every form

        def decode(e: Engine, msgs: list[dict[str, Any]] = msgs) -> float:
            r = e.chat(msgs, max_tokens=new_tokens + 1, temperature=0.0, stop=[], ignore_eos=True)
            return (len(r.token_ids) - 1) / r.timings.decode_s

        for e in engines:
            decode(e)
        rates = _interleaved([functools.partial(decode, e) for e in engines], repeats)
        row: dict[str, Any] = {"context": n, "decode_tok_s": {k: statistics.median(v) for k, v in zip(forms, rates)}}
        for k in list(forms)[1:]:
            row[f"{k}_vs_bfloat16"] = statistics.median(a / b for a, b in zip(rates[list(forms).index(k)], rates[0]))
        rows.append(row)
        print(f"ctx {n:5d}  decode tok/s " + ", ".join(f"{k} {v:.2f}" for k, v in row["decode_tok_s"].items()),
              flush=True)
    return {"threads": torch.get_num_threads(), "new_tokens": new_tokens, "decode_rows": gw.DECODE_ROWS,
            "decode_weights_gb": {k: gw.decode_bytes(m) / 1e9 for k, m in forms.items()},
            "llama_cpp": llama_note, "kernels": kernels, "rows": rows}


def memory_child(target_tokens: int, q6_k: str | None) -> dict[str, Any]:
    """In a fresh process: one evaluation process in bfloat16, with ``q6_k``'s GGUF decode form
    (``None``: dense only), and its decode-only footprint."""
    from evals.cache.evaluator import EvalConfig, PolicySpec, Replay
    from evals.tasks import load_suite

    t = time.perf_counter()
    if q6_k == "dense":  # as akv eval --dtype bfloat16 --weights gguf loads it
        eng = Engine.from_pretrained(MODEL, dtype=torch.bfloat16, weights="gguf")
    else:
        eng = Engine.from_pretrained(MODEL, dtype=torch.bfloat16)
        if q6_k is not None:
            eng = Engine(gw.attach(eng.model, q6_k), eng.tokenizer, "chatml", name=eng.name)
    load_s = time.perf_counter() - t
    rss_load = rss_now_gb()
    m = eng.model
    small = sum(p.numel() * p.element_size() for p in m.norm.parameters()) + sum(
        w.numel() * w.element_size() for i in range(len(m.layers)) for w in _norms(m, i))
    table = m.embed.blocks if isinstance(m.embed, gf.BlockRows) else m.embed_tokens.weight
    decode_only = gw.decode_bytes(m) + table.numel() * table.element_size() + small
    tasks = load_suite("mixed", "train")
    sizes = [(len(eng.render(task.messages).token_ids), task) for task in tasks[:60]]
    tokens, task = min(sizes, key=lambda s: abs(s[0] - target_tokens))
    t = time.perf_counter()
    result = Replay(eng, EvalConfig(generate=False)).evaluate(PolicySpec("full"), task)
    return {"form": q6_k or "bfloat16", "task": task.id, "tokens": tokens, "probes": len(result.probes),
            "passed": sum(p.passed for p in result.probes), "load_s": load_s, "eval_s": time.perf_counter() - t,
            "rss_after_load_gb": rss_load, "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
            "decode_weights_gb": gw.decode_bytes(m) / 1e9, "decode_only_footprint_gb": decode_only / 1e9}


def _norms(m: LeanModel, i: int) -> list[torch.Tensor]:
    layer = m.layers[i]
    return [layer.input_layernorm.weight, layer.post_attention_layernorm.weight]


def bench_memory(target_tokens: int = 4200) -> dict[str, Any]:
    out = {}
    for form in ("none", "dense"):  # int8's decode bytes are in the speed section
        cmd = [sys.executable, "-m", "bench.qwen_engine", "--weights", "gguf", "--memory-child", str(target_tokens),
               "--q6k", form]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=os.environ.copy())
        if proc.returncode != 0:
            raise SystemExit(f"the memory child failed:\n{proc.stderr[-2000:]}")
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        out[row["form"]] = row
        print(f"{row['form']}: load {row['load_s']:.1f}s, RSS after load {row['rss_after_load_gb']:.2f} GB, peak "
              f"{row['peak_rss_gb']:.2f} GB, decode weights {row['decode_weights_gb']:.2f} GB, decode-only "
              f"{row['decode_only_footprint_gb']:.2f} GB; {row['task']} ({row['tokens']} tokens) {row['eval_s']:.1f}s, "
              f"{row['passed']}/{row['probes']} probes", flush=True)
    return out
