"""Workloads: the generator, the trace schema and importer, the simulator, the real-engine replay
(tiny-random) and the CLI."""

from __future__ import annotations

import dataclasses
import importlib
import json
import time

import numpy as np
import pytest

from engine.survival import CostModel
from evals.survival import (
    METRIC_KEYS,
    TOKEN_KEYS,
    Calibration,
    ChatTokens,
    ReplayConfig,
    SessionSpec,
    SimConfig,
    Trace,
    TraceHeader,
    Turn,
    WorkloadError,
    calibrate,
    generate_trace,
    import_recorded,
    load_trace,
    parse_trace,
    replay,
    save_trace,
    simulate,
)
from evals.survival.calibrate import nonneg_fit
from evals.survival.calibration import load_calibration
from evals.survival.cli import main
from evals.survival.text import vocabulary
from search_spaces.errors import UnknownPolicyError
from search_spaces.survival import survival_seed_source

BPT_TINY = 768
CAL = Calibration.assumed("tiny-random", CostModel((0.01, 1e-4, 0.0), (0.005, 0.02), 1e10, BPT_TINY, "assumed: test"))


def small_trace(pool_tokens: int | None = 260, host_tokens: int | None = 0) -> Trace:
    """Three sessions of three turns, short enough for tiny-random in a few seconds."""
    sessions = []
    for k, gaps in enumerate([(0.05, 0.3), (0.2, 0.02), (0.5, 0.05)]):
        turns = (Turn(30, 3, "python", gaps[0], 0.1, False, 1.0), Turn(40, 3, "search", gaps[1], None, True, 0.5),
                 Turn(20, 2, None, 0.0, None, False, 0.3))
        sessions.append(SessionSpec(f"s{k}", f"p{k}", 0.05 * k, 11 + k, turns))
    return Trace(TraceHeader("test", 0, "generated", 16, pool_tokens, host_tokens, {}), tuple(sessions))


# ---------------------------------------------------------------- generator and schema

def test_generator_is_deterministic_and_follows_its_distributions(tmp_path):
    a, b = generate_trace("tool-heavy", 40, seed=3), generate_trace("tool-heavy", 40, seed=3)
    assert a == b and a != generate_trace("tool-heavy", 40, seed=4)
    turns = [t for s in a.sessions for t in s.turns]
    assert all(6 <= len(s.turns) <= 12 for s in a.sessions)
    assert all(t.tool is None for t in (s.turns[-1] for s in a.sessions))
    calls = [t for s in a.sessions for t in s.turns[:-1]]
    human = [t for t in calls if t.tool == "approval"]
    assert human and all(t.expected_gap_s is None for t in human)  # the harness cannot predict a human
    assert all(t.expected_gap_s == 0.4 for t in calls if t.tool in ("python", "shell"))
    assert all(t.side_effect == (t.tool == "crm_update") for t in calls)
    assert all(0.0 <= (t.relevance or 0) <= 1.0 for t in turns)
    arrivals = [s.arrival_s for s in a.sessions]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0
    scaled = generate_trace("tool-heavy", 40, seed=3, time_scale=0.1)
    assert scaled.sessions[5].turns[0].gap_s == pytest.approx(a.sessions[5].turns[0].gap_s * 0.1, abs=1e-3)
    path = save_trace(a, tmp_path / "t.jsonl")
    assert load_trace(path) == a
    tight = generate_trace("memory-tight", 40, seed=3)
    assert tight.header.pool_tokens < a.header.pool_tokens * 3 and all(3 <= len(s.turns) <= 6 for s in tight.sessions)


@pytest.mark.parametrize("kind, sessions, match", [
    ("tool-hevy", 3, "unknown workload kind 'tool-hevy'; valid kinds: tool-heavy, memory-tight"),
    ("tool-heavy", 0, "sessions must be an integer in"),
    ("tool-heavy", 2.5, "sessions must be an integer in"),
])
def test_generator_refuses_bad_options(kind, sessions, match):
    with pytest.raises(WorkloadError, match=match):
        generate_trace(kind, sessions)
    with pytest.raises(WorkloadError, match="time_scale"):
        generate_trace("tool-heavy", 2, time_scale=-1.0)


HEADER = json.dumps({"format": "akv-workload/1", "kind": "x"})
TURN = {"input_tokens": 5, "output_tokens": 2, "tool": "python", "gap_s": 1.0}
LAST = {"input_tokens": 5, "output_tokens": 2, "tool": None}


