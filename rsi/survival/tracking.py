"""MLflow records of a survival search: ``rsi.tracking.MLflowTracker`` with the survival metrics.

The same layout as the cache search (a parent run per search, a child run per archived
candidate with its parameters, program and lineage tags, idempotent across re-runs through
``mlflow_runs.json``); only the metrics differ: ``{split}_resume_ttft_p95_s``,
``{split}_recompute_tokens``, ``{split}_jct_mean_s``, ``{split}_peak_pool_bytes`` (means over
the split's traces), and ``akv.fidelity`` is ``simulator``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rsi.tracking import MLflowTracker


class SurvivalTracker(MLflowTracker):
    """Tracks a survival search in MLflow (see the module docstring)."""

    def __init__(self, run_dir: Path, experiment: str, uri: str = "") -> None:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        super().__init__(Path(run_dir), experiment, uri)

    def candidate(self, c: Any, source: str | None, results: list[Any]) -> None:
        known = c.id in self.state.get("candidates", {})
        super().candidate(c, source, [])
        if not known:
            self.client.set_tag(self.state["candidates"][c.id], "akv.fidelity", "simulator")

    def _metrics(self, rid: str, c: Any) -> None:
        for split, m in (("train", c.train), ("heldout", c.heldout)):
            if m is None or not m.ok:
                continue
            for key, value in m.to_dict().items():
                if key not in ("error", "failed"):
                    self.client.log_metric(rid, f"{split}_{key}", float(value))

    def finish(self, front: list[dict[str, Any]], figures: list[Path], status: str) -> None:
        assert self.parent_id is not None
        cols = ("label", "expert", "train_resume_ttft_p95_s", "train_recompute_tokens", "heldout_resume_ttft_p95_s",
                "heldout_recompute_tokens")
        self.client.log_table(self.parent_id, data={k: [row.get(k) for row in front] for k in cols},
                              artifact_file="pareto_front.json")
        for name in ("headline.json", "archive.json"):
            path = self.run_dir / name
            if path.exists():
                self.client.log_artifact(self.parent_id, str(path))
        for fig in figures:
            if fig.exists():
                self.client.log_artifact(self.parent_id, str(fig), "figures")
        self.client.set_terminated(self.parent_id, status)
