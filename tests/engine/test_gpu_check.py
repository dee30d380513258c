"""``bench/gpu_check.py --small --device cpu``: the GPU check's steps, at tiny sizes, on CPU."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.usefixtures("one_thread")
def test_gpu_check_small_on_cpu_writes_every_section(tmp_path):
    probe = tmp_path / "test_probe.py"  # a stand-in for the exactness files: checks what pytest is given
    probe.write_text("import os\n\ndef test_device_is_passed():\n"
                     "    assert (os.environ['AKV_TEST_DEVICE'], os.environ['AKV_TEST_DTYPE']) == ('cpu', 'float32')\n")
    out = tmp_path / "gpu_check.json"
    # In this process (the script's imports and the tokenizer are already loaded); its pytest step
    # still runs in a subprocess, on the probe file.
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    rc = gpu_check.main(["--small", "--device", "cpu", "--tests", str(probe), "--contexts", "32", "--out", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    assert {"machine", "device", "dtype", "small", "exactness", "model", "throughput", "sweep", "ok"} <= set(report)
    assert report["ok"] and report["device"] == "cpu" and report["dtype"] == "float32"
    [tests] = report["exactness"]
    assert (tests["tests"], tests["failures"], tests["errors"], tests["rc"]) == (1, 0, 0, 0)
    assert report["model"]["parameters"] > 0 and report["model"]["device"] == "cpu"
    [row] = report["throughput"]
    assert row["context"] == 32 and all(row[k] > 0 for k in ("prefill_tok_s_ours", "prefill_tok_s_hf",
                                                              "decode_tok_s_ours", "decode_tok_s_hf"))
    sweep = report["sweep"]
    assert sweep["prefilled_with_tree"] < sweep["prefilled_without_tree"]
    assert sweep["hf_full_prefill_tokens_one_schedule"] > 0
