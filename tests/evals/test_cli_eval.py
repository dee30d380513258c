"""``akv eval`` as a new user runs it: hand-written task files, program files, exported modules,
run directories, the scoring choices, and the ``drop_evidence`` diagnostic's cost.

The command-line tests run ``akv`` on the tiny random model: the first as ``python -m rsi.cli``
in a subprocess, the others through ``rsi.cli.main`` (the console script's entry point) in this
process, which spares each a fresh interpreter's imports and model load. The
task files are written here by hand in the form docs/tasks.md documents (only ``id``,
``messages`` and ``probes``), one of them in plain OpenAI message form.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evals.cache.cli import read_program_file
from evals.cache.evaluator import EvalConfig, PolicySpec, Replay
from evals.cache.probes import ProbeFormat, probe_prompt, verbatim_lead_in
from evals.tasks import Task
from search_spaces import PolicyError, export_policy, get_policy, seed_source

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = "Order 41243 ships from the Kestrel warehouse.\nOrder 13699 ships from the Oriole warehouse."


def _call(i: int, name: str) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": "{\"limit\": 5}"}}


PROBE: dict[str, Any] = {"after_message": 3, "question": "Which warehouse does order 41243 ship from?",
                         "cloze_prefix": "The order in question leaves from", "answer": "Kestrel",
                         "candidates": ["Kestrel", "Oriole", "Petrel"], "evidence_ids": [3]}

# The documented minimal form: id, messages, probes (no split, family, generator...).
DOCUMENTED = {
    "id": "hand/1",
    "messages": [
        {"role": "system", "content": "You are a dispatch assistant. Tools: sql_query, tail_logs."},
        {"role": "user", "content": "Where does order 41243 ship from?"},
        {"role": "assistant", "content": "", "reasoning_content": "Query the orders.",
         "tool_calls": [_call(1, "sql_query")]},
        {"role": "tool", "tool_call_id": "call_1", "name": "sql_query", "content": EVIDENCE},
        {"role": "assistant", "content": "", "tool_calls": [_call(2, "tail_logs")]},
        {"role": "tool", "tool_call_id": "call_2", "name": "tail_logs", "content": "allocator: nothing new"},
        {"role": "assistant", "content": "Order 41243 ships from Kestrel."},
    ],
    "probes": [PROBE],
}

# Plain OpenAI chat form: null content beside tool_calls, content parts, a tool message without name.
OPENAI = {
    "id": "hand/2",
    "messages": [
        {"role": "system", "content": "You are a dispatch assistant."},
        {"role": "user", "content": [{"type": "text", "text": "Where does order 13699 ship from?"}]},
        {"role": "assistant", "content": None, "tool_calls": [_call(1, "sql_query")]},
        {"role": "tool", "tool_call_id": "call_1", "content": EVIDENCE},
        {"role": "assistant", "content": "It ships from Oriole."},
    ],
    "probes": [{"after_message": 3, "question": "Which warehouse does order 13699 ship from?", "answer": "Oriole",
                "candidates": ["Kestrel", "Oriole"], "evidence_ids": [3]}],
}

# A program that drops exactly the probe's evidence (message 3) at the probe (message 3), as a policy.
DROP_3 = ("DEFAULTS = {}\n\n\ndef decide(request, params):\n    plan = request.plan()\n"
          "    if len(request.messages) > 3:\n        plan.drop(3, [3])\n    return plan\n\n\n"
          "def space(trial):\n    return {}\n")


def write_tasks(path: Path, *records: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def akv_process(cwd: Path, *argv: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``python -m rsi.cli ARGV`` in ``cwd``, in a fresh interpreter."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "rsi.cli", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def akv(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``akv ARGV`` in ``cwd`` through ``rsi.cli.main`` in this process (its status and output)."""
    from rsi.cli import main

    out, err, before = io.StringIO(), io.StringIO(), Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(list(argv))
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess(["akv", *argv], status, out.getvalue(), err.getvalue())


def ok(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]


# ------------------------------------------------------------------ task files