def sess(turns, **kw):
    return json.dumps({"session": "a", "arrival_s": 0.0, "turns": turns, **kw})


@pytest.mark.parametrize("lines, match", [
    ([], "empty trace"),
    ([HEADER], "no sessions"),
    ([json.dumps({"format": "v0"})], "t.jsonl:1.format: the first line must be a header"),
    ([HEADER, "{nope"], "t.jsonl:2: not JSON"),
    ([HEADER, sess([{**TURN, "gap_s": -2.0}, LAST])], r"t.jsonl:2.turns\[0\].gap_s: must be a finite number"),
    ([HEADER, sess([{**TURN, "gap_s": None}, LAST])], r"turns\[0\].gap_s: is required"),
    ([HEADER, sess([TURN])], r"turns\[0\].tool: the last turn ends the session"),
    ([HEADER, sess([{**TURN, "tool": None}, LAST])], r"turns\[0\].tool: every turn but the last calls a tool"),
    ([HEADER, sess([{**LAST, "input_tokens": 0}])], r"input_tokens: must be an integer >= 1"),
    ([HEADER, sess([{**LAST, "relevance": 2.0}])], r"relevance: must be a finite number in \[0, 1\]"),
    ([HEADER, sess([LAST], bonus=1)], "unknown field 'bonus'"),
    ([HEADER, sess([LAST]), sess([LAST])], "session id 'a' appears twice"),
])
def test_bad_traces_are_refused_with_line_and_field(lines, match):
    with pytest.raises(WorkloadError, match=match):
        parse_trace(lines, "t.jsonl")


def test_recorded_runs_import_into_traces():
    calls = [
        {"session": "b", "start_s": 105.0, "end_s": 106.0, "prompt_tokens": 300, "completion_tokens": 20, "tool": None},
        {"session": "a", "start_s": 100.0, "end_s": 101.0, "prompt_tokens": 500, "completion_tokens": 40,
         "tool": "search", "expected_gap_s": 2.0},
        {"session": "a", "start_s": 104.0, "end_s": 104.5, "prompt_tokens": 700, "completion_tokens": 30,
         "tool": "send", "tool_start_s": 104.5, "tool_end_s": 110.0, "side_effect": True},
        {"session": "a", "start_s": 111.0, "end_s": 112.0, "prompt_tokens": 900, "completion_tokens": 10, "tool": None},
    ]
    tr = import_recorded([json.dumps(c) for c in calls])
    a = next(s for s in tr.sessions if s.session == "a")
    assert [(t.input_tokens, t.output_tokens, t.tool, t.gap_s) for t in a.turns] == [
        (500, 40, "search", 3.0), (700 - 540, 30, "send", 5.5), (900 - 730, 10, None, 0.0)]
    assert a.turns[0].expected_gap_s == 2.0 and a.turns[1].side_effect and a.arrival_s == 0.0
    assert next(s for s in tr.sessions if s.session == "b").arrival_s == 5.0
    with pytest.raises(WorkloadError, match=r"recorded:1\.prompt_tokens: must be a finite number >= 0"):
        import_recorded([json.dumps({**calls[0], "prompt_tokens": -1})])
    with pytest.raises(WorkloadError, match=r"end_s 1\.0 is before start_s 2\.0"):
        import_recorded([json.dumps({**calls[0], "start_s": 2.0, "end_s": 1.0})])
    with pytest.raises(WorkloadError, match="unknown field 'cost'"):
        import_recorded([json.dumps({**calls[0], "cost": 3})])


# ---------------------------------------------------------------- simulator

def test_simulate_reports_the_metric_keys_and_programs_match_builtins():
    tr = generate_trace("memory-tight", 12, seed=1)
    config = SimConfig(calibration=CAL)
    results = {name: simulate(tr, name, config) for name in ("lru", "ttl", "min_waste", "next_ref")}
    for r in results.values():
        assert r["ok"] and all(r[k] is not None for k in METRIC_KEYS)
        assert r["peak_pool_bytes"] <= tr.header.pool_tokens * BPT_TINY
        assert r["jct_p95_s"] >= r["jct_mean_s"] * 0.5 and r["resume_ttft_p95_s"] >= r["resume_ttft_p50_s"]
    assert results["lru"]["recompute_tokens"] > 0  # the trace is tight enough to evict
    as_program = simulate(tr, {"source": survival_seed_source("min_waste"), "params": {}}, config)
    assert {k: as_program[k] for k in METRIC_KEYS} == {k: results["min_waste"][k] for k in METRIC_KEYS}
    again = simulate(tr, "lru", config)
    again.pop("policy_seconds")
    assert again == {k: v for k, v in results["lru"].items() if k != "policy_seconds"}  # deterministic


