"""Experiment tracking: a parent MLflow run per search, a child run per evaluated candidate.

The default store is sqlite in the run directory (MLflow's ``file:`` store is gone), artifacts
next to it. Runs are created with an explicit experiment id through ``MlflowClient`` (children
carry ``mlflow.parentRunId``), and the experiment is also made current with
``mlflow.set_experiment`` so that nested runs never land in "Default". Logging is idempotent
across resumes: the candidate -> run mapping is kept in ``mlflow_runs.json``.

Shared by both tracks: :class:`MLflowTracker` logs the cache track's metrics, and
``rsi.survival.tracking.SurvivalTracker`` overrides what differs (its metrics, the front's columns).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from evals.cache.evaluator import TaskResult
from rsi.archive import CostPassScores, Record
from rsi.rundir import write_text


class Tracker:
    """No-op tracker (the interface); :class:`MLflowTracker` records for real."""

    def start(self, config: dict[str, Any]) -> None: ...

    def candidate(self, c: Record[Any], source: str | None, results: list[TaskResult]) -> None: ...

    def heldout(self, c: Record[Any]) -> None: ...

    def generation(self, g: int, metrics: dict[str, float]) -> None: ...

    def finish(self, front: list[dict[str, Any]], figures: list[Path], status: str) -> None: ...


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v if not isinstance(v, list | tuple) else json.dumps(list(v))
    return out


class MLflowTracker(Tracker):
    """Tracks a search in MLflow.

    Args:
        run_dir: the search's run directory (holds the state file and, by default, the store).
        experiment: experiment name.
        uri: tracking URI ("" = ``sqlite:///<run_dir>/mlflow.db``).
    """

    def __init__(self, run_dir: Path, experiment: str, uri: str = ""):
        import mlflow
        from mlflow.tracking import MlflowClient

        self.run_dir = run_dir
        self.uri = uri or f"sqlite:///{run_dir / 'mlflow.db'}"
        mlflow.set_tracking_uri(self.uri)
        self.client = MlflowClient(self.uri)
        exp = self.client.get_experiment_by_name(experiment)
        if exp is None:
            artifacts = (run_dir / "mlartifacts").resolve().as_uri()
            self.experiment_id = self.client.create_experiment(experiment, artifact_location=artifacts)
        else:
            self.experiment_id = exp.experiment_id
        mlflow.set_experiment(experiment_id=self.experiment_id)
        self.state_path = run_dir / "mlflow_runs.json"
        self.state: dict[str, Any] = json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
        self.parent_id: str | None = self.state.get("parent")

    def _save(self) -> None:
        write_text(self.state_path, json.dumps(self.state))

    def start(self, config: dict[str, Any]) -> None:
        if self.parent_id is None:
            run = self.client.create_run(self.experiment_id, run_name=str(config.get("name", "search")),
                                         tags={"akv.kind": "search", "akv.run_dir": str(self.run_dir)})
            self.parent_id = run.info.run_id
            self.state["parent"] = self.parent_id
            for k, v in _flatten(config).items():
                self.client.log_param(self.parent_id, k, str(v)[:500])
            self.client.log_dict(self.parent_id, config, "config.json")
            self._save()
        else:
            self.client.update_run(self.parent_id, status="RUNNING")

    def candidate(self, c: Record[Any], source: str | None, results: list[TaskResult]) -> None:
        assert self.parent_id is not None
        runs = self.state.setdefault("candidates", {})
        if c.id in runs:
            return
        tags = {"mlflow.parentRunId": self.parent_id, "akv.kind": "expert" if c.expert else "candidate",
                "akv.candidate": c.id, "akv.program": c.program, "akv.proposer": c.proposer,
                "akv.parents": ",".join(c.parents), "akv.status": c.status.value, "akv.generation": str(c.generation),
                "akv.fidelity": "model"}  # every archived number is the model's (proxy numbers: fidelity.json)
        if c.reason:
            tags["akv.reason"] = c.reason[:4000]
        run = self.client.create_run(self.experiment_id, run_name=c.label, tags=tags)
        rid = run.info.run_id
        for k, v in c.params.items():
            self.client.log_param(rid, f"param.{k}", str(v)[:500])
        self.client.log_param(rid, "generation", c.generation)
        self._metrics(rid, c)
        if source is not None:
            self.client.log_text(rid, source, "program.py")
        if results:
            import pandas as pd

            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "task_results.parquet"
                pd.DataFrame([r.to_row() for r in results]).to_parquet(path)
                self.client.log_artifact(rid, str(path))
        self.client.set_terminated(rid, "FINISHED" if c.status.value == "ok" else "FAILED")
        runs[c.id] = rid
        self._save()

    def _metrics(self, rid: str, c: Record[CostPassScores]) -> None:
        for split, m in (("train", c.train), ("heldout", c.heldout)):
            if m is None or not m.ok:
                continue
            self.client.log_metric(rid, f"{split}_pass_rate", m.pass_rate)
            self.client.log_metric(rid, f"{split}_cost_cents_mean", m.cost_cents_mean)
            for fam, v in m.per_family.items():
                self.client.log_metric(rid, f"{split}_pass_{fam}", v)
            for part, v in m.cost_breakdown.items():
                self.client.log_metric(rid, f"{split}_cost_{part}_cents", v)

    def heldout(self, c: Record[Any]) -> None:
        rid = self.state.get("candidates", {}).get(c.id)
        if rid is None or c.heldout is None:
            return
        done = self.state.setdefault("heldout", [])
        if c.id in done:
            return
        self._metrics(rid, c)
        done.append(c.id)
        self._save()

    def generation(self, g: int, metrics: dict[str, float]) -> None:
        assert self.parent_id is not None
        logged = self.state.setdefault("generations", [])
        if g in logged:
            return
        for k, v in metrics.items():
            self.client.log_metric(self.parent_id, k, v, step=g)
        logged.append(g)
        self._save()

    def finish(self, front: list[dict[str, Any]], figures: list[Path], status: str) -> None:
        assert self.parent_id is not None
        self.client.log_table(self.parent_id, data={k: [row.get(k) for row in front] for k in
                                                    ("label", "expert", "train_pass_rate", "train_cost_cents_mean",
                                                     "heldout_pass_rate", "heldout_cost_cents_mean")},
                              artifact_file="pareto_front.json")
        for fig in figures:
            if fig.exists():
                self.client.log_artifact(self.parent_id, str(fig), "figures")
        self._fidelity()
        self.client.set_terminated(self.parent_id, status)

    def _fidelity(self) -> None:
        """The cascade's check and speeds (``fidelity.json``) on the parent run: the file, and as
        ``proxy.*`` metrics, so predicted numbers never sit among the model's."""
        assert self.parent_id is not None
        path = self.run_dir / "fidelity.json"
        if not path.exists():
            return
        fid = json.loads(path.read_text())
        self.client.log_artifact(self.parent_id, str(path))
        speed = fid.get("speed") or {}
        values = {"proxy.spearman": fid.get("spearman"), "proxy.policies_compared": fid.get("policies"),
                  "proxy.screened_trials": fid.get("screened_trials"), "proxy.speed_ratio": speed.get("ratio"),
                  **{f"proxy.{f}_evals_per_min": v for f, v in (speed.get("per_minute") or {}).items()}}
        for k, v in values.items():
            if isinstance(v, (int, float)) and v == v:  # (a NaN correlation is left out)
                self.client.log_metric(self.parent_id, k, float(v))