def test_hand_written_file_is_evaluated_whole_without_generation(tmp_path):
    """Before: ``TaskError: ... has no split 'train'`` traceback (the default split was train), and
    every probe was also answered by greedy generation."""
    tasks = write_tasks(tmp_path / "my_tasks.jsonl", DOCUMENTED, OPENAI)
    proc = akv_process(tmp_path, "eval", "--suite", str(tasks), "--policy", "full", "--model", "tiny-random",
                       "--out", "r.json")
    ok(proc)
    out = json.loads((tmp_path / "r.json").read_text())
    assert out["split"] == "all" and out["scoring"] == "loglik" and out["config"]["generate"] is False
    assert sorted(t["task_id"] for t in out["tasks"]) == ["hand/1", "hand/2"]
    assert all(t["ok"] for t in out["tasks"]), [t["error"] for t in out["tasks"]]
    probes = [p for t in out["tasks"] for p in json.loads(t["probes"])]
    assert len(probes) == 2 and all(p["generated"] == "" for p in probes)
    assert out["exact_match"] is None and out["contains_match"] is None
    assert out["pass_rate"] == sum(p["mc_correct"] for p in probes) / 2


def test_split_accepts_the_splits_the_file_has(tmp_path):
    """Before: ``--split`` accepted only train / heldout (argparse refused ``mine``)."""
    tasks = write_tasks(tmp_path / "t.jsonl", {**DOCUMENTED, "split": "mine"}, OPENAI)
    proc = akv(tmp_path, "eval", "--suite", str(tasks), "--split", "mine", "--policy", "full", "--model",
               "tiny-random", "--out", "r.json", "--scoring", "loglik-norm", "--generate")
    ok(proc)
    out = json.loads((tmp_path / "r.json").read_text())
    assert out["split"] == "mine" and [t["task_id"] for t in out["tasks"]] == ["hand/1"]
    assert out["scoring"] == "loglik-norm" and out["policies"][0]["scoring"] == "loglik-norm"
    assert out["config"]["generate"] is True and out["exact_match"] is not None
    probe = json.loads(out["tasks"][0]["probes"])[0]
    assert out["pass_rate"] == float(probe["mc_norm_correct"])


def test_hand_written_probe_uses_its_own_cloze_prefix():
    """Before: a verbatim lead-in copied from the evidence was used whenever the evidence held the
    answer; the task's ``cloze_prefix`` only as a fallback."""
    task = Task.from_record(DOCUMENTED)
    probe = task.probes[0]
    assert probe_prompt(task, probe, ProbeFormat()).prefix == "The order in question leaves from"
    generated = Task.from_record({**DOCUMENTED, "generator": "evals.tasks.generator"})
    lead = verbatim_lead_in(generated, probe)
    assert lead == "Order 41243 ships from the "
    assert probe_prompt(generated, probe, ProbeFormat()).prefix == lead.rstrip()
    no_cloze = Task.from_record({**DOCUMENTED, "probes": [{**PROBE, "cloze_prefix": ""}]})
    assert probe_prompt(no_cloze, no_cloze.probes[0], ProbeFormat()).prefix == lead.rstrip()


# ------------------------------------------------------------------ scoring


def test_loglik_norm_passes_by_log_likelihood_per_character(eng):
    """``passed`` follows the candidate with the best log-likelihood per character of its
    continuation (computed here from the engine's raw scores), and ``loglik`` the best sum."""
    task = Task.from_record(DOCUMENTED)
    probe = task.probes[0]
    prompt = probe_prompt(task, probe, ProbeFormat())
    raw = eng.score(task.context(probe), list(prompt.continuations), None, prefix=prompt.prefix)
    per_char = [lp / len(c) for lp, c in zip(raw.logprobs, prompt.continuations)]
    norm_pick = probe.candidates[per_char.index(max(per_char))]
    sum_pick = probe.candidates[raw.logprobs.index(max(raw.logprobs))]
    for scoring, pick in (("loglik-norm", norm_pick), ("loglik", sum_pick)):
        result = Replay(eng, EvalConfig(scoring=scoring, generate=False)).evaluate(PolicySpec("full"), task)
        assert result.ok, result.error
        assert result.probes[0].passed == (pick == probe.answer)
        assert result.probes[0].generated == ""