def test_simulate_records_failures_and_refuses_bad_specs():
    tr = small_trace()
    bad = simulate(tr, {"source": "def decide(request, params):\n    return 1 / 0\n\n\ndef space(trial):\n"
                                  "    return {}\n"}, SimConfig(calibration=CAL))
    assert bad["ok"] is False and "ZeroDivisionError" in bad["error"] and bad["jct_mean_s"] is None
    with pytest.raises(UnknownPolicyError, match="valid survival policies"):
        simulate(tr, "oracle", SimConfig(calibration=CAL))
    with pytest.raises(WorkloadError, match="pool_tokens must be an integer >= 0"):
        simulate(tr, "lru", SimConfig(calibration=CAL, pool_tokens=-5))


def test_simulator_scales_to_thousands_of_sessions():
    tr = generate_trace("tool-heavy", 1000, seed=2)
    t0 = time.perf_counter()
    r = simulate(tr, "next_ref", SimConfig(calibration=CAL, pool_tokens=100_000, max_batch=64))
    assert r["ok"] and r["sessions"] == 1000 and time.perf_counter() - t0 < 60


# ---------------------------------------------------------------- real engine (tiny-random)

def alternating_trace() -> Trace:
    """Two sessions whose turns strictly alternate (gaps far longer than tiny-random's turns), in a
    pool that holds one session: every resume finds its own tokens evicted by the other session."""
    sessions = tuple(SessionSpec(f"s{k}", f"p{k}", 1.5 * k, 21 + k, (
        Turn(40, 2, "python", 2.5, 2.5), Turn(30, 2, "python", 2.5, 2.5), Turn(20, 2, None)))
        for k in range(2))
    return Trace(TraceHeader("test", 0, "generated", 16, 150, 0, {}), sessions)


def test_wall_clock_replay_agrees_with_the_simulator_where_the_order_is_fixed(tiny):
    """On the wall clock the engine's order is the simulator's when events are far apart (the
    alternating trace): then the token metrics are equal, as on the model clock."""
    tr = alternating_trace()
    assert len(vocabulary(tiny.tokenizer)) == 2048
    cal = Calibration.assumed("tiny-random", CAL.cost, 0.0, ChatTokens.from_renderer(tiny.renderer,
                                                                                     vocabulary(tiny.tokenizer)))
    real = replay(tr, "lru", ReplayConfig(model="tiny-random", calibration=cal), engine=tiny)
    assert real["ok"] and real["clock"] == "wall" and all(real[k] is not None for k in METRIC_KEYS)
    assert real["turns"] == 6 and real["peak_pool_bytes"] <= 150 * BPT_TINY and real["recompute_tokens"] > 0
    sim = simulate(tr, "lru", SimConfig(calibration=cal))
    assert real["overlap_tokens"] == 0
    assert {k: sim[k] for k in TOKEN_KEYS} == {k: real[k] for k in TOKEN_KEYS}
    pinned = replay(small_trace(), "ttl", ReplayConfig(model="tiny-random", calibration=cal), engine=tiny)
    assert pinned["ok"] and pinned["actions"]["pin"] + pinned["actions"]["keep"] >= 6
    assert tiny.decoder.stop_ids and tiny.tree.eviction_order is None  # the shared engine is restored
    with pytest.raises(WorkloadError, match="KV bytes per token"):  # a model clock of another model
        replay(tr, "lru", ReplayConfig(calibration=Calibration.assumed("x", CostModel()), clock="model"), engine=tiny)


