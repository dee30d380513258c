"""bench.qwen_engine --only throughput on the tiny random model: the result's shape and its token
counts (B sequences of new_tokens + 1 tokens each), never its timings."""

from __future__ import annotations

import json

import pytest

from bench.qwen_engine import main


def test_throughput_writes_a_row_per_batch_with_its_token_counts(tmp_path, capsys):
    out = tmp_path / "throughput.json"
    assert main(["--only", "throughput", "--model", "tiny-random", "--batches", "1", "2", "--new-tokens", "2",
                 "--repeats", "1", "--prompt-tokens", "128", "--copy-mb", "8", "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["model"] == "tiny-random" and got["weights"] == "dense" and got["provenance"]["measures"]
    t = got["throughput"]
    assert t["batches"] == [1, 2] and t["new_tokens"] == 2 and t["copy_bandwidth_gb_s"] > 0
    assert [row["batch"] for row in t["rows"]] == [1, 2]
    for row in t["rows"]:
        b = row["batch"]
        assert row["tokens_per_sequence"] == 3 and row["generated_tokens"] == 3 * b and row["decoded_tokens"] == 2 * b
        assert len(row["prompt_tokens"]) == b and all(n >= 128 for n in row["prompt_tokens"])
        assert len(row["decode_tok_s_runs"]) == 1 and row["step_weight_bytes"] > 0 and row["ceiling_tok_s"] > 0
    assert t["rows"][0]["speedup_vs_1"] == 1.0 and t["rows"][1]["speedup_vs_1"] > 0
    # no B=4 row: the goal is reported as not measured, not as missed
    assert t["goal"]["met"] is None and t["goal"]["speedup"] is None and "lacks" in t["goal"]["reason"]
    assert "goal: 4 sequences" in capsys.readouterr().out


def test_throughput_runs_alone_and_model_is_its_flag(capsys):
    with pytest.raises(SystemExit):
        main(["--only", "throughput", "speed", "--model", "tiny-random"])
    assert "run it alone" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--only", "speed", "--model", "tiny-random"])
    assert "--model is for --only throughput" in capsys.readouterr().err
