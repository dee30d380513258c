"""The command line a newcomer meets: ``akv --version``, ``akv list``, ``akv eval --run`` taking the
run's settings, ``--pick headline``, help that shows defaults, and outputs never overwritten silently."""

from __future__ import annotations

import json
import math
from pathlib import Path

import optuna
import pytest

from rsi.cli import main
from search_spaces.cache.registry import FAMILIES, family_parameters, get_family, get_policy


def test_version_and_help_show_what_a_newcomer_needs(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("akv ")
    with pytest.raises(SystemExit):
        main(["live", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--max-steps MAX_STEPS default: 8" in text and "--rates RATES default: gpt-oss-120b" in text


def _inside(value, searched: str) -> bool:
    if searched.startswith("one of "):
        return str(value) in searched[len("one of "):].split(", ")
    lo, hi = searched.split()[1].split("..")
    return float(lo) <= float(value) <= float(hi)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_list_policies_gives_each_parameter_its_default_and_the_range_optuna_draws(name, capsys):
    """Reference: the family's own defaults (``get_policy(name).params``), and 40 draws of its space
    by a real Optuna study (every drawn value of a listed parameter lies in the listed range)."""
    listed = family_parameters(name)
    assert {k: v for k, v, _ in listed if k in get_policy(name).params} == dict(get_policy(name).params)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    ranges = {k: r for k, _, r in listed if not r.startswith("not searched")}
    for _ in range(40):
        drawn = get_family(name).space(study.ask())
        for k, v in drawn.items():
            if k in ranges:
                assert _inside(v, ranges[k]), (k, v, ranges[k])
    assert main(["list", "policies"]) == 0
    out = capsys.readouterr().out
    assert f"{name} (" in out
    for k, v, r in listed:
        assert f"    {k} = {v!r}    searched: {r}" in out


def test_list_suites_models_and_a_runs_candidates(finished, capsys):
    assert main(["list", "suites"]) == 0
    out = capsys.readouterr().out
    assert all(f"{s} (v" in out for s in ("default", "smoke", "horizon", "mixed"))
    assert main(["list", "models"]) == 0
    out = capsys.readouterr().out
    assert "gemma-3-270m:" in out and "qwen2.5-coder-1.5b:" in out and "tiny-random" in out
    assert main(["list", "candidates", str(finished)]) == 0
    out = capsys.readouterr().out
    chosen = json.loads((finished / "headline.json").read_text())["comparisons"][0]["policy_id"]
    marked = [ln for ln in out.splitlines() if ln.endswith("<- headline choice")]
    assert marked and all(ln.startswith(chosen) for ln in marked)
    assert main(["list", "candidates"]) == 2 and "needs a RUN_DIR" in capsys.readouterr().err


def test_eval_of_a_run_takes_its_settings_and_reproduces_its_held_out_result(finished, tmp_path, capsys,
                                                                            monkeypatch):
    """``akv eval --run RUN`` with no other option scores the headline's choice on the run's own
    held-out tasks with its model, template and scoring: the cost and passed probes equal what the
    search stored for that candidate (reference: ``evaluations.jsonl``)."""
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--run", str(finished)]) == 0
    said = capsys.readouterr().out
    config = json.loads((finished / "config.json").read_text())
    assert f"suite {config['data']['suite']}" in said and "split heldout" in said and "model tiny-random" in said
    out = json.loads((tmp_path / "eval-results.json").read_text())
    assert out["suite"] == config["data"]["suite"] and out["split"] == "heldout" and out["template"] == "plain"
    stored = [json.loads(ln)["row"] for ln in (finished / "evaluations.jsonl").read_text().splitlines()]
    stored = {(r["task_id"], r["policy"]): r for r in stored if r["split"] == "heldout"}
    assert out["tasks"] and len(out["tasks"]) == config["data"]["heldout_tasks"]
    for row in out["tasks"]:
        ref = stored[(row["task_id"], row["policy"])]
        assert math.isclose(row["cost_cents"], ref["cost_cents"], rel_tol=1e-9)
        assert row["n_passed"] == ref["n_passed"]
    # the same output again is refused (nothing rewritten); --force overwrites; an option given wins
    before = (tmp_path / "eval-results.json").stat().st_mtime_ns
    assert main(["eval", "--run", str(finished)]) == 2
    assert "eval-results.json exists" in capsys.readouterr().err
    assert (tmp_path / "eval-results.json").stat().st_mtime_ns == before
    assert main(["eval", "--run", str(finished), "--split", "train", "--limit", "1", "--force"]) == 0
    assert json.loads((tmp_path / "eval-results.json").read_text())["split"] == "train"


def test_pick_headline_is_the_headline_choice_and_best_may_differ(finished, monkeypatch):
    from rsi.cache.export import headline_choice, pick_spec
    from rsi.cache.headline import read_headline

    rows = read_headline(finished)
    assert rows and headline_choice(finished) == rows[0].policy_id
    assert pick_spec(finished, "headline") == pick_spec(finished, rows[0].policy_id)


def test_a_run_without_a_headline_picks_best_and_says_so(tmp_path, capsys):
    from rsi.cache.export import headline_choice
    from tests.rsi.test_cli_errors import fake_run

    run = fake_run(tmp_path / "run")
    assert headline_choice(Path(run)) == "best"
    assert "no headline.json yet" in capsys.readouterr().out


def test_export_takes_the_headline_pick(finished, tmp_path):
    from rsi.cache.export import headline_choice, load_archive, pick

    assert main(["export", str(finished), "--pick", "headline", "--out", str(tmp_path / "p.py")]) == 0
    chosen = pick(load_archive(finished), headline_choice(finished))
    assert f"program {chosen.program[:12]}" in (tmp_path / "p.py").read_text()


def test_live_plays_a_runs_candidate_and_its_frame_guard(finished, tiny_plain, tmp_path, capsys, monkeypatch):
    """``akv live --run RUN`` plays the headline's choice against a real server (its label names the
    candidate), guarded when the run was searched under the frame guard; ``--pick`` needs ``--run``."""
    import rsi.cache.export
    from engine.server import ServerThread, create_app
    from rsi.cache.export import headline_choice, pick_spec
    from tests.engine.test_engine import fresh

    chosen = pick_spec(finished, headline_choice(finished)).display
    with ServerThread(create_app(fresh(tiny_plain), snapshot_dir=tmp_path / "snaps")) as srv:
        base = ["live", "--endpoint", srv.base_url, "--model", "tiny-random", "--template", "plain", "--suite",
                "smoke", "--limit", "1", "--max-steps", "2", "--max-tokens", "4"]
        assert main([*base, "--run", str(finished), "--run-dir", str(tmp_path / "plain")]) == 0
        said = capsys.readouterr().out
        assert f"playing {chosen} of" in said and "frame guard" not in said.split("\n")[0]
        label = json.loads((tmp_path / "plain" / "live.json").read_text())["policy"]
        assert label == chosen.replace(":", "-")
        monkeypatch.setattr(rsi.cache.export, "run_frame_guard", lambda run: True)
        assert main([*base, "--run", str(finished), "--run-dir", str(tmp_path / "guarded")]) == 0
        assert "under its frame guard" in capsys.readouterr().out
        assert json.loads((tmp_path / "guarded" / "live.json").read_text())["policy"].endswith("-guarded")
    assert main([*base, "--pick", "best"]) == 2 and "--pick goes with --run" in capsys.readouterr().err
    assert main([*base, "--run", str(finished), "--params", "k=1"]) == 2