def test_calibration_measures_the_engine(tiny, monkeypatch):
    measure = importlib.import_module("evals.survival.calibrate")  # the package exports a function of that name
    monkeypatch.setattr(measure, "_load", lambda: 99.0)  # a machine busy with others' work
    cal = calibrate(tiny, quick=True, repeats=1, max_batch=2)
    assert any("load average 99.0" in w for w in cal.machine["warnings"])
    t = cal.timing
    assert all(c >= 0 for c in (*t.prefill, *t.decode, t.finish_s)) and t.swap_bytes_per_s > 0
    assert cal.cost.bytes_per_token == BPT_TINY and cal.model == "tiny-random" and cal.measured
    assert {"dtype", "device", "threads", "date", "load_before"} <= set(cal.machine)
    assert cal.machine["dtype"] == "float32" and cal.machine["device"] == "cpu"
    # tiny-random's per-token costs (a few us) lie inside the timing noise of its ~3 ms request overhead,
    # so a noisy fit may put every per-token term at 0: costs must not fall with size, need not rise
    assert t.t_start(512, 2048) >= t.t_start(32, 32) > 0 and t.t_step(2, 2, 600) >= t.t_step(1, 1, 300) > 0
    assert cal.chat == ChatTokens.from_renderer(tiny.renderer, vocabulary(tiny.tokenizer))
    assert len(cal.points["prefill"]) == 4 and {p["batch"] for p in cal.points["decode"]} == {1, 2}
    assert {p["forward"] for p in cal.points["decode"]} == {0, 1, 2}  # last steps apart
    assert Calibration.from_wire(json.loads(json.dumps(cal.wire()))) == cal
    assert tiny.decoder.stop_ids and tiny.tree.eviction_order is None  # the engine is restored


def test_the_fit_recovers_known_coefficients_and_stays_non_negative():
    rng = np.random.default_rng(0)
    x = np.column_stack([np.ones(12), rng.uniform(10, 500, 12), rng.uniform(1e3, 1e5, 12), rng.uniform(10, 3000, 12)])
    true = np.array([0.02, 4e-3, 1e-7, 2e-5])
    assert nonneg_fit(x, x @ true) == pytest.approx(list(true), rel=1e-6)
    assert nonneg_fit(x, x @ true, relative=False) == pytest.approx(list(true), rel=1e-6)
    # a term the data contradicts (negative in the unconstrained fit) is dropped, the rest refitted
    fitted = nonneg_fit(x[:, :2], x[:, :2] @ np.array([1.0, -1e-3]) + 0.5)
    assert min(fitted) >= 0 and fitted[1] == 0.0
    with pytest.raises(WorkloadError, match="at least as many points"):
        nonneg_fit(x[:2], np.ones(2))


def test_calibration_files_are_checked(tmp_path):
    path = CAL.save(tmp_path / "cal.json")
    assert load_calibration(path) == CAL
    with pytest.raises(WorkloadError, match="was made for model 'tiny-random', not 'gemma-3-270m'"):
        CAL.check_model("gemma-3-270m")
    CAL.check_model("gemma-3-270m", force=True)
    raw = json.loads(path.read_text())
    for edit, match in ((lambda r: r.pop("format"), "format None is not 'akv-calibration/2'"),
                        (lambda r: r["timing"].update(prefill=[1, 2]), r"timing.prefill must be a list of 4"),
                        (lambda r: r["timing"].update(decode=[0.1, -1, 0, 0, 0]),
                         r"timing.decode\[1\] must be a finite"),
                        (lambda r: r["chat"].update(words=[1, 2]), "2 word ids, 2048 needed")):
        bad = json.loads(json.dumps(raw))
        edit(bad)
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(WorkloadError, match=match):
            load_calibration(tmp_path / "bad.json")


def test_the_summary_line_reads_every_fit_including_a_zero_per_token_prefill():
    # a tiny model's fixed overhead can hide the per-token prefill time: the fit puts it at 0, and the
    # calibrate command's summary must say so rather than divide by it (a ZeroDivisionError in CI)
    zero = Calibration(CAL.model, CAL.cost, dataclasses.replace(CAL.timing, prefill=(0.004, 0.0, 0.0, 0.0)))
    assert "prefill per-token time below the fit's resolution" in zero.summary()
    assert "+4.0 ms a request" in zero.summary() and "worst fit error n/a" in zero.summary()
    t = dataclasses.replace(CAL.timing, prefill=(0.0, 1e-4, 0.0, 1e-4))  # 2e-4 s a token: 5,000 tok/s
    line = Calibration(CAL.model, CAL.cost, t, points={"max_rel_error": {"prefill": 0.05, "decode": 0.12}}).summary()
    assert "prefill 5000 tok/s" in line and "worst fit error 12%" in line


# ---------------------------------------------------------------- CLI