def test_probe_without_candidates_is_scored_by_generation(eng):
    """Candidates may be empty (docs/tasks.md). Before: every such task failed, even under
    ``scoring="generate"`` (the engine refuses to score no candidates); now generation judges it,
    and the log-likelihood scorings fail it with a reason that says what to do."""
    task = Task.from_record({**DOCUMENTED, "probes": [{**PROBE, "candidates": []}]})
    result = Replay(eng, EvalConfig(scoring="generate")).evaluate(PolicySpec("full"), task)
    assert result.ok, result.error
    assert result.probes[0].passed == result.probes[0].exact and result.probes[0].choice == ""
    failed = Replay(eng, EvalConfig(generate=False)).evaluate(PolicySpec("full"), task)
    assert not failed.ok and "without candidates" in (failed.error or "")


def test_search_eval_config_is_unchanged():
    """The search keys stored evaluations by this digest: the defaults must not move."""
    config = EvalConfig(rates="gpt-oss-120b", scoring="loglik", probe=ProbeFormat(lead_in="verbatim"), generate=False)
    assert config.as_dict() == {"rates": "gpt-oss-120b", "scoring": "loglik", "probe": ProbeFormat().as_dict(),
                                "pool_bytes": None, "generate": False}
    assert EvalConfig().generate is True


# ------------------------------------------------------------------ drop_evidence


def test_drop_evidence_reports_what_its_schedule_costs(eng):
    """Before: ``drop_evidence`` was accounted as the full cache (same tokens and cost as ``full``).
    Reference: a policy program that drops exactly the evidence at the probe, through the policy path."""
    task = Task.from_record(DOCUMENTED)
    replay = Replay(eng, EvalConfig(generate=False))
    diag = replay.evaluate(PolicySpec("drop_evidence"), task)
    full = replay.evaluate(PolicySpec("full"), task)
    same = replay.evaluate(PolicySpec("program", {}, source=DROP_3, label="drop-3"), task)
    assert diag.ok and full.ok and same.ok, (diag.error, full.error, same.error)
    assert [r.usage for r in diag.requests] == [r.usage for r in same.requests]
    assert math.isclose(diag.cost.total, same.cost.total)
    assert sum(r.usage["drop_skipped_tokens"] for r in diag.requests) > 0
    assert sum(r.usage["drop_skipped_tokens"] for r in full.requests) == 0
    assert diag.probes[0].evidence_dropped == (3,)


# ------------------------------------------------------------------ programs and runs


def test_program_file_and_exported_module_run_in_the_sandbox(tmp_path, eng):
    """Before: no way to evaluate a program or an exported module (``--params source=...`` failed).
    The exported module is read, not imported: a statement appended to it must never run."""
    tasks = write_tasks(tmp_path / "t.jsonl", DOCUMENTED)
    (tmp_path / "seed.py").write_text(seed_source("rolling_drop"))
    module = export_policy(get_policy("rolling_drop", keep_tool_responses=0), tmp_path / "exported.py")
    marker = tmp_path / "imported.txt"
    module.write_text(module.read_text() + f"\nopen({str(marker)!r}, 'w').write('ran')\n")
    reference = Replay(eng, EvalConfig(generate=False)).evaluate(
        PolicySpec("rolling_drop", {"keep_tool_responses": 0}), Task.from_record(DOCUMENTED))
    for argv, label in ((["--program", "seed.py", "--params", "keep_tool_responses=0"], "program:seed.py"),
                        (["--program", "exported.py"], "program:exported.py")):
        proc = akv(tmp_path, "eval", "--suite", str(tasks), *argv, "--model", "tiny-random", "--out", "r.json",
                   "--force")
        ok(proc)
        out = json.loads((tmp_path / "r.json").read_text())
        row = out["tasks"][0]
        assert out["policy"] == label and row["ok"], row["error"]
        assert json.loads(row["params"])["keep_tool_responses"] == 0
        assert math.isclose(row["cost_cents"], reference.cost_cents)
        assert row["drop_skipped_tokens"] == sum(r.usage["drop_skipped_tokens"] for r in reference.requests) > 0
    assert not marker.exists()


