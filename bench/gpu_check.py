"""One prepared GPU check: exactness tests on the device, then throughput and the policy-sweep benchmark.

    python bench/gpu_check.py                         # on a GPU machine: cuda, bfloat16, ~1.5B model
    python bench/gpu_check.py --small --device cpu    # the same steps with tiny sizes (tested on CPU)

Steps, all in one run, results in one JSON file (``--out``, else ``$OUT/gpu_check.json`` when
``$OUT`` is set, else ``bench/results/gpu-check-<device>-<dtype>[-small].json``):

1. ``exactness``: pytest on the engine's exactness files with ``AKV_TEST_DEVICE`` /
   ``AKV_TEST_DTYPE`` set (``tests/conftest.py``), once per ``--test-dtypes`` entry; records
   passed / failed / skipped counts and the failing test ids.
2. ``model``: a Llama-style decoder randomly initialised on the device with ``from_config`` (no
   weights can reach such a machine): ~1.5B parameters (16 layers, hidden 2048, GQA 32/8 heads,
   the default model's 262k vocabulary); ``--small``: 2 layers, hidden 64.
3. ``throughput``: prefill and decode tokens/s of this engine vs plain transformers (forward, and
   ``generate`` with its own cache) at several context lengths (``bench.engine_speed.bench_throughput``).
4. ``sweep``: the rolling-drop policy sweep with and without the radix tree
   (``bench.engine_speed.bench_sweep``), plus plain transformers prefilling every request's full prompt
   (no reuse; drops not applied: what a server without a prefix cache pays in compute).

None of this was run on a GPU where it was written (no GPU there); ``--small --device cpu`` is.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

MEASURES = ["engine"]
"""What this result depends on: a change to one makes it stale (``bench.render_results``)."""

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

EXACTNESS_FILES = ("tests/engine/test_exactness.py", "tests/engine/test_engine.py", "tests/engine/test_devices.py",
                   "tests/engine/test_conformance.py", "tests/engine/test_rope.py", "tests/engine/test_head.py")


def machine(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(),
                            "torch": torch.__version__, "cuda_available": torch.cuda.is_available(),
                            "torch_threads": torch.get_num_threads(), "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if device == "cuda" and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update({"gpu": p.name, "gpu_memory_gib": round(p.total_memory / 2**30, 1),
                     "capability": f"{p.major}.{p.minor}", "cuda": torch.version.cuda})
    return info


def run_tests(files: list[str], device: str, dtype: str, timeout: float, extra: list[str]) -> dict[str, Any]:
    """pytest on ``files`` with the engines on ``device``/``dtype``; counts from its JUnit XML."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider", f"--junitxml={xml}",
               *extra, *files]
        env = {**os.environ, "AKV_TEST_DEVICE": device, "AKV_TEST_DTYPE": dtype, "HF_HUB_OFFLINE": "1"}
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
            rc, tail, timed_out = proc.returncode, (proc.stdout + proc.stderr)[-3000:], False
        except subprocess.TimeoutExpired as err:
            rc, tail, timed_out = -1, str(err.stdout or "")[-3000:], True
        out: dict[str, Any] = {"device": device, "dtype": dtype, "files": files, "rc": rc, "timed_out": timed_out,
                               "seconds": round(time.perf_counter() - t0, 1), "ok": rc == 0}
        if xml.exists():
            root = ET.parse(xml).getroot()
            suite = root.find("testsuite") if root.tag == "testsuites" else root
            assert suite is not None
            for key in ("tests", "failures", "errors", "skipped"):
                out[key] = int(suite.get(key, 0))
            out["failed"] = [f"{c.get('classname')}::{c.get('name')}" for c in suite.iter("testcase")
                             if c.find("failure") is not None or c.find("error") is not None][:30]
        if rc != 0:
            out["output_tail"] = tail
    print(f"exactness {device}/{dtype}: rc {rc}, {out.get('tests', '?')} tests, {out.get('failures', '?')} failed, "
          f"{out.get('skipped', '?')} skipped in {out['seconds']}s", flush=True)
    return out


