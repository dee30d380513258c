"""The search loop end to end on the tiny model: archive, front, MLflow, report, determinism (a search
killed and resumed: tests/rsi/test_ray_executor.py)."""

from __future__ import annotations

import json
from pathlib import Path

from rsi.cache.archive import Archive
from rsi.cache.search import Search
from tests.rsi.conftest import TINY, tiny_config


def _summary(run_dir: Path) -> list[tuple]:
    a = Archive.load(run_dir / "archive.json")
    return [(c.id, c.label, c.status.value, json.dumps(c.params, sort_keys=True),
             c.train.to_dict() if c.train else None, c.heldout.to_dict() if c.heldout else None)
            for c in a.candidates]


def test_search_writes_archive_front_and_pareto(finished):
    archive = Archive.load(finished / "archive.json")
    labels = [c.label for c in archive.candidates]
    assert "expert:full" in labels and "seed:rolling_drop" in labels
    assert any(c.generation == 1 for c in archive.candidates), "generation 1 proposed nothing"
    pareto = json.loads((finished / "pareto.json").read_text())
    assert any(row["expert"] for row in pareto) and any(not row["expert"] for row in pareto)
    for row in pareto:
        assert {"program", "params", "train", "heldout", "expert"} <= set(row)
        assert {"pass_rate", "cost_cents_mean"} <= set(row["train"])
    front_rows = [r for r in pareto if not r["expert"]]
    assert all(r["heldout"] is not None for r in front_rows[:1])
    assert [h["generation"] for h in archive.hv_history] == [0, 1]
    assert (finished / "evaluations.jsonl").stat().st_size > 0


def test_mlflow_holds_a_parent_and_child_runs(finished):
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{finished / 'mlflow.db'}")
    exp = mlflow.get_experiment_by_name(TINY["name"])
    assert exp is not None
    runs = mlflow.search_runs(experiment_ids=[exp.experiment_id])
    parents = runs[runs["tags.akv.kind"] == "search"]
    children = runs[runs["tags.akv.kind"].isin(["candidate", "expert"])]
    assert len(parents) == 1 and parents.iloc[0]["status"] == "FINISHED"
    assert len(children) >= 3
    assert (children["tags.mlflow.parentRunId"] == parents.iloc[0]["run_id"]).all()
    scored = children[children["tags.akv.status"] == "ok"]
    assert scored["metrics.train_pass_rate"].notna().all() and scored["metrics.train_cost_cents_mean"].notna().all()
    assert "metrics.hypervolume" in parents.columns
    client = mlflow.tracking.MlflowClient()
    cand = scored[scored["tags.akv.kind"] == "candidate"].iloc[0]
    names = {a.path for a in client.list_artifacts(cand["run_id"])}
    assert {"program.py", "task_results.parquet"} <= names


def test_report_has_the_expected_series(finished):
    html = (finished / "report.html").read_text()
    for needle in ("Headline", "cost vs pass rate", "expert:full", "Hypervolume per generation", "lineage",
                   "Per-family pass rates", "data:image/png;base64,"):
        assert needle.lower() in html.lower(), needle
    for fig in ("pareto_train", "pareto_heldout", "hypervolume", "lineage", "families"):
        assert (finished / "figures" / f"{fig}.png").stat().st_size > 1000


def test_same_config_same_archive(finished, tmp_path, tiny_plain):
    again = tmp_path / "again"
    Search(tiny_config(), again, engine=tiny_plain).run()
    assert _summary(again) == _summary(finished)


def _count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_token_counts_come_from_the_engine_that_evaluates(tmp_path, tiny_plain):
    """The proposer's smoke episodes count tokens as the evaluating engine does (here tiny-random
    under the ``plain`` template), not with a fixed model's tokenizer; the counts differ."""
    from evals.tasks import load_suite
    from rsi.cache.search import Search
    from search_spaces import default_token_counts
    from tests.rsi.conftest import tiny_config

    search = Search(tiny_config(), tmp_path / "run", engine=tiny_plain)
    task = load_suite(tiny_config().data.suite, "train")[0]
    counts = search.evals.counts(task)
    assert counts == tiny_plain.render(list(task.messages)).message_tokens
    assert counts != default_token_counts(list(task.messages))