def test_read_program_file_refuses_edited_and_hostile_files(tmp_path):
    exported = export_policy(get_policy("rolling_drop", keep_tool_responses=2), tmp_path / "p.py")
    program = read_program_file(exported)
    assert program.exported and program.params["keep_tool_responses"] == 2
    assert program.source == seed_source("rolling_drop")
    text = exported.read_text()
    assert text.count("Seed program ``rolling_drop``") == 1  # in PROGRAM_SOURCE only
    edited = tmp_path / "edited.py"
    edited.write_text(text.replace("Seed program ``rolling_drop``", "Seed program ``rolling_drop`` (edited)"))
    with pytest.raises(PolicyError, match="PROGRAM_SHA256"):
        read_program_file(edited)
    computed = tmp_path / "computed.py"
    computed.write_text("PROGRAM_SOURCE = open('/etc/passwd').read()\nPARAMS = {}\n")
    with pytest.raises(PolicyError, match="not a literal"):
        read_program_file(computed)
    hostile = tmp_path / "hostile.py"
    hostile.write_text("import os\n\n\ndef decide(request, params):\n    os.system('true')\n")
    with pytest.raises(PolicyError, match="refused"):
        read_program_file(hostile)
    (tmp_path / "bad.py").write_text("def decide(:\n")
    with pytest.raises(PolicyError, match="refused"):
        read_program_file(tmp_path / "bad.py")


def test_bfloat16_weights_count_the_same_cost(tmp_path, eng, monkeypatch):
    """``--dtype bfloat16``: the model runs in bfloat16 and the results say so; what a policy costs
    counts tokens, so it equals the float32 replay's cost (its passes may differ: the format is inexact)."""
    tasks = write_tasks(tmp_path / "t.jsonl", DOCUMENTED)
    ok(akv(tmp_path, "eval", "--suite", str(tasks), "--policy", "rolling_drop", "--params", "keep_tool_responses=0",
           "--model", "tiny-random", "--dtype", "bfloat16", "--out", "r.json"))
    out = json.loads((tmp_path / "r.json").read_text())
    reference = Replay(eng, EvalConfig(generate=False)).evaluate(
        PolicySpec("rolling_drop", {"keep_tool_responses": 0}), Task.from_record(DOCUMENTED))
    assert out["dtype"] == "bfloat16" and out["tasks"][0]["ok"]
    assert math.isclose(out["tasks"][0]["cost_cents"], reference.cost_cents)
    # and the engine it evaluates with is loaded in that dtype
    import torch

    from engine.engine import Engine
    from evals.cache.cli import run_eval
    from rsi.cli import build_parser

    loaded: list[torch.dtype] = []
    real = Engine.from_pretrained.__func__  # type: ignore[attr-defined]

    def spy(cls, *a, **kw):
        engine = real(cls, *a, **kw)
        loaded.append(engine.model.dtype)
        return engine

    monkeypatch.setattr(Engine, "from_pretrained", classmethod(spy))
    args = build_parser().parse_args(["eval", "--suite", str(tasks), "--policy", "full", "--model", "tiny-random",
                                      "--dtype", "bfloat16", "--out", str(tmp_path / "r2.json")])
    assert run_eval(args, {}) == 0 and loaded == [torch.bfloat16]


def test_eval_a_pick_of_a_run(tmp_path, eng):
    """``--run RUN_DIR --pick best`` evaluates the archived program with its tuned parameters."""
    from tests.rsi.test_cli_errors import fake_run

    run = fake_run(tmp_path / "run")
    tasks = write_tasks(tmp_path / "t.jsonl", DOCUMENTED)
    ok(proc := akv(tmp_path, "eval", "--suite", str(tasks), "--run", str(run), "--model", "tiny-random",
                   "--out", "r.json"))
    out = json.loads((tmp_path / "r.json").read_text())
    assert out["policy"] == "g1-p1" and out["tasks"][0]["ok"], proc.stdout
    reference = Replay(eng, EvalConfig(generate=False)).evaluate(
        PolicySpec("rolling_drop", {"keep_tool_responses": 0}), Task.from_record(DOCUMENTED))
    assert math.isclose(out["tasks"][0]["cost_cents"], reference.cost_cents)
    # a run searched under the frame guard is evaluated under it, as its export would drop
    (run / "config.json").write_text(json.dumps({"eval": {"frame_guard": True}}))
    ok(proc := akv(tmp_path, "eval", "--suite", str(tasks), "--run", str(run), "--model", "tiny-random",
                   "--out", "r.json", "--force"))
    out = json.loads((tmp_path / "r.json").read_text())
    assert "searched under the frame guard" in proc.stdout and out["config"]["frame_guard"] is True
    from evals.cache.oracle import schedule_spec

    guarded = Replay(eng, EvalConfig(generate=False)).evaluate(schedule_spec({"drop_message": {"4": [3]}}),
                                                              Task.from_record(DOCUMENTED))
    assert math.isclose(out["tasks"][0]["cost_cents"], guarded.cost_cents)
    assert guarded.cost_cents > reference.cost_cents