def test_cli_generate_simulate_replay(tmp_path, capsys, tiny, monkeypatch):
    trace = tmp_path / "t.jsonl"
    assert main(["workload", "generate", "--kind", "memory-tight", "--sessions", "5", "--out", str(trace)]) == 0
    (tmp_path / "a-dir").mkdir()  # --out a directory: one line, and no temporary file left beside it
    assert main(["workload", "generate", "--kind", "memory-tight", "--sessions", "2", "--out",
                 str(tmp_path / "a-dir")]) == 2
    assert "is a directory, not a file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-dir", "t.jsonl"]
    cal = tmp_path / "cal.json"
    CAL.save(cal)
    out = tmp_path / "r.json"
    assert main(["workload", "simulate", str(trace), "--survival", "ttl", "--out", str(out),
                 "--calibration", str(cal), "--model", "tiny-random"]) == 0
    r = json.loads(out.read_text())
    assert r["mode"] == "simulate" and set(METRIC_KEYS) <= set(r)
    capsys.readouterr()
    assert main(["workload", "simulate", str(trace), "--survival", "ttl", "--out", str(out),
                 "--calibration", str(cal)]) == 2  # made for tiny-random, not the default gemma-3-270m
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "was made for model 'tiny-random', not 'gemma-3-270m'" in err and "--force" in err
    assert main(["workload", "simulate", str(trace), "--survival", "ttl", "--out", str(out),
                 "--calibration", str(cal), "--force"]) == 0
    save_trace(small_trace(), trace)
    assert main(["workload", "replay", str(trace), "--survival", "min_waste", "--params", '{"recheck_s": 0.1}',
                 "--model", "tiny-random", "--out", str(out), "--calibration", str(cal)]) == 0
    r = json.loads(out.read_text())
    assert r["mode"] == "replay" and r["model"] == "tiny-random" and set(METRIC_KEYS) <= set(r)
    measured = tmp_path / "measured.json"
    assert main(["workload", "calibrate", "--model", "tiny-random", "--out", str(measured), "--quick",
                 "--repeats", "1", "--max-batch", "2", "--force"]) == 0
    assert load_calibration(measured).model == "tiny-random" and "wrote" in capsys.readouterr().out
    measure = importlib.import_module("evals.survival.calibrate")
    busy = Calibration.assumed("tiny-random", CAL.cost)
    busy = Calibration(busy.model, busy.cost, busy.timing, busy.chat, {"warnings": ["load average 9 on 2 CPUs"]})
    monkeypatch.setattr(measure, "calibrate", lambda *a, **k: busy)
    assert main(["workload", "calibrate", "--model", "tiny-random", "--out", str(tmp_path / "busy.json")]) == 2
    err = capsys.readouterr().err
    assert "looks busy (load average 9 on 2 CPUs)" in err and err.count("\n") == 1
    assert not (tmp_path / "busy.json").exists()
    assert main(["workload", "simulate", str(trace), "--survival", "belady", "--out", str(out)]) == 2
    assert "valid survival policies" in capsys.readouterr().err
    assert main(["workload", "simulate", str(tmp_path / "none.jsonl"), "--survival", "lru", "--out", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"PNG?\n\xb2\xff")  # not a trace, not even text: a bad byte on line 2
    for args, message in (([binary, "--survival", "lru"], f"trace '{binary}': line 2: not UTF-8 text"),
                          ([tmp_path, "--survival", "lru"], f"trace '{tmp_path}' is a directory, not a file"),
                          ([trace, "--program", binary], f"survival program '{binary}': line 2: not UTF-8 text"),
                          ([trace, "--survival", "lru", "--calibration", tmp_path],
                           f"calibration '{tmp_path}' is a directory, not a file")):
        assert main(["workload", "simulate", *map(str, args), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    assert main(["workload", "simulate", str(trace), "--survival", "lru", "--params", '{"k": 1}',
                 "--out", str(out)]) == 2
    assert "lru: unknown parameter 'k'; lru takes no parameters" in capsys.readouterr().err
    assert main(["workload", "simulate", str(trace), "--survival", "lru", "--params", "[1]", "--out", str(out)]) == 2


def test_a_template_with_per_role_footers_is_refused_by_the_token_model(tiny):
    """ChatML closes tool turns with their own footer: one line naming the template, not a miscount."""
    from engine.layout import Renderer

    with pytest.raises(WorkloadError, match="template 'chatml'"):
        ChatTokens.from_renderer(Renderer(tiny.tokenizer, "chatml"), vocabulary(tiny.tokenizer))
