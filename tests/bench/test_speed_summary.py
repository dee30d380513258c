"""bench.speed_summary reads what the benchmarks wrote: a row per goal, met or not, a missing source
a row without a value (never a guess)."""

from __future__ import annotations

import json

from bench.speed_summary import main, summary


def test_rows_follow_the_sources_and_a_missing_one_is_a_missing_value(tmp_path, capsys):
    (tmp_path / "engine-m.json").write_text(json.dumps({
        "throughput": [{"context": 512, "prefill_tok_s_ours": 300.0, "prefill_tok_s_hf": 150.0,
                        "prefill_share_of_peak": 0.6, "decode_ratio": 2.5},
                       {"context": 2048, "prefill_ratio": 1.2, "prefill_share_of_peak": 0.4, "decode_ratio": 1.9}],
        "restore": {"speedup_vs_reference": 3.5, "ratio_to_plain_prefill": 1.2}, "cpu_model": "X"}))
    (tmp_path / "eval-throughput.json").write_text(json.dumps({"rows": [{"share": True, "evals_per_min": 20.0},
                                                                         {"share": False, "evals_per_min": 4.0}]}))
    (tmp_path / "eval-lockstep.json").write_text(json.dumps({"speedup": 1.7, "same_rows": True}))
    run = tmp_path / "run"
    run.mkdir()
    (run / "fidelity.json").write_text(json.dumps({"speed": {"ratio": 3500.0}}))
    rows = {r["measure"]: r for r in summary(tmp_path, "m", run)}
    assert rows["prefill vs HF at 512 tokens"]["value"] == 2.0 and rows["prefill vs HF at 512 tokens"]["met"]
    assert not rows["prefill vs HF at 2048 tokens"]["met"] and rows["decode vs HF at 512 tokens of context"]["met"]
    assert rows["prefill vs HF at 4096 tokens"]["value"] is None and not rows["prefill vs HF at 4096 tokens"]["met"]
    assert rows["evaluations/min, radix sharing vs none"]["value"] == 5.0
    assert rows["restore vs a plain prefill (time ratio)"]["met"] is False
    assert rows["evaluations/min, policies of a task in lockstep vs one at a time"]["value"] == 1.7
    (tmp_path / "eval-lockstep.json").write_text(json.dumps({"speedup": 1.7, "same_rows": False}))
    differ = {r["measure"]: r for r in summary(tmp_path, "m", run)}
    assert differ["evaluations/min, policies of a task in lockstep vs one at a time"]["shown"] == "missing"
    assert rows["screen vs model inside a search"]["met"]
    flood = [r for m, r in rows.items() if m.startswith("small-request p50")]
    assert len(flood) == 2 and all(r["value"] is None and r["shown"] == "missing" for r in flood)
    # the run's figure is kept with the results: later summaries have it without --run
    kept = json.loads((tmp_path / "screen-in-search-m.json").read_text())
    provenance = kept.pop("provenance")
    assert kept == {"run": "run", "speed": {"ratio": 3500.0}}
    assert provenance["command"] and provenance["measures"] == ["engine", "evals/cache", "search_spaces", "rsi/cache"]
    again = {r["measure"]: r for r in summary(tmp_path, "m", None)}
    assert again["screen vs model inside a search"]["value"] == 3500.0
    assert again["screen vs model inside a search"]["source"].endswith("screen-in-search-m.json")
    (run / "fidelity.json").write_text(json.dumps({"speed": {}}))  # a run that measured no speed
    bare = {r["measure"]: r for r in summary(tmp_path, "m", run)}
    assert bare["screen vs model inside a search"]["value"] is None
    assert "no speed figure" in bare["screen vs model inside a search"]["source"]
    formats = [r for m, r in rows.items() if "bfloat16" in m]
    assert len(formats) == 5 and all(r["value"] is None and r["goal"] == "(no goal)" for r in formats)
    assert main(["--model", "m", "--results", str(tmp_path)]) == 0
    written = json.loads((tmp_path / "speed-summary.json").read_text())
    assert written["machine"]["cpu_model"] == "X" and len(written["rows"]) == len(rows)
    assert "goals met" in capsys.readouterr().out


def test_the_opt_in_bfloat16_rows_read_bench_weight_formats(tmp_path):
    (tmp_path / "weight-formats-m.json").write_text(json.dumps({
        "prefill": [{"tokens": 512, "bfloat16": {"vs_hf_float32": 2.1}},
                    {"tokens": 2048, "bfloat16": {"vs_hf_float32": 2.4}}],
        "decode": {"bfloat16": {"vs_float32": 1.25}},
        "evaluation": {"speedup": 1.3, "probes": 40, "probes_flipped": 2}}))
    rows = {r["measure"]: r for r in summary(tmp_path, "m", None)}
    assert rows["prefill vs HF float32 at 512 tokens, bfloat16 weights (opt-in)"]["value"] == 2.1
    assert rows["prefill vs HF float32 at 2048 tokens, bfloat16 weights (opt-in)"]["value"] == 2.4
    assert rows["evaluations/min, bfloat16 vs float32 (opt-in)"]["value"] == 1.3
    assert rows["decode vs float32 at 512 tokens of context, bfloat16 (opt-in)"]["value"] == 1.25
    flipped = rows["probes whose pass changes, bfloat16 vs float32"]
    assert flipped["value"] == 0.05 and flipped["shown"] == "5.0%" and flipped["goal"] == "(no goal)"