def build_engine(device: str, dtype: str, small: bool) -> tuple[Any, dict[str, Any]]:
    """A randomly initialised Llama-style engine on ``device`` (weights never leave it)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from engine.engine import Engine
    from engine.models.lean import LeanModel
    from engine.models.loading import load_tokenizer

    tok = load_tokenizer("tiny-random")  # the default model's tokenizer (262k vocabulary)
    size: dict[str, Any] = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16) if small else dict(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64)
    cfg = LlamaConfig(vocab_size=len(tok), max_position_embeddings=32_768, tie_word_embeddings=True,
                      rope_parameters={"rope_type": "default", "rope_theta": 500_000.0}, bos_token_id=2,
                      eos_token_id=1, pad_token_id=0, **size)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device(device):
        hf = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype))
    hf.eval()
    name = "random-llama-" + ("tiny" if small else "1.5b")
    pool = (256 << 20) if small else (16 << 30)
    eng = Engine(LeanModel(hf, name), tok, "plain", pool_bytes=pool, name=name)
    n_params = sum(p.numel() for p in hf.parameters())
    info = {"name": name, "parameters": n_params, "config": {k: v for k, v in size.items()}, "vocab": len(tok),
            "dtype": dtype, "device": device, "init_seconds": round(time.perf_counter() - t0, 1),
            "kv_bytes_per_token": eng.geometry.bytes_per_token}
    print(f"model {name}: {n_params / 1e9:.2f}B parameters on {device} ({dtype})", flush=True)
    return eng, info


def hf_sweep_baseline(eng: Any, n_tools: int, schedules: int) -> dict[str, Any]:
    """Plain transformers: one full-prompt forward per request of the first sweep schedule (no reuse)."""
    import torch

    from bench.engine_speed import _sync, rolling_schedule, sweep_trajectory

    msgs = sweep_trajectory(n_tools)
    turns = list(range(4, len(msgs) + 1, 2))
    hf = eng.model.hf
    tokens = 0
    _sync()
    t0 = time.perf_counter()
    for t in turns:
        ids = eng.layout(msgs[:t], rolling_schedule(t, 1)).rendered.token_ids
        with torch.no_grad():
            hf(torch.tensor([ids], device=hf.device), logits_to_keep=1)
        tokens += len(ids)
    _sync()
    seconds = time.perf_counter() - t0
    return {"hf_full_prefill_tokens_one_schedule": tokens, "hf_full_prefill_seconds_one_schedule": seconds,
            "hf_full_prefill_seconds_extrapolated": seconds * schedules}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dtype", default=None, help="bfloat16 on cuda, float32 on cpu by default")
    ap.add_argument("--small", action="store_true", help="tiny sizes (a CPU smoke run of the same steps)")
    ap.add_argument("--test-dtypes", default=None, help="comma-separated dtypes for the exactness tests "
                    "(default: float32 and --dtype)")
    ap.add_argument("--tests", nargs="*", default=list(EXACTNESS_FILES), help="test files (none: skip)")
    ap.add_argument("--pytest-args", nargs="*", default=[], help="extra pytest arguments, e.g. -k name")
    ap.add_argument("--tests-timeout", type=float, default=900.0)
    ap.add_argument("--contexts", default=None, help="comma-separated prefill contexts")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: use --device cpu (with --small for a quick run)", file=sys.stderr)
        return 2
    dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    contexts = tuple(int(c) for c in args.contexts.split(",")) if args.contexts else (
        (32, 64) if args.small else (512, 2048, 8192))
    repeats = args.repeats or (1 if args.small else 3)
    report: dict[str, Any] = {"machine": machine(args.device), "device": args.device, "dtype": dtype,
                              "small": args.small, "exactness": [], "notes": []}
    test_dtypes = args.test_dtypes.split(",") if args.test_dtypes else list(dict.fromkeys(["float32", dtype]))
    if args.tests:
        for td in test_dtypes:
            report["exactness"].append(run_tests(args.tests, args.device, td, args.tests_timeout, args.pytest_args))
    eng, report["model"] = build_engine(args.device, dtype, args.small)
    from bench.engine_speed import bench_sweep, bench_throughput

    report["throughput"] = bench_throughput(eng, repeats, contexts, new_tokens=2 if args.small else 32)
    sweep_size = {"n_tools": 3, "schedules": 2, "no_tree_schedules": 1} if args.small else {
        "n_tools": 24, "schedules": 16, "no_tree_schedules": 2}
    report["sweep"] = bench_sweep(eng, **sweep_size)
    report["sweep"].update(hf_sweep_baseline(eng, sweep_size["n_tools"], sweep_size["schedules"]))
    if args.device == "cuda":
        report["machine"]["max_memory_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    report["ok"] = all(e.get("ok") for e in report["exactness"])
    out = Path(args.out) if args.out else (Path(os.environ["OUT"]) / "gpu_check.json" if os.environ.get("OUT") else
                                           ROOT / "bench" / "results" /
                                           f"gpu-check-{args.device}-{dtype}{'-small' if args.small else ''}.json")
    from bench import write_result  # after ROOT is on sys.path (run as a file)

    write_result(out, report, measures=MEASURES)
    print(f"exactness ok: {report['ok']}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