# ------------------------------------------------------------------ --compare


@pytest.mark.parametrize("text, expected", [
    ("full,rolling_drop", ["full", "rolling_drop"]),
    ("full, rolling_drop:keep_tool_responses=4,target=tool, standard:window=512",
     ["full", "rolling_drop:keep_tool_responses=4,target=tool", "standard:window=512"]),
    ("rolling_drop:keep_tool_responses=4;scored_drop:budget_tokens=9,targets=any",
     ["rolling_drop:keep_tool_responses=4", "scored_drop:budget_tokens=9,targets=any"]),
    (",,full,,", ["full"]),
])
def test_compare_keeps_each_policys_parameters_together(text, expected):
    from evals.cache.cli import split_compare

    assert split_compare(text) == expected


@pytest.mark.parametrize("text", ["keep_tool_responses=4,full", "full,k=4", " , ", ";;"])
def test_compare_refuses_parameters_without_a_policy_in_one_line(text):
    from engine.errors import AKVError
    from evals.cache.cli import split_compare

    with pytest.raises(AKVError) as err:
        split_compare(text)
    assert "\n" not in str(err.value) and "--compare" in str(err.value)


def test_compare_pairs_each_policy_with_the_first_over_tasks(tmp_path):
    """The paired row of ``--compare`` is the ratio of summed task costs and the difference of pass
    rates, recomputed here from the per-task rows of the same output."""
    tasks = write_tasks(tmp_path / "t.jsonl", DOCUMENTED, OPENAI)
    proc = akv(tmp_path, "eval", "--suite", str(tasks), "--compare",
               "full,rolling_drop:keep_tool_responses=0,target=tool", "--model", "tiny-random", "--out", "r.json")
    ok(proc)
    out = json.loads((tmp_path / "r.json").read_text())
    [row] = out["paired"]
    assert (row["policy"], row["versus"], row["tasks"]) == (
        "rolling_drop(keep_tool_responses=0,target=tool)", "full", 2)
    by = {p: [t for t in out["tasks"] if t["policy"] == p] for p in (row["policy"], "full")}
    cost = {p: sum(t["cost_cents"] for t in rs) for p, rs in by.items()}
    rate = {p: sum(t["n_passed"] for t in rs) / sum(t["n_probes"] for t in rs) for p, rs in by.items()}
    assert row["cost_delta_pct"] == pytest.approx(100 * (cost[row["policy"]] / cost["full"] - 1), abs=1e-9)
    assert row["pass_delta"] == pytest.approx(rate[row["policy"]] - rate["full"], abs=1e-9)
    assert row["cost_delta_pct"] < 0  # K=0 drops the tool responses: fewer cached tokens read
    assert not row["significant"]  # 2 tasks: never significant
    assert "paired over tasks against full" in proc.stdout


