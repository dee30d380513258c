"""What a search's proposers read about the train tasks and its candidates.

:func:`proposer_hindsight` is the oracle's view of the train tasks (``oracle.feedback``: the
evidence rule, or searched with the model; plus the guide tasks at zero forwards, every probe
assumed passed by the full cache). :class:`Feedback` is what a proposer learns about a parent:
its train numbers, the probes it failed, and, with the hindsight, what it kept that the oracle
dropped and dropped that the oracle needed, and the rule table read off the hindsight.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from evals.cache.evaluator import PolicySpec, Replay, TaskResult
from evals.cache.fidelity import EvidenceTable, ProxyReplay
from evals.tasks.schema import Task
from rsi.cache.archive import Candidate
from rsi.cache.config import SearchConfig
from rsi.cache.evaluations import Evaluations
from rsi.cache.hindsight import Hindsight, TaskFeatures, build_hindsight, drops_of, hindsight_table, report
from search_spaces import Episode, run_program


def proposer_hindsight(config: SearchConfig, evals: Evaluations, proxy: ProxyReplay | None, train: list[Task],
                       guide: list[Task], say: Callable[[str], None]) -> Hindsight | None:
    """The oracle's view of ``train`` (and ``guide``) for proposers that read it (``oracle.feedback``;
    ``proxy``: the cascade's, which holds the guide tasks' assumed outcomes), or ``None``."""
    mode = config.oracle.feedback
    if mode == "none" or config.proposer.kind not in ("synthesis", "llm"):
        return None
    fulls = evals.evaluate(PolicySpec("full"), train)
    episodes = [Episode.of(list(t.messages), evals.counts(t)) for t in train]
    guide_fulls: list[TaskResult] = []
    if guide:  # the full cache at its assumed outcomes: every probe required
        assumed = proxy or ProxyReplay(evals.dry_engine(), EvidenceTable.assumed(guide), evals.eval_config)
        guide_fulls = assumed.evaluate_many(PolicySpec("full"), guide)
    replay = Replay(evals.dry_engine(), evals.eval_config)  # type: ignore[arg-type]  # (accounts only)

    def cost(spec: PolicySpec, task: Task) -> float:
        return replay.cost(spec, task).cents

    def judge(spec: PolicySpec, task: Task) -> TaskResult:
        return evals.evaluate(spec, [task])[0]

    if mode == "model":
        evals.progress.replan(config.oracle.budget * len(train))
    found = build_hindsight(train, episodes, fulls, cost, judge if mode == "model" else None, config.oracle.budget)
    guided = ""
    if guide:
        more = build_hindsight(guide, [Episode.of(list(t.messages), evals.counts(t)) for t in guide], guide_fulls, cost)
        found = found + more
        guided = f" + evidence on {len(guide)} guide tasks"
    say(f"hindsight for the proposer: {found.source} on {len(train)} train tasks{guided} "
        f"({sum(len(n) for n in found.needed)} needed messages)")
    return found


class Feedback:
    """What a proposer learns about a candidate (:meth:`of`), from ``evals``' stored train results
    and ``hindsight`` (when the search has one)."""

    def __init__(self, evals: Evaluations, hindsight: Hindsight | None):
        self.evals = evals
        self.hindsight = hindsight
        self._features: list[TaskFeatures] | None = None  # the hindsight episodes' features, made once

    def of(self, c: Candidate) -> dict[str, Any]:
        """``c``'s per-family pass rates, cost breakdown, failed probes (and its hindsight report)."""
        results = self.evals.stored(self.evals.candidate_spec(c), self.evals.train)
        failed = []
        for r in results:
            if r is None:
                continue
            for p in r.probes:
                if not p.passed:
                    failed.append({"task": r.task_id, "family": r.family, "kind": p.kind, "answer": p.answer,
                                   "chosen": p.choice, "evidence_messages_dropped": list(p.evidence_dropped)})
        out: dict[str, Any] = {"train": c.train.to_dict() if c.train else None, "failed_probes": failed[:8]}
        if self.evals.eval_config.frame_guard:
            out["frame_guard"] = True
        if self.hindsight is not None and c.spec == "program":
            out["hindsight"] = self.report(c)
            out["hindsight_table"] = self.table()
        return out

    def features(self) -> list[TaskFeatures]:
        assert self.hindsight is not None
        if self._features is None:
            self._features = [TaskFeatures(e) for e in self.hindsight.episodes]
        return self._features

    def table(self) -> dict[str, list[str]]:
        """The rule table read off the hindsight: the cells to keep, and the ones to drop once read, the
        most token reads saved first (what the synthesis proposer's ``table`` operator writes)."""
        assert self.hindsight is not None
        table = hindsight_table(self.hindsight, self.features())
        dropped = sorted(table.dropped.items(), key=lambda x: (-x[1], str(x[0])))
        return {"keep": sorted(str(c) for c in table.kept), "drop": [str(c) for c, _ in dropped]}

    def report(self, c: Candidate) -> list[dict[str, Any]]:
        """What ``c`` kept that the oracle dropped and dropped that it needed, per train task, worst first."""
        assert self.hindsight is not None
        run = run_program(self.evals.files.program(c.program), dict(c.params), list(self.hindsight.episodes))
        if not run.ok:
            return []
        drops = [drops_of(ep[-1].wire) if ep else {} for ep in run.decisions]
        return report(self.hindsight, drops, self.features())