def test_frame_guard_lets_the_agent_read_before_a_drop(tmp_path, eng):
    """``--frame-guard``: rolling drop K=0 drops each tool output as it arrives; guarded, output 3 leaves
    only after assistant 4 has read it (so the probe after message 3 still sees its evidence), and
    output 5, which no assistant turn reads, never leaves: the cost of exactly that hand-made schedule."""
    from evals.cache.oracle import schedule_spec

    tasks = write_tasks(tmp_path / "t.jsonl", DOCUMENTED)
    rows = {}
    for guard in ([], ["--frame-guard"]):
        proc = akv(tmp_path, "eval", "--suite", str(tasks), "--policy", "rolling_drop", "--params",
                   "keep_tool_responses=0", "--model", "tiny-random", "--out", "r.json", "--force", *guard)
        ok(proc)
        out = json.loads((tmp_path / "r.json").read_text())
        assert out["config"].get("frame_guard", False) is bool(guard)
        rows[bool(guard)] = out["tasks"][0]
    reference = Replay(eng, EvalConfig(generate=False)).evaluate(schedule_spec({"drop_message": {"4": [3]}}),
                                                                Task.from_record(DOCUMENTED))
    assert math.isclose(rows[True]["cost_cents"], reference.cost_cents)
    assert rows[True]["cost_cents"] > rows[False]["cost_cents"]
    plain, guarded = (json.loads(rows[g]["probes"])[0] for g in (False, True))
    assert plain["evidence_dropped"] == [3] and guarded["evidence_dropped"] == []
    # a module exported with the guard is evaluated under it, and says so
    export_policy(get_policy("rolling_drop", keep_tool_responses=0), tmp_path / "guarded.py", frame_guard=True)
    proc = akv(tmp_path, "eval", "--suite", str(tasks), "--program", "guarded.py", "--model", "tiny-random",
               "--out", "r.json", "--force")
    ok(proc)
    out = json.loads((tmp_path / "r.json").read_text())
    assert "exported with the frame guard" in proc.stdout and out["config"]["frame_guard"] is True
    assert math.isclose(out["tasks"][0]["cost_cents"], reference.cost_cents)


@pytest.mark.parametrize(("argv", "template"), [
    (["eval", "--model", "qwen2.5-coder-1.5b"], "chatml"),  # the model's own
    (["eval", "--model", "Qwen/Qwen2.5-Coder-1.5B-Instruct"], "chatml"),  # an alias
    (["eval", "--model", "gemma-3-270m"], "plain"),  # the first model keeps each command's default
    (["serve", "--model", "gemma-3-270m"], "gemma"),
    (["live", "--endpoint", "http://x", "--model", "qwen2.5-coder-1.5b"], "chatml"),
    (["eval", "--model", "qwen2.5-coder-1.5b", "--template", "plain"], "plain"),  # given: kept
])
def test_each_command_takes_the_model_s_own_template_when_none_is_given(argv, template):
    from rsi.cli import _resolve_template, build_parser

    args = build_parser().parse_args(argv)
    _resolve_template(args)
    assert args.template == template


def test_an_unknown_template_is_refused_before_any_work(tmp_path, capsys):
    """One line naming the value and the valid ones; no task file is read (it does not exist)."""
    from rsi.cli import main

    code = main(["eval", "--template", "chatml2", "--suite", str(tmp_path / "missing.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "unknown chat template 'chatml2'" in err and "chatml, gemma, plain" in err
    assert "missing.jsonl" not in err


def test_the_probe_format_is_the_model_s_calibrated_one():
    from evals.cache.probes import MODEL_PROBE_FORMATS, probe_format_for

    assert probe_format_for("gemma-3-270m") == ProbeFormat() == probe_format_for("/some/checkpoint")
    assert probe_format_for("Qwen/Qwen2.5-Coder-1.5B-Instruct") == MODEL_PROBE_FORMATS.get(
        "qwen2.5-coder-1.5b", ProbeFormat())


def test_weights_gguf_for_a_model_without_a_gguf_is_refused_by_name(tmp_path):
    """``--weights gguf`` needs a named model with a GGUF: a tiny random one is refused, naming the value."""
    from engine.errors import ModelLoadError
    from evals.cache.cli import run_eval
    from rsi.cli import build_parser

    tasks = write_tasks(tmp_path / "t.jsonl", DOCUMENTED)
    args = build_parser().parse_args(["eval", "--suite", str(tasks), "--policy", "full", "--model", "tiny-random",
                                      "--dtype", "bfloat16", "--weights", "gguf", "--out", str(tmp_path / "r.json")])
    with pytest.raises(ModelLoadError, match="--weights gguf: model 'tiny-random' has no GGUF"):
        run_eval(args, {})
